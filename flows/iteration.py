"""One iteration of AlphaGo Zero: self-play → dataset → training → gating → promotion.

Control flow only: every side effect is a task in ``tasks/``, and every stage input is a spec
the plan holds (`tabula.plan`). Each stage is resumable (`tasks.run.markers`): it returns the
record its marker ``state/STAGE.json`` holds when it finished before, so running the same
command again resumes at the first unfinished stage of the first unfinished iteration.

The flow ends once the gate's candidate is crowned (or not); the iteration's close (its model's
registration, its promotion record, its DVC push, its lineage commit and summary: `close`) runs
beside the next iteration's games (`flows.beside`), and that iteration's first DVC commit waits
for it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

from flows.beside import beside
from tabula.config import Config, parse_config
from tabula.ladder import anchor_label
from tabula.plan import IterationPlan, NextIteration, derive_seed
from tasks import tracking
from tasks.commits import dvc_commit, dvc_push, record_lineage
from tasks.evaluate import anchor_match, anchors_to_play, elo_of, gate, ratings
from tasks.gpu_use import gpu_use
from tasks.pictures import evaluation_pictures, selfplay_pictures
from tasks.planning import plan
from tasks.promote import check_model, crown, promote
from tasks.run.cputime import Laps, cores, stage_metrics
from tasks.run.faults import kill_point
from tasks.run.layout import RunLayout
from tasks.run.markers import finished, resumable
from tasks.run.records import EvaluationRecord, PromotionRecord, SelfplayRecord, Stage, TrainRecord
from tasks.run.summary import SummaryRow, summary_row
from tasks.selfplay import calibrate, games_began, play_workers
from tasks.stage_files import write_iteration_stages
from tasks.tracking import Tracking
from tasks.train import train, window_hashes
from tasks.watch import IterationProgress, publish_summary

#: The iteration's stages and their records (what the flow run logs as they finish).
STAGE_RECORDS = {
    Stage.SELFPLAY: SelfplayRecord,
    Stage.TRAIN: TrainRecord,
    Stage.EVALUATE: EvaluationRecord,
    Stage.PROMOTE: PromotionRecord,
}


@resumable(Stage.SELFPLAY, SelfplayRecord)
def run_selfplay(
    cfg: Config, layout: RunLayout, plan: IterationPlan, track: Tracking, laps: Laps
) -> SelfplayRecord:
    """Play iteration ``plan.iteration``'s games as its worker specs say, once the champion's
    checkpoint is found to hold the weights recorded for it (`tasks.promote.check_model`), or
    wait for those the pipeline started before the flow run (`tasks.selfplay.play_ahead`):
    the self-play lap then begins when they did."""
    i = plan.iteration
    began = games_began(cfg, layout, i)  # (started before the flow run: `play_ahead`)
    check_model(layout, plan.best)
    beside(layout.root).release()  # the previous iteration's close, beside the games
    with laps.lap(Stage.SELFPLAY.value, since=began):  # the games; what follows records them
        records = play_workers(cfg, layout, plan.workers)
    hashes = _commit(layout, i, Stage.SELFPLAY)
    v_resign = plan.workers[0].v_resign if plan.workers else None
    totals = calibrate(records, i, v_resign, cfg.selfplay.resign_false_positive_target, hashes)
    tracking.log_metrics(track, tracking.metrics_of(totals, "selfplay/"), step=i)
    tracking.log_datasets(track, hashes, context="selfplay")
    tracking.log_pictures(track, selfplay_pictures(layout, i))
    return totals


@resumable(Stage.TRAIN, TrainRecord)
def run_train(
    cfg: Config, layout: RunLayout, plan: IterationPlan, track: Tracking, laps: Laps
) -> TrainRecord:
    """Train iteration ``plan.iteration`` as its spec says, once its parent's checkpoint (the
    folder its DVC record names) is found to hold the weights recorded for it."""
    i, spec = plan.iteration, plan.train
    assert spec is not None  # (`tasks.planning.plan` gives every plan its specs)
    check_model(layout, plan.parent)
    with laps.lap(Stage.TRAIN.value):  # the steps; what follows records them
        trained = train(cfg, layout, spec, track.run_id, track.uri)
    hashes = _commit(layout, i, Stage.TRAIN)
    window = window_hashes(layout, spec.window)
    tracking.log_datasets(track, window, context="training")
    metrics = tracking.metrics_of(trained, "train/")  # (the iteration's run has them by step)
    tracking.log_metrics(track, metrics, step=i, on="pipeline")
    return TrainRecord(trained=trained, hashes=hashes, window=window)


@resumable(Stage.EVALUATE, EvaluationRecord)
def run_evaluate(
    cfg: Config, layout: RunLayout, plan: IterationPlan, track: Tracking, laps: Laps
) -> EvaluationRecord:
    """Gate iteration ``plan.iteration``'s candidate against the champion (its checkpoint
    checked first, as for self-play), play the anchors and rate every player so far."""
    i = plan.iteration
    check_model(layout, plan.best)
    with laps.lap(Stage.EVALUATE.value):  # the games
        gated = gate(cfg, layout, i, plan.best, plan.gate_seed)
        anchors, skipped = anchors_to_play(cfg, i, plan.planned)
        # Each match's seed is its place after the random player's, played or not.
        order = ["random", *(a for a in anchors if a != "random")]
        matches = {
            a: anchor_match(cfg, layout, i, a, derive_seed(plan.gate_seed, order.index(a) + 1))
            for a in anchors
        }
    with laps.lap("ratings"):  # the Elo fit over every game so far, and its curve
        table = ratings(cfg, layout, i)
    hashes = _commit(layout, i, Stage.EVALUATE)
    result = EvaluationRecord(
        gate=gated,
        anchors={anchor_label(a): m for a, m in matches.items()},
        skipped=skipped,
        ratings=table,
        hashes=hashes,
        elo=elo_of(layout, i, table),
    )
    tracking.log_metrics(track, tracking.evaluation_metrics(result), step=i)
    tracking.log_artifacts(
        track, {str(layout.match(i)): "evaluation", str(layout.elo_plot): "plots"}
    )
    tracking.log_pictures(track, evaluation_pictures(layout, i, result))
    return result


@resumable(Stage.PROMOTE, PromotionRecord)
def run_promote(
    cfg: Config,
    layout: RunLayout,
    plan: IterationPlan,
    evaluation: EvaluationRecord,
    train: TrainRecord,
    track: Tracking,
    tags: dict[str, str],
) -> PromotionRecord:
    i = plan.iteration
    promoted = evaluation.gate.decision.promoted
    sha256 = train.trained.result.weights_sha256
    lineage = tracking.checkpoint_tags(layout, plan, train, tags)
    measured = tracking.evaluation_metrics(evaluation)  # (linked to the logged model)
    version = tracking.register(track, layout.model(i), sha256, lineage, promoted, measured)
    result = promote(layout, i, promoted, version, sha256)
    champion = {tracking.TAG_CHAMPION: result.champion}
    tracking.log_metrics(track, {"promoted": float(promoted)}, step=i, tags=champion)
    return result


@dataclass(frozen=True)
class Closing:
    """What an iteration's close needs (`close`): its plan, its stages' records, its MLflow run
    and tags, its progress artifact, whether its promotion was recorded before (a resume), and
    its summary row."""

    plan: IterationPlan
    train: TrainRecord
    evaluation: EvaluationRecord
    track: Tracking
    tags: dict[str, str]
    progress: IterationProgress
    found: bool
    row: SummaryRow


def close(cfg: Config, layout: RunLayout, closing: Closing) -> None:
    """End an iteration, beside the next one's games (`flows.beside`): register its model and
    record its promotion (`run_promote`), push its stages' outputs to the DVC remote, commit its
    lineage, publish its summary and end its MLflow run (FAILED, or KILLED on an interrupt,
    when this raises)."""
    plan, track, tags = closing.plan, closing.track, closing.tags
    i = plan.iteration
    try:
        promotion = run_promote(cfg, layout, plan, closing.evaluation, closing.train, track, tags)
        closing.progress.done(Stage.PROMOTE, promotion, closing.found)
        dvc_push(layout, i)  # (before the lineage that names its data)
        record_lineage(layout, i, f"{layout.run}: iteration {i} (code {tags.get('git_commit')})")
        publish_summary(layout, i, closing.row, closing.evaluation, promotion.champion)
    except BaseException as error:
        tracking.fail(track, error)
        raise
    tracking.finish(track)


def _completed(flow_: object, flow_run: object, state: object) -> None:
    """The flow's completion hook: the test-only point ``completed`` (`tasks.run.faults`), where
    Prefect's engine has ended the flow run Completed and not yet closed it."""
    kill_point("completed")


@flow(name="tabula-iteration", flow_run_name="{run}-iter-{i}", on_completion=[_completed])
def iteration(
    config_yaml: str,
    project: str,
    run: str,
    i: int,
    pipeline_run: Tracking,
    tags: dict[str, str],
    planned: NextIteration,
) -> Closing:
    """Run (or resume) iteration ``i`` of ``run`` as ``planned`` (`tasks.planning.upcoming`:
    the rate schedule fits the run it is planned for) up to its champion crowned; returns what
    its close needs (`close`, which the pipeline runs beside the next iteration), with its
    summary row and the CPU-seconds of each stage (`_stages`). Its MLflow run is a child of
    ``pipeline_run``'s, ended by its close."""
    cfg = parse_config(config_yaml, source=f"data/{run}/params.yaml")
    layout = RunLayout(Path(project), cfg.pipeline.data_dir, run)
    with gpu_use(cfg) as gpu:
        laps = Laps("bookkeeping", gpu, beside(layout.root).cpu_seconds)
        made = plan(cfg, layout, i, planned)
        write_iteration_stages(layout, made)
        tags = {**tags, "prefect.flow_run_id": str(flow_run.id or "")}
        track = tracking.open_iteration_run(cfg, pipeline_run, i, tags)
        try:  # (from here on, a stop ends the child run FAILED or KILLED)
            closing = _stages(cfg, layout, made, track, tags, laps)
            cpu, wall, n, busy = laps.totals(), laps.walls(), cores(), laps.gpu_busy()
            metrics = stage_metrics(cpu, wall, n, busy)
            tracking.log_metrics(track, metrics, step=i, on="iteration")
        except BaseException as error:  # the child run ends FAILED, or KILLED on an interrupt
            tracking.fail(track, error)
            raise
    row = dataclasses.replace(
        closing.row, stage_cpu_s=cpu, stage_wall_s=wall, cores=n, gpu_busy=busy
    )
    return dataclasses.replace(closing, row=row)


def _stages(
    cfg: Config,
    layout: RunLayout,
    plan: IterationPlan,
    track: Tracking,
    tags: dict[str, str],
    laps: Laps,
) -> Closing:
    """The iteration's stages in order, each found or run, up to the champion crowned (the
    next iteration plays it); its close follows (`close`). CPU-seconds by stage (``laps``): the
    games, the training steps, the matches, the ratings (the Elo fit and curve) and the
    crowning; everything else (the plan, DVC commits, MLflow) is bookkeeping. The previous
    iteration's close, running beside this one's start, is charged to ``close``."""
    i = plan.iteration
    progress = IterationProgress(layout, i, track.run_id, tracking.run_link(track))
    found = {s for s, r in STAGE_RECORDS.items() if finished(layout, i, s, r) is not None}
    selfplay = run_selfplay(cfg, layout, plan, track, laps)
    progress.done(Stage.SELFPLAY, selfplay, Stage.SELFPLAY in found)
    train = run_train(cfg, layout, plan, track, laps)
    progress.done(Stage.TRAIN, train, Stage.TRAIN in found)
    evaluation = run_evaluate(cfg, layout, plan, track, laps)
    progress.done(Stage.EVALUATE, evaluation, Stage.EVALUATE in found)
    promoted = evaluation.gate.decision.promoted
    if Stage.PROMOTE not in found:  # (a promotion recorded before crowned it then)
        with laps.lap(Stage.PROMOTE.value):
            crown(layout, i, promoted, train.trained.result.weights_sha256)
    row = summary_row(i, selfplay, train, evaluation, promoted)
    return Closing(plan, train, evaluation, track, tags, progress, Stage.PROMOTE in found, row)


def _commit(layout: RunLayout, i: int, stage: Stage) -> dict[str, str]:
    """Record iteration ``i``'s finished ``stage`` in DVC (`tasks.commits.dvc_commit`) once the
    previous iteration's close has ended (`flows.beside`): the project's repository takes one
    commit at a time, in order, and a close that failed stops the run here, with its error."""
    beside(layout.root).wait()
    return dvc_commit(layout, i, stage.value)
