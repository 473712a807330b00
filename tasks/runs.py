"""Prefect tasks that record an iteration in MLflow (through ``tasks.tracking``).

Each takes explicit run ids: MLflow's active run is per thread and tasks run in pools.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefect import task

from model.files import write_text
from tabula.config import Config, config_to_flat_dict
from tabula.errors import UsageError
from tasks import tracking
from tasks.retry import IO_RETRIES
from tasks.run.codec import to_json
from tasks.run.layout import RunLayout
from tasks.run.records import EvaluationRecord

#: Numbers of a stage record that are not measurements.
_NOT_METRICS = {"seed", "threads", "pid"}


def metrics_of(record: Any, prefix: str) -> dict[str, float]:
    """A stage record's numbers as MLflow metrics named ``prefix`` + its JSON key
    (``selfplay/positions``, ``train/loss``); flags, text and nested data are left out."""
    return {
        f"{prefix}{k}": float(v)
        for k, v in to_json(record).items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in _NOT_METRICS
    }


def evaluation_metrics(evaluation: EvaluationRecord) -> dict[str, float | None]:
    """An evaluation's MLflow metrics: the gate's win rate and games, the Elo with its
    interval, and the score and mean margin against each anchor (``eval/score_vs_random``,
    ``eval/margin_vs_gnugo-l1``)."""
    decision = evaluation.gate.decision
    metrics: dict[str, float | None] = {"eval/gate_games": decision.games}
    if decision.games:  # (gating off plays none)
        metrics["eval/win_rate"] = decision.win_rate
    if evaluation.elo is not None:
        elo = evaluation.elo
        metrics.update({"elo": elo.elo, "elo_low": elo.low, "elo_high": elo.high})
    for name, match in evaluation.anchors.items():
        metrics[f"eval/score_vs_{name}"] = match.score
        if match.summary.mean_margin is not None:
            metrics[f"eval/margin_vs_{name}"] = match.summary.mean_margin
    return metrics


def tracking_uri(cfg: Config, layout: RunLayout) -> str:
    return tracking.resolve_uri(cfg.pipeline.mlflow_tracking_uri, layout.project)


def _client(cfg: Config, layout: RunLayout):
    return tracking.connect(cfg.pipeline.mlflow_tracking_uri, layout.project)


def _experiment(cfg: Config, layout: RunLayout, client) -> str:
    """The project's experiment; a run begun in its own experiment (``tabula/<run>``, before
    one experiment held every run of a project) stays there."""
    root = cfg.pipeline.mlflow_artifact_root
    artifacts = root if tracking.is_uri(root) else layout.project / root
    return tracking.experiment(client, _experiment_name(layout, client), artifacts)


def _experiment_name(layout: RunLayout, client) -> str:
    """The name of the run's experiment (`_experiment`), found without creating anything."""
    legacy = f"tabula/{layout.run}"
    return legacy if tracking.experiment_id(client, legacy) else tracking.experiment_name()


def run_link(cfg: Config, layout: RunLayout, run_id: str) -> str | None:
    """The MLflow UI's page of ``run_id`` when the store is a tracking server, else None."""
    uri = tracking_uri(cfg, layout)
    if not uri.startswith(("http://", "https://")):
        return None
    experiment_id = _client(cfg, layout).get_run(run_id).info.experiment_id
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


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


def require_own_name(cfg: Config, layout: RunLayout) -> None:
    """Refuse (`RunNameTakenError`) to start or resume a run whose name another tabula run
    holds in the tracking store, before anything of the run is made. A SQLite store or an
    experiment that is not there yet holds no run, and neither is created here (a database
    store reached for the first time gets MLflow's tables, as any client makes them)."""
    uri = tracking_uri(cfg, layout)
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return
    client = _client(cfg, layout)
    exp = tracking.experiment_id(client, _experiment_name(layout, client))
    if exp is None:
        return
    found = tracking.pipeline_runs(client, exp, layout.run)
    own_pipeline_run(found, read_uid(layout), layout.params.exists(), _where(cfg, layout))


def _where(cfg: Config, layout: RunLayout) -> str:
    store = tracking.without_password(tracking_uri(cfg, layout))
    return f"run {layout.run!r}: MLflow store {store}"


@task(name="mlflow-open-pipeline", **IO_RETRIES)
def open_pipeline_run(cfg: Config, layout: RunLayout, tags: dict[str, str]) -> str:
    """The run's parent MLflow run (found again on resume, `own_pipeline_run`; `run_pipeline`
    refused a name taken before the run's folder was made), with the full config as params."""
    client = _client(cfg, layout)
    exp = _experiment(cfg, layout, client)
    uid = run_uid(layout)
    found = tracking.pipeline_runs(client, exp, layout.run)
    tags = {**tags, tracking.TAG_UID: uid}
    run_id = own_pipeline_run(found, uid, True, _where(cfg, layout))
    if run_id is None:
        key = {tracking.TAG_RUN: layout.run, tracking.TAG_KIND: "pipeline"}
        run_id = tracking.create_run(client, exp, layout.run, {**key, **tags})
    else:
        tracking.reopen(client, run_id, tags)
    tracking.log_params(client, run_id, config_to_flat_dict(cfg.resolve()))
    return run_id


@task(name="mlflow-open-iteration", **IO_RETRIES)
def open_iteration_run(
    cfg: Config, layout: RunLayout, i: int, parent_id: str, tags: dict[str, str]
) -> str:
    """The iteration's child run: created once, reopened when the iteration resumes. A stop
    while its params are logged (a SIGTERM just after the run opened) ends it FAILED or KILLED,
    as a stop inside the iteration does."""
    client = _client(cfg, layout)
    exp = _experiment(cfg, layout, client)
    key = {
        tracking.TAG_RUN: layout.run,
        tracking.TAG_KIND: "iteration",
        tracking.TAG_ITERATION: str(i),
    }
    uid = read_uid(layout)  # (the parent's open made it)
    tags = {**tags, tracking.TAG_UID: uid} if uid is not None else tags
    run_id = tracking.find_or_create_run(
        client, exp, key, f"iter-{i:04d}", parent_id=parent_id, tags=tags
    )
    try:
        tracking.log_params(client, run_id, config_to_flat_dict(cfg.resolve()))
    except BaseException as error:
        fail(cfg, layout, [run_id], error)
        raise
    return run_id


@task(name="mlflow-log", **IO_RETRIES)
def log_metrics(
    cfg: Config,
    layout: RunLayout,
    run_ids: list[str],
    metrics: Mapping[str, float | None],
    step: int,
    tags: dict[str, Any] | None = None,
) -> None:
    """The same metrics on several runs (the iteration child and the pipeline parent)."""
    client = _client(cfg, layout)
    measured = {k: v for k, v in metrics.items() if v is not None}  # None: not measured
    for run_id in run_ids:
        tracking.log_metrics(client, run_id, measured, step)
        if tags:
            tracking.set_tags(client, run_id, tags)


@task(name="mlflow-dataset", **IO_RETRIES)
def log_datasets(
    cfg: Config, layout: RunLayout, run_id: str, datasets: dict[str, str], context: str
) -> None:
    """Datasets as MLflow inputs: ``{DVC path: DVC hash}``."""
    client = _client(cfg, layout)
    for path, digest in datasets.items():
        parts = path.split("/")  # data/<run>/iter-NNNN/selfplay -> selfplay-iter-NNNN
        name = f"{parts[-1]}-{parts[-2]}" if len(parts) >= 2 else path
        tracking.log_dataset(client, run_id, name, path, digest, context)


@task(name="mlflow-artifacts", **IO_RETRIES)
def log_artifacts(cfg: Config, layout: RunLayout, run_id: str, paths: dict[str, str]) -> None:
    """``{local path: artifact folder}`` for files or folders that exist."""
    from pathlib import Path

    client = _client(cfg, layout)
    for path, folder in paths.items():
        if Path(path).exists():
            tracking.log_artifact(client, run_id, Path(path), folder)


@task(name="mlflow-register", **IO_RETRIES)
def register(
    cfg: Config,
    layout: RunLayout,
    run_id: str,
    i: int,
    sha256: str,
    tags: dict[str, Any],
    champion: bool,
) -> str:
    """Make iteration ``i``'s checkpoint a model version; alias it ``champion`` if promoted."""
    client = _client(cfg, layout)
    name = cfg.pipeline.registered_model_name()
    version = tracking.register_checkpoint(client, name, run_id, layout.model(i), sha256, tags)
    if champion:
        tracking.set_alias(client, name, "champion", version)
    return version


@task(name="mlflow-finish", **IO_RETRIES)
def finish(cfg: Config, layout: RunLayout, run_id: str, status: str = "FINISHED") -> None:
    tracking.finish(_client(cfg, layout), run_id, status)


def fail(
    cfg: Config,
    layout: RunLayout,
    run_ids: list[str],
    error: BaseException,
    *,
    and_running: bool = False,
) -> None:
    """End ``run_ids`` FAILED (or KILLED for an interrupt) because ``error`` stopped them, and
    with ``and_running`` every other run of this tabula run still RUNNING, which the process
    holding the run's lock owns (an iteration's that the stop caught after MLflow created it
    and before the flow had its id). A tracking store that fails here too (the disk that
    stopped the stage is full) stays silent, so that ``error`` is the one line the user sees."""
    try:
        client = _client(cfg, layout)  # (imports MLflow, which sets its loggers' levels)
    except Exception:  # noqa: BLE001
        return
    loggers = [logging.getLogger(name) for name in ("mlflow", "sqlalchemy", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        status = tracking.end_status(error)
        for run_id in run_ids:  # first the runs known, whatever the search below meets
            tracking.finish(client, run_id, status)
        if and_running:
            exp = _experiment(cfg, layout, client)
            for run_id in tracking.running(client, exp, layout.run, read_uid(layout)):
                tracking.finish(client, run_id, status)
    except Exception:  # noqa: BLE001, S110  (the stage's error is the one to report)
        pass
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def mark_killed(cfg: Config, layout: RunLayout) -> list[str]:
    """Mark KILLED the MLflow runs of this tabula run that a dead process left RUNNING (called
    with the run's lock held, so no live process owns them)."""
    client = _client(cfg, layout)
    exp = _experiment(cfg, layout, client)
    return tracking.mark_killed(client, exp, layout.run, read_uid(layout))
