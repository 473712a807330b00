"""The pipeline: iterations chained by Prefect, resumable, one run at a time.

``run_pipeline`` is what ``tabula run`` and the deployment (`flows.deploy`) call: it refuses a
tracking store that cannot be reached, takes the run's lock, marks KILLED the MLflow runs a
dead process left RUNNING (a stage that raises ends its runs FAILED, or KILLED on an
interrupt, itself), freezes the config in ``data/<run>/params.yaml`` on the first start
(`tasks.frozen_config.freeze_config`: a resumed run must use the same config, only
``pipeline.iterations`` may grow), and runs the ``pipeline`` flow against the run's Prefect API
(`flows.api`), which starts the run from a randomly initialised network (iteration 0) and then
runs each unfinished iteration, its self-play games begun before its flow run (`games_ahead`).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

from flows.api import prefect_api, start_api_for
from flows.beside import Beside, beside
from flows.iteration import close, iteration
from tabula.config import Config, parse_config
from tabula.plan import NextIteration, derive_seed
from tasks import tracking, versioning
from tasks.commits import dvc_commit
from tasks.frozen_config import freeze_config
from tasks.interrupts import raise_if_interrupted
from tasks.planning import asked_iterations, given_limits, init_model, plan, upcoming
from tasks.promote import check_model, set_champion
from tasks.run.budget import charge, measured_as, metered, read_budget, spent_on
from tasks.run.cputime import process_tree_cpu_seconds
from tasks.run.faults import kill_point
from tasks.run.layout import RunLayout, RunLock
from tasks.run.markers import champion, finished, finished_iterations
from tasks.run.records import (
    EvaluationRecord,
    PromotionRecord,
    SelfplayRecord,
    Stage,
    TrainRecord,
)
from tasks.run.summary import SummaryRow, run_elos, summary_row, with_final_ratings
from tasks.selfplay import play_ahead, start_workers
from tasks.stage_files import write_init_stage
from tasks.versioning import code_commit, ensure_repo
from tasks.workers import stopping_worker_processes


def _task_runner(workers: int, dask_address: str | None):
    if dask_address:
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=dask_address)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=max(1, workers))


@flow(name="tabula-pipeline", flow_run_name="{run}")
def pipeline(
    config_yaml: str,
    project: str,
    run: str,
    iterations: int | None,
    dask_address: str | None = None,
    core_hours: float | None = None,
    hours: float | None = None,
    cpu_start: float = 0.0,
) -> list[SummaryRow]:
    """Run iterations 1..``iterations`` of ``run`` (None: as many as the budget pays for, and
    never a new one once it is spent: `tasks.planning.upcoming`, `tasks.run.budget.metered`)."""
    cfg = parse_config(config_yaml, source=f"data/{run}/params.yaml")
    layout = RunLayout(Path(project), cfg.pipeline.data_dir, run)
    tags = _start(cfg, layout)
    track = tracking.open_pipeline_run(cfg, layout, tags)
    one = iteration.with_options(task_runner=_task_runner(cfg.selfplay.workers, dask_address))
    meter = metered(layout, core_hours, hours, cpu_start)
    closes = beside(layout.root)
    rows: list[SummaryRow] = []
    try:
        for i in count(1):
            planned = upcoming(cfg, layout, meter, i, iterations)
            if not planned.go:
                break  # the iterations asked for are done, or the budget is spent
            row = closed_row(layout, i)
            if row is None:
                if not dask_address:
                    games_ahead(cfg, layout, i, planned)
                settle_heap()  # (beside the games)
                with _no_heartbeats():
                    closing = one(config_yaml, project, run, i, track, tags, planned)
                closes.start(f"close-{i}", close, cfg, layout, closing)  # beside the next
                raise_if_interrupted()  # a Ctrl-C the iteration flow's engine dropped
                row = charge(layout, meter, closing.row)
            rows.append(row)
        closes.wait()
    except BaseException as error:  # the parent run ends FAILED, or KILLED on an interrupt,
        _let_close(closes)  # a child's too; a close in flight ends first
        tracking.fail(track, error, and_running=True)
        raise
    return _close(track, layout, rows)


def games_ahead(cfg: Config, layout: RunLayout, i: int, planned: NextIteration) -> None:
    """Start iteration ``i``'s self-play games before its flow run does
    (`tasks.selfplay.play_ahead`), from its plan (`tasks.planning.plan`, written once: the
    flow finds it) once the champion they play is checked (`tasks.promote.check_model`), so
    that the flow runs' end and start run beside the games. A kill from here on is one during
    self-play: the resume plans nothing new and plays the same games again."""
    made = plan.fn(cfg, layout, i, planned)
    check_model(layout, made.best)
    play_ahead(cfg, layout, made)
    kill_point("ahead")


@contextmanager
def _no_heartbeats() -> Iterator[None]:
    """Run an iteration's flow without Prefect's flow-run heartbeats. Prefect's engine beats
    from a thread that sleeps a second at a time and joins it as the flow run ends: half a
    second on average at every iteration's end, with nothing else running (the next games
    begin after it): about 2% of a quick-start iteration's wall time. An iteration's flow lasts
    seconds to minutes inside the pipeline's, in the same process: the pipeline flow's own
    heartbeats (every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds) tell the server the
    process is alive."""
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def _plays(
    cfg: Config,
    layout: RunLayout,
    iterations: int | None,
    core_hours: float | None,
    hours: float | None,
    cpu_start: float,
) -> bool:
    """Whether the run's next unfinished iteration runs (`pipeline`'s test): a run with none
    left starts no self-play worker."""
    meter = metered(layout, core_hours, hours, cpu_start)
    return upcoming(cfg, layout, meter, finished_iterations(layout) + 1, iterations).go


def _let_close(closes: Beside) -> None:
    """Wait for the close in flight as a run stops on an error: it ends its iteration's MLflow
    run itself, FINISHED, or FAILED with its own error (logged here; the run's error is the
    one raised)."""
    try:
        closes.wait()
    except BaseException as error:
        logging.getLogger(__name__).error("an iteration's close failed too: %r", error)


def _close(track: tracking.Tracking, layout: RunLayout, rows: list[SummaryRow]) -> list[SummaryRow]:
    """End the pipeline's MLflow run with every iteration's Elo on the run's one scale logged
    (`tasks.run.summary.run_elos`: MLflow's per-iteration ``elo`` is the closing table's), and
    return the rows carrying it."""
    elos = run_elos(layout, len(rows))
    tracking.log_run_elos(track, elos)
    tracking.finish(track)
    return with_final_ratings(rows, elos)


def _start(cfg: Config, layout: RunLayout) -> dict[str, str]:
    """The run's repository and iteration 0 (the random network, the first champion), made
    once; returns the tags of its MLflow runs."""
    ensure_repo(layout.project, cfg.pipeline.dvc_remote)
    init_seed = derive_seed(cfg.pipeline.seed, 0)
    write_init_stage(layout, init_seed)
    made = init_model(cfg, layout, init_seed)
    if champion(layout) is None:
        dvc_commit(layout, 0, Stage.INIT.value, push=True)
        set_champion(layout, 0, None, made.sha256)
    commit = code_commit()
    return {
        "git_commit": commit,
        "prefect.pipeline_flow_run_id": str(flow_run.id or ""),
        **tracking.source_tags(commit),
    }


def settle_heap() -> None:
    """Collect the garbage an iteration left, then exempt what survives from later collections.

    A run's process holds about a million objects once torch, Lightning, Prefect, MLflow and DVC
    are loaded, and a few thousand more with each iteration (the libraries' caches: Prefect's
    event resources, torch's fake-tensor dispatch cache, fsspec's file systems). Python's full
    collection walks them all, several times an iteration: measured with `bench.bookkeeping`,
    an iteration's bookkeeping grew from 1.2 CPU-seconds (iterations 6-10) to 3.3 (146-150).
    Frozen objects (``gc.freeze``) are skipped by the collector, so each collection walks only
    what the current iteration made. (What was alive at an iteration's end and later becomes
    part of a reference cycle is never freed: a little memory, against CPU that grew with the
    run.)"""
    gc.collect()
    gc.freeze()


def closed_row(layout: RunLayout, i: int) -> SummaryRow | None:
    """Iteration i's summary row from its records if its flow ran to the end before, else None.

    Iterations run one after another, each one's close beside the next (`flows.beside`), and
    an iteration's flow writes its stage file first: so when iteration i + 2 has one, iteration
    i's flow returned and its close ended (its promotion record, lineage commit, summary and
    MLflow run), since iteration i + 1's first DVC commit, or else its own close's start, waited
    for it; and a resume need not run it again. Running it again would find every stage
    finished, but its flow run, MLflow run, reports and git commit cost about a CPU-second each
    time, for every finished iteration of every resume. The last two finished iterations still
    run, so a kill between an iteration's stages' ends and its close's end is mended by the
    resume.
    """
    if not layout.stage_file(i + 2).exists():
        return None
    selfplay = finished(layout, i, Stage.SELFPLAY, SelfplayRecord)
    train = finished(layout, i, Stage.TRAIN, TrainRecord)
    evaluation = finished(layout, i, Stage.EVALUATE, EvaluationRecord)
    promotion = finished(layout, i, Stage.PROMOTE, PromotionRecord)
    if selfplay is None or train is None or evaluation is None or promotion is None:
        return None
    row = summary_row(i, selfplay, train, evaluation, promotion.promoted)
    spent = spent_on(read_budget(layout), i)
    return row if spent is None else measured_as(row, spent)


def run_pipeline(
    cfg: Config,
    project: Path,
    iterations: int | None = None,
    dask_address: str | None = None,
    core_hours: float | None = None,
    hours: float | None = None,
    cpu_start: float | None = None,
) -> list[SummaryRow]:
    """Lock the run, freeze its config and run the pipeline flow; returns the summary rows.

    A tracking store that cannot be reached (`tasks.tracking.require_reachable`), a run name
    that another tabula run holds in it (`tasks.tracking.require_own_name`), or a Dask scheduler on
    another machine with no Prefect server named (`flows.api.start_api_for`), is refused
    first, in seconds and in one line, before anything of the run is made on disk, in git or in
    MLflow. The temporary Prefect server, when the run needs one, starts while these checks
    run (`flows.api.start_api_for`).

    iterations: the iterations to reach (default: the config's, or, with a budget, as many
    as it pays for). core_hours, hours: the run's CPU and wall budgets (`tasks.run.budget`;
    None keeps what the run had; with neither nor ``iterations``, a run without a budget takes
    the config's, `given_limits`). cpu_start: CPU-seconds of this process tree not to charge
    to the run (default: what it has used so far; ``tabula run`` passes 0, so that its own
    start-up counts)."""
    cpu_start = process_tree_cpu_seconds() if cpu_start is None else cpu_start
    dask_address = dask_address or cfg.pipeline.dask_address
    start_api_for(cfg.pipeline.prefect_api_url, dask_address)  # (starts while the checks run)
    layout = RunLayout(project.resolve(), cfg.pipeline.data_dir, cfg.pipeline.name)
    tracking.require_reachable(cfg.pipeline.mlflow_tracking_uri, layout.project)
    versioning.require_run_files(layout.project, layout.run, layout.rel(layout.params))
    tracking.require_own_name(cfg, layout)
    with RunLock(layout), stopping_worker_processes():
        versioning.restore_interrupted_commits(layout.root)
        resumed = layout.params.exists()
        text = freeze_config(cfg, layout)
        if resumed:  # the runs a killed process left RUNNING say so
            tracking.mark_killed(cfg, layout)
        core_hours, hours = given_limits(cfg, layout, iterations, core_hours, hours)
        n = asked_iterations(cfg, layout, iterations, core_hours, hours)
        if not dask_address and _plays(cfg, layout, n, core_hours, hours, cpu_start):
            start_workers(cfg)  # (they compile while the flow starts)
        with prefect_api(cfg.pipeline.prefect_api_url):
            rows = pipeline(
                text,
                str(layout.project),
                layout.run,
                n,
                dask_address,
                core_hours,
                hours,
                cpu_start,
            )
        raise_if_interrupted()  # a Ctrl-C the pipeline flow's engine dropped at its end
        return rows
