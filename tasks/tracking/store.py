"""The tracking store: where it is (`resolve_uri`), one client for it per process (`connect`),
and the experiment a run's MLflow runs live in (`experiment`, `run_experiment_name`).

``MLFLOW_TRACKING_URI``, when set, takes the place of the default store
(``pipeline.mlflow_tracking_uri`` left at ``sqlite:///mlflow/mlflow.db``); a store set in the
config wins.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tabula.config import PipelineConfig

#: ``MLFLOW_TRACKING_URI`` as the process started with it. MLflow's ``set_tracking_uri``,
#: which Lightning's logger calls for the store each training stage writes to, rewrites the
#: variable in-process; that must not redirect later stages, or another project's.
ENV_TRACKING_URI = os.environ.get("MLFLOW_TRACKING_URI")
#: The experiment of a project's runs unless ``MLFLOW_EXPERIMENT_NAME`` says otherwise.
EXPERIMENT = "tabula"
#: MLflow's experiment kind for model training: the UI opens such an experiment on its runs,
#: not on the GenAI overview (traces, tokens).
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}

#: The process's clients, one per resolved tracking URI (`connect`). An ``MlflowClient`` holds
#: no run of its own (every call names its run), so threads share one.
_CLIENTS: dict[str, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def quiet() -> None:
    """Keep MLflow's and its migrations' INFO lines out of a run's output (call after importing
    mlflow, which configures its own loggers at INFO)."""
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="mlflow")


def connect(tracking_uri: str, project: Path | None = None) -> Any:
    """The process's client for ``tracking_uri`` (`resolve_uri`: a relative ``sqlite:///``
    path is taken from ``project``), made on first use and shared after (by threads too).

    Making the client creates a SQLite store whole (`_ensure_sqlite_store`) and MLflow's
    tables, so call this once before starting parallel writers. A client whose first request
    failed is not kept: the next call tries again.
    """
    uri = resolve_uri(tracking_uri, project)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(uri)
        if client is None:
            client = _CLIENTS[uri] = _new_client(uri)
    return client


@contextlib.contextmanager
def as_default_store(uri: str) -> Iterator[None]:
    """Make ``uri`` MLflow's default store (what ``MlflowClient()`` without a URI uses) for
    the block, then put back the default and ``MLFLOW_TRACKING_URI`` as they were: MLflow's
    setter also writes the variable, and restoring an earlier default (Lightning's logger sets
    one) would write that, so processes started later would inherit another store."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    before = os.environ.get("MLFLOW_TRACKING_URI")
    try:
        with _use_tracking_uri(uri):
            yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before


def _new_client(uri: str) -> Any:
    from mlflow import MlflowClient

    quiet()
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


def resolve_uri(tracking_uri: str, project: Path | None) -> str:
    """The store to use: ``MLFLOW_TRACKING_URI`` in place of the default store when set; a
    relative ``sqlite:///`` path taken from ``project`` (else the working directory). A
    resolved URI resolves to itself."""
    default = PipelineConfig.model_fields["mlflow_tracking_uri"].default
    if tracking_uri == default and ENV_TRACKING_URI:
        tracking_uri = ENV_TRACKING_URI
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:////"):
        rel = tracking_uri.removeprefix("sqlite:///")
        base = project or Path.cwd()
        return f"sqlite:///{(base / rel).resolve()}"
    return tracking_uri


def missing_store(uri: str) -> Path | None:
    """The file of a resolved ``sqlite:///`` store that is not there (reading it must not
    create it), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    path = Path(uri.removeprefix("sqlite:///"))
    return None if path.is_file() else path


def is_uri(location: str) -> bool:
    """Whether an artifact location is a URI (``s3://...``; ``mlflow-artifacts:/...``, a
    tracking server's own store) rather than a folder."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", location) is not None


def experiment_name() -> str:
    """The project's experiment: ``MLFLOW_EXPERIMENT_NAME`` when set, else ``tabula``."""
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT


def run_experiment_name(client: Any, run: str) -> str:
    """The experiment of tabula run ``run``'s MLflow runs, found without creating anything:
    the project's (`experiment_name`), unless the run began in its own experiment
    ``tabula/<run>`` (before one experiment held every run of a project) and that one is
    still active, where it stays."""
    legacy = client.get_experiment_by_name(f"tabula/{run}")
    if legacy is not None and legacy.lifecycle_stage == "active":
        return legacy.name
    return experiment_name()


def experiment(client: Any, name: str, artifact_root: Path | str | None) -> str:
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


def experiment_id(client: Any, name: str) -> str | None:
    """The id of experiment ``name``, None when there is none (nothing is created)."""
    found = client.get_experiment_by_name(name)
    return None if found is None else found.experiment_id


def find_experiment(
    tracking_uri: str, project: Path | None = None, run: str | None = None
) -> tuple[str, str] | None:
    """The name and id of the experiment of ``run``'s MLflow runs (`run_experiment_name`), or
    without a run of the project's (`experiment_name`); None while the store or the experiment
    is missing or deleted (nothing is created)."""
    uri = resolve_uri(tracking_uri, project)
    if missing_store(uri) is not None:
        return None  # (connecting would create the store)
    client = connect(uri)
    name = run_experiment_name(client, run) if run else experiment_name()
    found = client.get_experiment_by_name(name)
    if found is None or found.lifecycle_stage != "active":
        return None
    return found.name, found.experiment_id
