"""The model registry: every exported checkpoint an MLflow logged model of its iteration's run
(``tabula-<run>-iter-NNNN``, an MLflow PyTorch model, its evaluation metrics linked to it, so
the experiment's Models tab and ``mlflow.search_logged_models`` list and rank the checkpoints)
and a version of its run's registered model (``tabula-<run>``), the promoted one aliased
``champion``; and the way back, from a ``models:/...`` URI to the tabula checkpoint
(`resolve_model`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tabula.errors import TabulaError, UsageError
from tasks.tracking.store import as_default_store, connect, missing_store, resolve_uri
from tasks.tracking.tags import TAG_ITERATION, TAG_SHA

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
    """Log ``checkpoint`` as a logged model of run ``run_id`` (`save_pytorch_model`) and make
    it a version of model ``name`` (its ``model_id`` names the logged model), tagged with
    ``tags``; returns the version. The logged model is named ``NAME-iter-NNNN`` after the
    ``tabula.iteration`` tag (``NAME`` without one). Idempotent: a version of the run tagged
    with weights ``sha256`` is returned as it is, and a logged model of the run with those
    weights is reused (a kill between the two steps).

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
        model = _logged_model(client, _model_name(name, all_tags), run_id, folder, all_tags)
    # MLflow's SQL registry looks the logged model of a ``models:/<id>`` source up in the
    # process's default store, not in the client's (its own TODO says so): make the client's
    # store the default while the version is created (one registration at a time: promote).
    with as_default_store(client.tracking_uri):
        version = client.create_model_version(
            name, f"models:/{model.model_id}", run_id, tags=all_tags, model_id=model.model_id
        )
    return version.version


def _logged_model(
    client: Any, name: str, run_id: str, folder: Path, tags: Mapping[str, str]
) -> Any:
    """Run ``run_id``'s READY logged model with ``tags``' weights, made from ``folder`` (the
    exported model) unless the run already has it."""
    experiment_id = client.get_run(run_id).info.experiment_id
    for model in logged_models_of(client, experiment_id, run_id):
        if model.tags.get(TAG_SHA) == tags[TAG_SHA] and str(model.status) == "READY":
            return model
    model = client.create_logged_model(
        experiment_id, name=name, source_run_id=run_id, tags=dict(tags), model_type="tabula"
    )
    client.log_model_artifacts(model.model_id, str(folder))
    return client.finalize_logged_model(model.model_id, "READY")


def logged_model_id(version: Any) -> str | None:
    """The logged model a model version is (its ``models:/<id>`` source: MLflow's SQL registry
    keeps no ``model_id`` of its own); None for a version registered from a run's artifacts,
    as before checkpoints were logged models."""
    source = str(version.source)
    return source.removeprefix("models:/") if source.startswith("models:/m-") else None


def _model_name(name: str, tags: Mapping[str, str]) -> str:
    iteration = tags.get(TAG_ITERATION)
    return name if iteration is None else f"{name}-iter-{int(iteration):04d}"


def logged_models_of(client: Any, experiment_id: str, run_id: str) -> list[Any]:
    """The logged models that run ``run_id`` made (an iteration's checkpoint)."""
    found = client.search_logged_models(
        [experiment_id], filter_string=f"source_run_id = '{run_id}'"
    )
    return list(found)


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
    a signature (planes ``float32[B, 17, N, N]`` in, with the derived planes after them for a
    network that takes them, `tabula.inputs.with_inputs`; ``policy`` logits
    ``[B, N*N + 1]`` and ``value`` ``[B]`` out, and for a network with the ownership and score
    heads ``ownership`` ``[B, N*N]`` and ``score`` ``[B]`` in points:
    `model.network.ExportedNetwork`), an input
    example (the empty board, each side to move), the lineage as the model's metadata, and the
    tabula checkpoint itself under ``extra_files/`` (what ``tabula gtp --model models:/...``
    plays with).
    """
    import mlflow.pytorch
    import numpy as np
    import torch
    from mlflow.models import infer_signature

    from model.checkpoint import load_checkpoint
    from model.network import ExportedNetwork
    from tabula.features import HISTORY, planes
    from tabula.inputs import with_inputs

    net, _ = load_checkpoint(checkpoint)
    exported = ExportedNetwork(net).eval()
    empty = np.zeros((HISTORY, net.board_size**2), dtype=np.int8)
    example = np.stack([planes(empty, 1), planes(empty, -1)])
    example = with_inputs(example, net.shape.inputs).astype(np.float32)
    with torch.no_grad():
        outputs = exported(torch.from_numpy(example))
    names = exported.outputs
    signature = infer_signature(
        example, {k: t.numpy() for k, t in zip(names, outputs, strict=True)}
    )
    mlflow.pytorch.save_model(
        exported,
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
    source, model_id = version.source, logged_model_id(version)
    if model_id is not None:  # (MLflow would look a models:/ id up in the default store)
        source = connect(tracking_uri, project).get_logged_model(model_id).artifact_location
    local = mlflow.artifacts.download_artifacts(
        artifact_uri=source, dst_path=str(dst), tracking_uri=resolved
    )
    local_path = Path(local)
    if (local_path / "MLmodel").exists():  # an MLflow model: the checkpoint is an extra file
        local_path = local_path / "extra_files"
    files = sorted(local_path.rglob("*.pt")) if local_path.is_dir() else [local_path]
    if not files:
        raise UsageError(f"{uri}: the model version holds no checkpoint file")
    return files[0], dict(version.tags)
