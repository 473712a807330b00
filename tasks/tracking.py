"""MLflow: the only module that calls MLflow.

Layout of a run in the tracking store (docs/reproducing.md, "MLflow"):

* one experiment per project (``tabula``, or ``MLFLOW_EXPERIMENT_NAME``; a run begun in the
  per-run experiment ``tabula/<run>`` of earlier versions stays there), marked as model
  training so that the UI opens on its runs; inside it one parent run per pipeline run (kind
  ``pipeline``, tag ``tabula.run``) and one child run per iteration (kind ``iteration``), found
  again by their tags on resume so that a killed and restarted pipeline never leaves orphan
  runs for the same stage; each carries the tabula run's identity (tag ``tabula.run_uid``, the
  run folder's ``uid`` file), so that two projects sharing a store never take each other's runs
  for their own (`tasks.runs.own_pipeline_run`);
* the full config as params of the parent and of every child; metrics with their step (the
  global training step for losses and the learning rate, the iteration for everything else);
* datasets through ``log_inputs`` (source: the DVC path, digest: the DVC hash);
* every exported checkpoint a version of the run's own registered model (``tabula-<run>``),
  the promoted one carrying the alias ``champion``.

``MLFLOW_TRACKING_URI``, when set, takes the place of the default store
(``pipeline.mlflow_tracking_uri`` left at ``sqlite:///mlflow/mlflow.db``); a store set in the
config wins.

Active runs are per thread in MLflow's fluent API, so everything here goes through an explicit
``MlflowClient`` and explicit run ids.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tabula.config import PipelineConfig
from tabula.errors import TabulaError, UsageError, first_line

TAG_RUN = "tabula.run"
TAG_KIND = "tabula.kind"
TAG_ITERATION = "tabula.iteration"
TAG_SHA = "tabula.weights_sha256"
#: The tabula run's identity (`tasks.runs.run_uid`): its runs, apart from other projects'
#: runs of the same name in a shared store. Runs begun before it have none.
TAG_UID = "tabula.run_uid"
#: The artifact folder of a checkpoint's MLflow model, under its iteration's run.
MODEL_FOLDER = "model"
#: ``MLFLOW_TRACKING_URI`` as the process started with it. MLflow's ``set_tracking_uri``,
#: which Lightning's logger calls for the store each training stage writes to, rewrites the
#: variable in-process; that must not redirect later stages, or another project's.
ENV_TRACKING_URI = os.environ.get("MLFLOW_TRACKING_URI")
#: The experiment of a project's runs unless ``MLFLOW_EXPERIMENT_NAME`` says otherwise.
EXPERIMENT = "tabula"
#: MLflow's experiment kind for model training: the UI opens such an experiment on its runs,
#: not on the GenAI overview (traces, tokens).
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
#: The pre-flight request's bounds (`require_reachable`): MLflow's own defaults (7 retries,
#: backoff factor 2, 120 s a request) wait minutes on a store that is down; these, seconds.
PREFLIGHT_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": 2,
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": 1,
    "MLFLOW_HTTP_REQUEST_TIMEOUT": 10,
}
#: Seconds the pre-flight check waits for a database store to accept a connection.
PREFLIGHT_CONNECT_S = 10
#: The databases MLflow keeps a tracking store in, besides SQLite (a ``+driver`` may follow).
DATABASES = ("postgresql", "mysql", "mssql")


class TrackingStoreError(TabulaError):
    """The MLflow tracking store cannot be reached (a server or database that is down)."""


def _quiet() -> None:
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="mlflow")


def connect(tracking_uri: str, project: Path | None = None):
    """A client for ``tracking_uri``; a relative ``sqlite:///`` path is taken from ``project``.

    Creating the client also creates the SQLite schema, so call this once before starting
    parallel writers.
    """
    from mlflow import MlflowClient

    _quiet()  # after the import: importing mlflow configures its own loggers at INFO

    uri = resolve_uri(tracking_uri, project)
    if uri.startswith("sqlite:///"):
        _ensure_sqlite_store(Path(uri.removeprefix("sqlite:///")))
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.search_experiments(max_results=1)  # creates the tables on first use
    return client


def _ensure_sqlite_store(path: Path) -> None:
    """Create a missing SQLite store whole or not at all.

    MLflow builds its schema in dozens of migrations; a process killed halfway (SIGKILL,
    Ctrl-C, a full disk) would leave a store that no later run can open ("table
    _alembic_tmp_runs already exists"). So a new store is built under a temporary name and
    linked into place once complete; when another process links one first, that one is used.
    """
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")  # SQLite creates it
        try:
            store = SqlAlchemyStore(f"sqlite:///{tmp}", DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
            store.engine.dispose()
            with contextlib.suppress(FileExistsError, FileNotFoundError):
                os.link(tmp, path)  # never replaces: a store made meanwhile wins
        finally:
            tmp.unlink(missing_ok=True)
    # Left by a creator that was killed; one still at work just loses its link (see above).
    for stale in path.parent.glob(f".{path.name}.*.tmp*"):
        stale.unlink(missing_ok=True)


def require_reachable(tracking_uri: str, project: Path | None = None) -> None:
    """Raise `TrackingStoreError` (one line: the store and the first line of the cause) when
    the store ``tracking_uri`` resolves to (`resolve_uri`) cannot be reached, within seconds.

    A tracking server (``http``, ``https``) gets one cheap request, its retries and timeout
    bounded (`PREFLIGHT_HTTP`, lower values in the environment kept, the environment restored
    after); a database (`DATABASES`) one connection, bounded by `PREFLIGHT_CONNECT_S`. A
    SQLite or file store is created on first use and is not checked: nothing is created here.
    """
    uri = resolve_uri(tracking_uri, project)
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme in ("http", "https"):
        failure = _http_failure(uri)
    elif scheme in DATABASES:
        failure = _database_failure(uri, scheme)
    else:
        return
    if failure is not None:
        raise TrackingStoreError(f"MLflow store {without_password(uri)} {failure}")


def _http_failure(uri: str) -> str | None:
    """Why a bounded ``search_experiments`` on a tracking server failed, or None."""
    from mlflow.exceptions import MlflowException

    from mlflow import MlflowClient

    _quiet()
    before = {name: os.environ.get(name) for name in PREFLIGHT_HTTP}
    for name, bound in PREFLIGHT_HTTP.items():
        current = before[name]
        lower = current is not None and current.isdigit() and int(current) < bound
        os.environ[name] = current if lower else str(bound)
    retries = logging.getLogger("urllib3.connectionpool")  # a warning line per retry
    level = retries.level
    retries.setLevel(logging.ERROR)
    try:
        MlflowClient(tracking_uri=uri, registry_uri=uri).search_experiments(max_results=1)
    except MlflowException as error:
        return _unreachable(error)
    finally:
        retries.setLevel(level)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return None


def _database_failure(uri: str, scheme: str) -> str | None:
    """Why one connection to a database store failed, or None (one try: MLflow's own engine
    retries for about 100 s)."""
    import sqlalchemy
    from sqlalchemy.exc import SQLAlchemyError

    args = {"connect_timeout": PREFLIGHT_CONNECT_S} if scheme in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(uri, connect_args=args)
    except ImportError as error:  # SQLAlchemy's default driver for the scheme is not installed
        return (
            f"has no database driver here: {first_line(error)} (install it, or name an "
            f"installed one, as in {scheme}+DRIVER://...)"
        )
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as error:
        return _unreachable(error)
    finally:
        engine.dispose()
    return None


def _unreachable(error: BaseException) -> str:
    return (
        f"cannot be reached: {first_line(_innermost(error))} "
        "(start it, or set pipeline.mlflow_tracking_uri)"
    )


def _innermost(error: BaseException) -> BaseException:
    """The exception at the bottom of ``error``'s chain ("Connection refused" under the
    wrappers of MLflow, requests, urllib3 or SQLAlchemy)."""
    while (error.__cause__ or error.__context__) is not None:
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return error


def without_password(uri: str) -> str:
    """``uri`` with the password of its ``user:password@`` part shown as ``***``."""
    return re.sub(r"^([^:/]+://[^/:@]*):[^/@]*@", r"\1:***@", uri)


def experiment_name() -> str:
    """The project's experiment: ``MLFLOW_EXPERIMENT_NAME`` when set, else ``tabula``."""
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT


def resolve_uri(tracking_uri: str, project: Path | None) -> str:
    """The store to use: ``MLFLOW_TRACKING_URI`` in place of the default store when set; a
    relative ``sqlite:///`` path taken from ``project`` (else the working directory)."""
    default = PipelineConfig.model_fields["mlflow_tracking_uri"].default
    if tracking_uri == default and ENV_TRACKING_URI:
        tracking_uri = ENV_TRACKING_URI
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:////"):
        rel = tracking_uri.removeprefix("sqlite:///")
        base = project or Path.cwd()
        return f"sqlite:///{(base / rel).resolve()}"
    return tracking_uri


def is_uri(location: str) -> bool:
    """Whether an artifact location is a URI (``s3://...``; ``mlflow-artifacts:/...``, a
    tracking server's own store) rather than a folder."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", location) is not None


def experiment(client, name: str, artifact_root: Path | str | None) -> str:
    """The id of experiment ``name``, created (with its artifact location) when missing, and
    marked as model training (`EXPERIMENT_KIND`)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        for key, value in EXPERIMENT_KIND.items():
            if found.tags.get(key) != value:
                client.set_experiment_tag(found.experiment_id, key, value)
        return found.experiment_id
    location = None
    if artifact_root is not None:
        folder = name.replace("/", "_")
        root = str(artifact_root)
        # A URI (s3://..., or mlflow-artifacts:/... for a tracking server's own artifact
        # store) or a local folder.
        location = (
            f"{root.rstrip('/')}/{folder}" if is_uri(root) else str(Path(root).resolve() / folder)
        )
    return client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_KIND)


def find_or_create_run(
    client,
    experiment_id: str,
    key: Mapping[str, str],
    run_name: str,
    parent_id: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> str:
    """The run whose tags equal ``key`` (reopened if it was killed), or a new one."""
    clauses = [f"tags.`{k}` = '{v}'" for k, v in key.items()]
    if parent_id:
        clauses.append(f"tags.`mlflow.parentRunId` = '{parent_id}'")
    found = client.search_runs([experiment_id], filter_string=" and ".join(clauses), max_results=1)
    all_tags = {**key, **(tags or {})}
    if parent_id:
        all_tags["mlflow.parentRunId"] = parent_id
    if found:
        reopen(client, found[0].info.run_id, tags or {}, status=found[0].info.status)
        return found[0].info.run_id
    return create_run(client, experiment_id, run_name, all_tags)


def reopen(client, run_id: str, tags: Mapping[str, str], status: str | None = None) -> None:
    """Mark a found run RUNNING again unless it had finished, and set ``tags`` on it. status:
    the run's, when the search that found it gave it (else it is read)."""
    status = client.get_run(run_id).info.status if status is None else status
    if status != "FINISHED":
        client.update_run(run_id, status="RUNNING")
    set_tags(client, run_id, tags)


def create_run(client, experiment_id: str, run_name: str, tags: Mapping[str, str]) -> str:
    return client.create_run(experiment_id, run_name=run_name, tags=dict(tags)).info.run_id


def pipeline_runs(client, experiment_id: str, run: str) -> list[tuple[str, str | None]]:
    """(MLflow run id, identity tag or None) of every pipeline run named ``run`` in the
    experiment, oldest first."""
    query = f"tags.`{TAG_RUN}` = '{run}' and tags.`{TAG_KIND}` = 'pipeline'"
    found = client.search_runs(
        [experiment_id], filter_string=query, order_by=["attributes.start_time ASC"]
    )
    return [(r.info.run_id, r.data.tags.get(TAG_UID)) for r in found]


def experiment_id(client, name: str) -> str | None:
    """The id of experiment ``name``, None when there is none (nothing is created)."""
    found = client.get_experiment_by_name(name)
    return None if found is None else found.experiment_id


def source_tags(commit: str) -> dict[str, str]:
    """MLflow's standard source tags for code at git ``commit`` (`versioning.code_commit`: a
    sha, with ``-dirty`` when files differ, or ``unknown``), shown in the UI's run overview."""
    tags = {"mlflow.source.name": "tabula run", "mlflow.source.type": "LOCAL"}
    if commit != "unknown":
        tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
    return tags


def set_tags(client, run_id: str, tags: Mapping[str, Any]) -> None:
    from mlflow.entities import RunTag

    if tags:
        client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def log_params(client, run_id: str, params: Mapping[str, Any]) -> None:
    """Log params once; a resumed run with the same config logs nothing new."""
    from mlflow.entities import Param

    logged = client.get_run(run_id).data.params
    new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in logged]
    for start in range(0, len(new), 100):
        client.log_batch(run_id, params=new[start : start + 100])


def log_metrics(client, run_id: str, metrics: Mapping[str, float], step: int) -> None:
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, int(step)) for k, v in metrics.items() if v is not None]
    for start in range(0, len(batch), 500):
        client.log_batch(run_id, metrics=batch[start : start + 500])


def log_dataset(
    client, run_id: str, name: str, dvc_path: str, digest: str, context: str = "training"
) -> None:
    """Record a dataset input: source is the DVC path, digest the DVC hash."""
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = resolve_dataset_source(dvc_path)
    dataset = MetaDataset(source=source, name=name, digest=digest[:36])
    tags = [InputTag("mlflow.data.context", context)]
    client.log_inputs(run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), tags=tags)])


def log_artifact(client, run_id: str, path: Path, artifact_path: str | None = None) -> None:
    if Path(path).is_dir():
        client.log_artifacts(run_id, str(path), artifact_path)
    else:
        client.log_artifact(run_id, str(path), artifact_path)


def register_checkpoint(
    client, name: str, run_id: str, checkpoint: Path, sha256: str, tags: Mapping[str, Any]
) -> str:
    """Log ``checkpoint`` under the run as an MLflow PyTorch model (`save_pytorch_model`) and
    make it a version of model ``name``, tagged with ``tags`` (idempotent)."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name)
    except MlflowException:
        pass  # already registered
    existing = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    for version in existing:
        if version.tags.get(TAG_SHA) == sha256:
            return version.version
    all_tags = {TAG_SHA: sha256, **{k: str(v) for k, v in tags.items()}}
    with tempfile.TemporaryDirectory(prefix="tabula-model-") as tmp:
        folder = save_pytorch_model(checkpoint, Path(tmp) / MODEL_FOLDER, all_tags)
        client.log_artifacts(run_id, str(folder), MODEL_FOLDER)
    source = f"{client.get_run(run_id).info.artifact_uri}/{MODEL_FOLDER}"
    return client.create_model_version(name, source=source, run_id=run_id, tags=all_tags).version


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


def set_alias(client, name: str, alias: str, version: str) -> None:
    client.set_registered_model_alias(name, alias, version)


def finish(client, run_id: str, status: str = "FINISHED") -> None:
    client.set_terminated(run_id, status=status)


def end_status(error: BaseException) -> str:
    """The MLflow status of a run whose stage raised ``error``: KILLED for an interrupt (Ctrl-C;
    SIGTERM, which Prefect's engine raises as its ``TerminationSignal`` inside a flow run, and
    `cli` as KeyboardInterrupt outside one), FAILED for anything else."""
    from prefect.exceptions import ExternalSignal

    interrupted = isinstance(error, KeyboardInterrupt | SystemExit | ExternalSignal)
    return "KILLED" if interrupted else "FAILED"


def running(client, experiment_id: str, run: str, uid: str | None) -> list[str]:
    """The ids of tabula run ``run``'s MLflow runs that are RUNNING: those with its identity
    ``uid`` and those from before runs had one (which `tasks.runs.require_own_name` let the run
    take for its own); never one with another identity."""
    query = f"tags.`{TAG_RUN}` = '{run}' and attributes.status = 'RUNNING'"
    found = client.search_runs([experiment_id], filter_string=query)
    return [r.info.run_id for r in found if r.data.tags.get(TAG_UID) in (uid, None)]


def mark_killed(client, experiment_id: str, run: str, uid: str | None) -> list[str]:
    """Runs of tabula run ``run`` (identity ``uid``) still RUNNING when no process holds the
    run's lock: their process died without a word (SIGKILL, a power cut). Mark them KILLED;
    returns their ids."""
    found = running(client, experiment_id, run, uid)
    for run_id in found:
        client.set_terminated(run_id, status="KILLED")
    return found


def model_version(uri: str, tracking_uri: str, project: Path | None) -> Any:
    """The MLflow model version that ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION`` names.

    A store that is not there (it is not created), a malformed URI and an unknown model, alias
    or version are each one line (``UsageError``) naming the registered models."""
    resolved = resolve_uri(tracking_uri, project)
    store = Path(resolved.removeprefix("sqlite:///")) if resolved.startswith("sqlite:///") else None
    if store is not None and not store.is_file():  # reading a store must not create one
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
