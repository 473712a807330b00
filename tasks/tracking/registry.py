"""The model registry: every exported checkpoint a version of its run's registered model
(``tabula-<run>``) as an MLflow PyTorch model, the promoted one aliased ``champion``; and the
way back, from a ``models:/...`` URI to the tabula checkpoint (`resolve_model`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tabula.errors import TabulaError, UsageError
from tasks.tracking.store import connect, missing_store, resolve_uri
from tasks.tracking.tags import TAG_SHA

#: The artifact folder of a checkpoint's MLflow model, under its iteration's run.
MODEL_FOLDER = "model"
#: The alias of a run's registered model that names its promoted checkpoint.
CHAMPION = "champion"


class WeightsChangedError(TabulaError):
    """The checkpoint to register holds other weights than its training recorded (the file
    was replaced after the stage finished); nothing is uploaded or registered."""


def register_checkpoint(
    client: Any, name: str, run_id: str, checkpoint: Path, sha256: str, tags: Mapping[str, Any]
) -> str:
    """Log ``checkpoint`` under the run as an MLflow PyTorch model (`save_pytorch_model`) and
    make it a version of model ``name``, tagged with ``tags`` (idempotent: a version of the run
    tagged with weights ``sha256`` is returned as it is).

    ``sha256`` is what training recorded (`model.network.weights_sha256`). The checkpoint is
    copied first and the copy's weights are hashed: that copy is what is exported and
    uploaded, so the version's ``tabula.weights_sha256`` tag is the hash of what it holds, and
    a checkpoint whose weights differ from ``sha256`` is refused (`WeightsChangedError`)."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name)
    except MlflowException:
        pass  # already registered
    existing = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    for version in existing:
        if version.tags.get(TAG_SHA) == sha256:
            return version.version
    with tempfile.TemporaryDirectory(prefix="tabula-model-") as tmp:
        upload = Path(tmp) / "checkpoint" / checkpoint.name
        upload.parent.mkdir()
        shutil.copyfile(checkpoint, upload)
        all_tags = {TAG_SHA: _uploaded_weights(checkpoint, upload, sha256)}
        all_tags |= {k: str(v) for k, v in tags.items()}
        folder = save_pytorch_model(upload, Path(tmp) / MODEL_FOLDER, all_tags)
        client.log_artifacts(run_id, str(folder), MODEL_FOLDER)
    source = f"{client.get_run(run_id).info.artifact_uri}/{MODEL_FOLDER}"
    return client.create_model_version(name, source=source, run_id=run_id, tags=all_tags).version


def _uploaded_weights(checkpoint: Path, upload: Path, recorded: str) -> str:
    """The weights sha256 of ``upload`` (the copy of ``checkpoint`` that is uploaded), refused
    unless it is ``recorded``."""
    from model.checkpoint import CheckpointError, load_checkpoint
    from model.network import weights_sha256

    try:
        found = weights_sha256(load_checkpoint(upload)[0])
    except CheckpointError as unreadable:  # named as the user knows it, not as the copy
        raise CheckpointError(str(unreadable).replace(str(upload), str(checkpoint))) from None
    if found != recorded:
        raise WeightsChangedError(
            f"{checkpoint}: its weights are not the ones its training recorded (sha256 "
            f"{found[:12]}…, recorded {recorded[:12]}…); nothing was registered: restore the "
            "file (`dvc checkout` of its iteration's train stage) and run the command again"
        )
    return found


def save_pytorch_model(checkpoint: Path, folder: Path, lineage: Mapping[str, str]) -> Path:
    """Write the network of ``checkpoint`` to ``folder`` as an MLflow PyTorch model.

    The network is exported with ``torch.export`` (MLflow's ``pt2`` format: a traced graph, no
    pickled classes, so ``mlflow.pytorch.load_model`` needs neither tabula nor its code), with
    a signature (planes ``float32[B, 17, N, N]`` in; ``policy`` logits ``[B, N*N + 1]`` and
    ``value`` ``[B]`` out), an input example (the empty board, each side to move), the lineage
    as the model's metadata, and the tabula checkpoint itself under ``extra_files/`` (what
    ``tabula gtp --model models:/...`` plays with).
    """
    import mlflow.pytorch
    import numpy as np
    import torch
    from mlflow.models import infer_signature

    from model.checkpoint import load_checkpoint
    from tabula.features import HISTORY, planes

    net, _ = load_checkpoint(checkpoint)
    empty = np.zeros((HISTORY, net.board_size**2), dtype=np.int8)
    example = np.stack([planes(empty, 1), planes(empty, -1)]).astype(np.float32)
    with torch.no_grad():
        logits, value = net(torch.from_numpy(example))
    signature = infer_signature(example, {"policy": logits.numpy(), "value": value.numpy()})
    mlflow.pytorch.save_model(
        net,
        str(folder),
        signature=signature,
        input_example=example,
        pip_requirements=[f"torch=={torch.__version__}"],
        extra_files=[str(checkpoint)],
        metadata=dict(lineage),
    )
    return folder


def model_version(uri: str, tracking_uri: str, project: Path | None) -> Any:
    """The MLflow model version that ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION`` names.

    A store that is not there (it is not created), a malformed URI and an unknown model, alias
    or version are each one line (``UsageError``) naming the registered models."""
    store = missing_store(resolve_uri(tracking_uri, project))
    if store is not None:  # reading a store must not create one
        raise UsageError(f"{uri}: no MLflow store at {store} (set pipeline.mlflow_tracking_uri)")
    rest = uri.removeprefix("models:/")
    if not uri.startswith("models:/") or not ("@" in rest or "/" in rest):
        raise UsageError(f"{uri}: expected models:/NAME@ALIAS or models:/NAME/VERSION")
    client = connect(tracking_uri, project)
    from mlflow.exceptions import MlflowException

    try:
        if "@" in rest:
            name, alias = rest.split("@", 1)
            return client.get_model_version_by_alias(name, alias)
        name, number = rest.rsplit("/", 1)
        return client.get_model_version(name, number)
    except MlflowException as error:  # no such model, alias or version
        names = sorted(m.name for m in client.search_registered_models())
        raise UsageError(
            f"{uri}: {str(error.message).splitlines()[0]} (registered models: "
            f"{', '.join(names) or 'none'})"
        ) from None


def resolve_model(
    uri: str, tracking_uri: str, project: Path | None, dst: Path
) -> tuple[Path, dict]:
    """Download the checkpoint behind ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION``.

    Returns the local checkpoint file and the model version's tags (the lineage).
    """
    version = model_version(uri, tracking_uri, project)
    resolved = resolve_uri(tracking_uri, project)
    import mlflow.artifacts

    os.makedirs(dst, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(
        artifact_uri=version.source, dst_path=str(dst), tracking_uri=resolved
    )
    local_path = Path(local)
    if (local_path / "MLmodel").exists():  # an MLflow model: the checkpoint is an extra file
        local_path = local_path / "extra_files"
    files = sorted(local_path.rglob("*.pt")) if local_path.is_dir() else [local_path]
    if not files:
        raise UsageError(f"{uri}: the model version holds no checkpoint file")
    return files[0], dict(version.tags)
