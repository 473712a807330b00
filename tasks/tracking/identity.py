"""A tabula run's identity in the tracking store, so that two projects sharing a store never
take each other's runs of the same name for their own: the run folder's ``uid`` file
(`run_uid`), set on every MLflow run as tag ``tabula.run_uid``; the pre-check that refuses a
name another run holds (`require_own_name`); and the runs a dead process left RUNNING
(`mark_killed`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from model.files import write_text
from tabula.config import Config
from tabula.errors import UsageError
from tasks.run.layout import RunLayout
from tasks.tracking.preflight import without_password
from tasks.tracking.runs import end_run
from tasks.tracking.store import (
    connect,
    experiment,
    experiment_id,
    is_uri,
    missing_store,
    resolve_uri,
    run_experiment_name,
)
from tasks.tracking.tags import TAG_KIND, TAG_RUN, TAG_UID


class RunNameTakenError(UsageError):
    """The run's name, in its experiment, is another tabula run's."""


def run_uid(layout: RunLayout) -> str:
    """The run's identity in the tracking store: the ``uid`` file of its folder, made at its
    first start (before any MLflow run, so that a kill between the two leaves nothing without
    it) and committed with its lineage, so that a clone resuming the run finds its runs."""
    uid = read_uid(layout)
    if uid is None:
        uid = uuid.uuid4().hex
        write_text(layout.uid, uid + "\n")
    return uid


def read_uid(layout: RunLayout) -> str | None:
    """The run's identity; None before its first start, or for a run begun before runs had one."""
    return layout.uid.read_text().strip() if layout.uid.is_file() else None


def run_experiment(client: Any, cfg: Config, layout: RunLayout) -> str:
    """The id of the run's experiment (`run_experiment_name`), created when missing with its
    artifacts under ``pipeline.mlflow_artifact_root`` (a folder taken from the project)."""
    root = cfg.pipeline.mlflow_artifact_root
    artifacts = root if is_uri(root) else layout.project / root
    return experiment(client, run_experiment_name(client, layout.run), artifacts)


def pipeline_runs(client: Any, experiment_id: str, run: str) -> list[tuple[str, str | None]]:
    """(MLflow run id, identity tag or None) of every pipeline run named ``run`` in the
    experiment, oldest first."""
    query = f"tags.`{TAG_RUN}` = '{run}' and tags.`{TAG_KIND}` = 'pipeline'"
    found = client.search_runs(
        [experiment_id], filter_string=query, order_by=["attributes.start_time ASC"]
    )
    return [(r.info.run_id, r.data.tags.get(TAG_UID)) for r in found]


def own_pipeline_run(
    found: Sequence[tuple[str, str | None]], uid: str | None, resumed: bool, where: str
) -> str | None:
    """Which of the pipeline runs of the run's name ``found`` in its experiment (id, identity)
    is the run's own: the one with its identity ``uid``; else, for a run resumed (its folder
    was there) that has none of its own, one from before runs had an identity (adopted); else
    None: the run makes its own. A run of that name left is another project's, or one whose
    folder was deleted: reusing it would mix two runs' metrics and mark the other's live runs
    KILLED, so it is refused (`RunNameTakenError`, one line naming ``where``)."""
    mine = [run_id for run_id, tag in found if uid is not None and tag == uid]
    if mine:
        return mine[0]
    older = [run_id for run_id, tag in found if tag is None]
    if resumed and older:
        return older[-1]  # the newest, as runs were found before identities
    if not found:
        return None
    other = found[-1][0]
    if resumed:  # (its folder, e.g. a copy taken before its uid file was committed)
        raise RunNameTakenError(
            f"{where} holds a run of that name (MLflow run {other}) with another identity than "
            "this run folder's uid file: another project's, or this run's own in a copy of the "
            "folder; copy that folder's uid file here, or resume under another experiment "
            "(MLFLOW_EXPERIMENT_NAME)"
        )
    raise RunNameTakenError(
        f"{where} already holds a run of that name (MLflow run {other}) that is not this one: "
        "another project's, or one whose run folder was deleted; start this one under another "
        "name (--set pipeline.name=...) or experiment (MLFLOW_EXPERIMENT_NAME), or delete that "
        "MLflow run"
    )


def where(uri: str, run: str) -> str:
    """How a refusal names the run and its store (`without_password`)."""
    return f"run {run!r}: MLflow store {without_password(uri)}"


def require_own_name(cfg: Config, layout: RunLayout) -> None:
    """Refuse (`RunNameTakenError`) to start or resume a run whose name another tabula run
    holds in the tracking store, before anything of the run is made. A SQLite store or an
    experiment that is not there yet holds no run, and neither is created here (a database
    store reached for the first time gets MLflow's tables, as any client makes them)."""
    uri = resolve_uri(cfg.pipeline.mlflow_tracking_uri, layout.project)
    if missing_store(uri) is not None:
        return
    client = connect(uri)
    exp = experiment_id(client, run_experiment_name(client, layout.run))
    if exp is None:
        return
    found = pipeline_runs(client, exp, layout.run)
    own_pipeline_run(found, read_uid(layout), layout.params.exists(), where(uri, layout.run))


def running(client: Any, experiment_id: str, run: str, uid: str | None) -> list[str]:
    """The ids of tabula run ``run``'s MLflow runs that are RUNNING: those with its identity
    ``uid`` and those from before runs had one (which `require_own_name` let the run take for
    its own); never one with another identity."""
    query = f"tags.`{TAG_RUN}` = '{run}' and attributes.status = 'RUNNING'"
    found = client.search_runs([experiment_id], filter_string=query)
    return [r.info.run_id for r in found if r.data.tags.get(TAG_UID) in (uid, None)]


def mark_killed(cfg: Config, layout: RunLayout) -> list[str]:
    """Mark KILLED the MLflow runs of this tabula run still RUNNING: called with the run's lock
    held, so no live process owns them; theirs died without a word (SIGKILL, a power cut).
    Returns their ids."""
    client = connect(cfg.pipeline.mlflow_tracking_uri, layout.project)
    found = running(client, run_experiment(client, cfg, layout), layout.run, read_uid(layout))
    for run_id in found:
        end_run(client, run_id, "KILLED")
    return found
