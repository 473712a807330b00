"""The Prefect tasks that record a run in MLflow: open its pipeline run and each iteration's
(each returns the `Tracking` handle the flow passes on), log metrics, datasets, artifacts and
model versions to a handle's runs, and end them.

Every task takes the handle, never the config: the store, experiment and run ids were found
once, when the run opened.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect import task

from tabula.config import Config, config_to_flat_dict, without_userinfo
from tasks.interrupts import free_unwound
from tasks.retry import IO_RETRIES
from tasks.run.codec import to_json
from tasks.run.layout import RunLayout
from tasks.run.records import Elo, EvaluationRecord
from tasks.tracking.identity import (
    own_pipeline_run,
    pipeline_runs,
    run_experiment,
    run_uid,
    running,
    where,
)
from tasks.tracking.registry import (
    CHAMPION,
    logged_model_id,
    logged_models_of,
    register_checkpoint,
)
from tasks.tracking.runs import (
    Scope,
    Tracking,
    create_run,
    end_run,
    end_status,
    find_or_create_run,
    reopen,
    write_artifact,
    write_dataset,
    write_metrics,
    write_params,
    write_points,
    write_tags,
)
from tasks.tracking.store import connect, resolve_uri
from tasks.tracking.tags import TAG_ITERATION, TAG_KIND, TAG_RUN, TAG_UID

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
    interval as fitted then (``elo_then``, ``elo_then_low``, ``elo_then_high``: later games
    move it; the run's ``elo`` is `log_run_elos`'), and the score and mean margin against each
    anchor (``eval/score_vs_random``, ``eval/margin_vs_gnugo-l1``)."""
    decision = evaluation.gate.decision
    metrics: dict[str, float | None] = {"eval/gate_games": decision.games}
    if decision.games:  # (gating off plays none)
        metrics["eval/win_rate"] = decision.win_rate
    if evaluation.elo is not None:
        then = evaluation.elo
        metrics.update({"elo_then": then.elo, "elo_then_low": then.low, "elo_then_high": then.high})
    for name, match in evaluation.anchors.items():
        metrics[f"eval/score_vs_{name}"] = match.score
        if match.summary.mean_margin is not None:
            metrics[f"eval/margin_vs_{name}"] = match.summary.mean_margin
    return metrics


def run_link(track: Tracking) -> str | None:
    """The MLflow UI's page of the handle's run when the store is a tracking server, else
    None."""
    if not track.uri.startswith(("http://", "https://")):
        return None
    base = without_userinfo(track.uri).rstrip("/")  # (a link never carries credentials)
    return f"{base}/#/experiments/{track.experiment_id}/runs/{track.run_id}"


@task(name="mlflow-open-pipeline", **IO_RETRIES)
def open_pipeline_run(cfg: Config, layout: RunLayout, tags: dict[str, str]) -> Tracking:
    """The run's parent MLflow run (found again on resume, `own_pipeline_run`; `run_pipeline`
    refused a name taken before the run's folder was made), with the full config as params;
    returns its handle."""
    uri = resolve_uri(cfg.pipeline.mlflow_tracking_uri, layout.project)
    client = connect(uri)
    exp = run_experiment(client, cfg, layout)
    uid = run_uid(layout)
    found = pipeline_runs(client, exp, layout.run)
    tags = {**tags, TAG_UID: uid}
    run_id = own_pipeline_run(found, uid, True, where(uri, layout.run))
    if run_id is None:
        key = {TAG_RUN: layout.run, TAG_KIND: "pipeline"}
        run_id = create_run(client, exp, layout.run, {**key, **tags})
    else:
        reopen(client, run_id, tags)
    write_params(client, run_id, config_to_flat_dict(cfg.resolve()))
    model = cfg.pipeline.registered_model_name()
    return Tracking(uri, exp, layout.run, uid, model, run_id)


@task(name="mlflow-open-iteration", **IO_RETRIES)
def open_iteration_run(cfg: Config, pipeline: Tracking, i: int, tags: dict[str, str]) -> Tracking:
    """Iteration ``i``'s child run under the ``pipeline`` handle's run, with its identity:
    created once, reopened when the iteration resumes; returns its handle. A stop while its
    params are logged (a SIGTERM just after the run opened) ends it FAILED or KILLED, as a
    stop inside the iteration does."""
    client = connect(pipeline.uri)
    key = {TAG_RUN: pipeline.run, TAG_KIND: "iteration", TAG_ITERATION: str(i)}
    tags = {**tags, TAG_UID: pipeline.uid}  # (the parent's open made it)
    run_id = find_or_create_run(
        client, pipeline.experiment_id, key, f"iter-{i:04d}", pipeline.run_id, tags
    )
    track = pipeline.child(run_id)
    try:
        write_params(client, run_id, config_to_flat_dict(cfg.resolve()))
    except BaseException as error:
        fail(track, error)
        raise
    return track


@task(name="mlflow-log", **IO_RETRIES)
def log_metrics(
    track: Tracking,
    metrics: Mapping[str, float | None],
    step: int,
    on: Scope = "both",
    tags: dict[str, Any] | None = None,
) -> None:
    """The same metrics (and ``tags``) on the handle's runs that ``on`` names
    (`Tracking.ids`: the iteration's, the pipeline's, or both)."""
    client = connect(track.uri)
    measured = {k: v for k, v in metrics.items() if v is not None}  # None: not measured
    for run_id in track.ids(on):
        write_metrics(client, run_id, measured, step)
        if tags:
            write_tags(client, run_id, tags)


@task(name="mlflow-dataset", **IO_RETRIES)
def log_datasets(track: Tracking, datasets: dict[str, str], context: str) -> None:
    """Datasets as MLflow inputs of the handle's run: ``{DVC path: DVC hash}``."""
    client = connect(track.uri)
    for path, digest in datasets.items():
        parts = path.split("/")  # data/<run>/iter-NNNN/selfplay -> selfplay-iter-NNNN
        name = f"{parts[-1]}-{parts[-2]}" if len(parts) >= 2 else path
        write_dataset(client, track.run_id, name, path, digest, context)


@task(name="mlflow-artifacts", **IO_RETRIES)
def log_artifacts(track: Tracking, paths: dict[str, str]) -> None:
    """``{local path: artifact folder}`` for files or folders that exist, on the handle's run."""
    client = connect(track.uri)
    for path, folder in paths.items():
        if Path(path).exists():
            write_artifact(client, track.run_id, Path(path), folder)


@task(name="mlflow-pictures", **IO_RETRIES)
def log_pictures(track: Tracking, pictures: Mapping[str, str]) -> None:
    """``{artifact file: SVG text}`` on the handle's run; the MLflow UI shows an SVG artifact
    as an image. Logging one again (a resume) replaces it."""
    client = connect(track.uri)
    for artifact_file, svg in pictures.items():
        client.log_text(track.run_id, svg, artifact_file)


@task(name="mlflow-register", **IO_RETRIES)
def register(
    track: Tracking,
    checkpoint: Path,
    sha256: str,
    tags: dict[str, Any],
    champion: bool,
    metrics: Mapping[str, float | None] | None = None,
) -> str:
    """Make ``checkpoint`` a logged model of the handle's run and a version of the run's
    registered model, with ``metrics`` (the iteration's evaluation) linked to the logged model
    at step = iteration; alias it ``champion`` if promoted."""
    client = connect(track.uri)
    version = register_checkpoint(client, track.model, track.run_id, checkpoint, sha256, tags)
    model_id = logged_model_id(client.get_model_version(track.model, version))
    if metrics and model_id:
        step = int(tags.get(TAG_ITERATION, 0))
        write_metrics(client, track.run_id, metrics, step, model_id=model_id)
    if champion:
        client.set_registered_model_alias(track.model, CHAMPION, version)
    return version


def elo_metrics(elo: Elo) -> dict[str, float]:
    """An iteration's Elo on the run's scale as MLflow metrics: ``elo``, ``elo_low``,
    ``elo_high``."""
    return {"elo": elo.elo, "elo_low": elo.low, "elo_high": elo.high}


@task(name="mlflow-elo", **IO_RETRIES)
def log_run_elos(track: Tracking, elos: Mapping[int, Elo]) -> int:
    """Every iteration's Elo on the run's scale (``elos``: the closing table's, by iteration)
    as ``elo``, ``elo_low`` and ``elo_high`` at step = iteration, on the pipeline's run and on
    each iteration's run, wherever it differs from the value last logged at that step.

    MLflow keeps every value a metric was given (a history cannot be rewritten), so the run's
    scale is logged when the run closes, not after each iteration: a finished run has one
    value per step, and a run extended later adds a point only where its fit moved (the newest
    value at a step is the run's). Returns the values logged."""
    client = connect(track.uri)
    pipeline_id = track.pipeline_id
    new: list[tuple[str, str, float, int]] = []  # (run id, key, value, step)
    for key in ("elo", "elo_low", "elo_high"):
        last: dict[int, Any] = {}  # the value last logged at each step
        for m in client.get_metric_history(pipeline_id, key):
            if m.step not in last or m.timestamp >= last[m.step].timestamp:
                last[m.step] = m
        for i, elo in sorted(elos.items()):
            value = elo_metrics(elo)[key]
            if i not in last or last[i].value != value:
                new.append((pipeline_id, key, value, i))
    query = f"tags.`mlflow.parentRunId` = '{pipeline_id}' and tags.`{TAG_KIND}` = 'iteration'"
    for child in client.search_runs([track.experiment_id], filter_string=query):
        i = int(child.data.tags.get(TAG_ITERATION, -1))
        if i in elos:
            for key, value in elo_metrics(elos[i]).items():
                if child.data.metrics.get(key) != value:
                    new.append((child.info.run_id, key, value, i))
    for run_id in dict.fromkeys(r for r, *_ in new):
        points = [(k, v, i) for r, k, v, i in new if r == run_id]
        write_points(client, run_id, points, _checkpoint_of(client, track, run_id))
    return len(new)


def _checkpoint_of(client: Any, track: Tracking, run_id: str) -> str | None:
    """The logged model (checkpoint) of iteration run ``run_id``, which its Elo measures;
    None for the pipeline's run, or an iteration registered before checkpoints were logged
    models."""
    if run_id == track.pipeline_id:
        return None
    models = logged_models_of(client, track.experiment_id, run_id)
    return str(models[0].model_id) if models else None


@task(name="mlflow-finish", **IO_RETRIES)
def finish(track: Tracking, status: str = "FINISHED") -> None:
    """End the handle's run."""
    end_run(connect(track.uri), track.run_id, status)


def fail(track: Tracking, error: BaseException, *, and_running: bool = False) -> None:
    """End the handle's run FAILED (or KILLED for an interrupt) because ``error`` stopped it,
    and with ``and_running`` every other run of its tabula run still RUNNING, which the process
    holding the run's lock owns (an iteration's that the stop caught after MLflow created it
    and before the flow had its id). A tracking store that fails here too (the disk that
    stopped the stage is full) stays silent, so that ``error`` is the one line the user sees."""
    free_unwound(error)  # (a cursor it stopped mid-statement would hold the store's lock)
    try:
        client = connect(track.uri)  # (imports MLflow, which sets its loggers' levels)
    except Exception:  # noqa: BLE001
        return
    loggers = [logging.getLogger(name) for name in ("mlflow", "sqlalchemy", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        status = end_status(error)
        end_run(client, track.run_id, status)  # first the run known, whatever the search meets
        if and_running:
            for run_id in running(client, track.experiment_id, track.run, track.uid):
                end_run(client, run_id, status)
    except Exception:  # noqa: BLE001, S110  (the stage's error is the one to report)
        pass
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
