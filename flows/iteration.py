"""One iteration of AlphaGo Zero: self-play → dataset → training → gating → promotion.

Control flow only: every side effect is a task in ``tasks/``. Each stage is resumable
(``tasks.resume``): it returns the record its marker ``state/STAGE.json`` holds when it
finished before, so running the same command again resumes at the first unfinished stage of
the first unfinished iteration.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

from tabula.config import Config, parse_config
from tabula.ladder import anchor_label
from tabula.plan import IterationPlan, derive_seed, with_v_resign, worker_games
from tasks import record, stages
from tasks.control import IterationProgress
from tasks.layout import RunLayout
from tasks.lineage import checkpoint_tags, write_iteration_stages
from tasks.records import (
    EvaluationRecord,
    PromotionRecord,
    SelfplayRecord,
    Stage,
    TrainRecord,
)
from tasks.resume import finished, resumable
from tasks.summary import SummaryRow, publish_summary

#: The iteration's stages and their records (what the flow run logs as they finish).
STAGE_RECORDS = {
    Stage.SELFPLAY: SelfplayRecord,
    Stage.TRAIN: TrainRecord,
    Stage.EVALUATE: EvaluationRecord,
    Stage.PROMOTE: PromotionRecord,
}


@resumable(Stage.SELFPLAY, SelfplayRecord)
def run_selfplay(
    cfg: Config, layout: RunLayout, plan: IterationPlan, runs: list[str], v_resign: float | None
) -> SelfplayRecord:
    i = plan.iteration
    cfg = with_v_resign(cfg, v_resign)
    best = str(layout.model(plan.best))
    futures = [
        stages.selfplay_worker.submit(
            cfg, layout, i, w, best, games, derive_seed(plan.selfplay_seed, w)
        )
        for w, games in enumerate(worker_games(cfg.selfplay.games, cfg.selfplay.workers))
    ]
    workers = [f.result() for f in futures]
    hashes = stages.dvc_commit(layout, i, Stage.SELFPLAY.value)
    totals = stages.calibrate(
        workers, i, cfg.selfplay.v_resign, cfg.selfplay.resign_false_positive_target, hashes
    )
    record.log_metrics(cfg, layout, runs, record.metrics_of(totals, "selfplay/"), step=i)
    record.log_datasets(cfg, layout, runs[0], hashes, context="selfplay")
    return totals


@resumable(Stage.TRAIN, TrainRecord)
def run_train(
    cfg: Config, layout: RunLayout, plan: IterationPlan, runs: list[str], iterations: int
) -> TrainRecord:
    """Train iteration ``plan.iteration`` with the rate schedule of a run of ``iterations``
    (or of ``pipeline.iterations``, if more: `tabula.config.TrainingConfig.boundaries_for`)."""
    i = plan.iteration
    parent = layout.trainer_ckpt(plan.parent)
    init = parent if plan.parent > 0 and parent.exists() else layout.model(plan.parent)
    trained = stages.train(
        cfg,
        layout,
        i,
        list(plan.window),
        str(init),
        plan.train_seed,
        runs[0],
        record.tracking_uri(cfg, layout),
        lr_boundaries=cfg.training.boundaries_for(max(iterations, cfg.pipeline.iterations)),
    )
    hashes = stages.dvc_commit(layout, i, Stage.TRAIN.value)
    window = stages.window_hashes(layout, plan.window)
    record.log_datasets(cfg, layout, runs[0], window, context="training")
    record.log_metrics(cfg, layout, runs[1:], record.metrics_of(trained, "train/"), step=i)
    return TrainRecord(trained=trained, hashes=hashes, window=window)


@resumable(Stage.EVALUATE, EvaluationRecord)
def run_evaluate(
    cfg: Config, layout: RunLayout, plan: IterationPlan, runs: list[str]
) -> EvaluationRecord:
    i = plan.iteration
    gate = stages.gate(cfg, layout, i, plan.best, plan.gate_seed)
    anchors, skipped = stages.anchors_to_play(cfg, i)
    matches = {
        a: stages.anchor_match(cfg, layout, i, a, derive_seed(plan.gate_seed, k + 1))
        for k, a in enumerate(anchors)
    }
    table = stages.ratings(cfg, layout, i)
    hashes = stages.dvc_commit(layout, i, Stage.EVALUATE.value)
    result = EvaluationRecord(
        gate=gate,
        anchors={anchor_label(a): m for a, m in matches.items()},
        skipped=skipped,
        ratings=table,
        hashes=hashes,
        elo=stages.elo_of(layout, i, table),
    )
    record.log_metrics(cfg, layout, runs, record.evaluation_metrics(result), step=i)
    record.log_artifacts(
        cfg,
        layout,
        runs[0],
        {str(layout.match(i)): "evaluation", str(layout.root / "elo.png"): "plots"},
    )
    return result


@resumable(Stage.PROMOTE, PromotionRecord)
def run_promote(
    cfg: Config,
    layout: RunLayout,
    plan: IterationPlan,
    evaluation: EvaluationRecord,
    train: TrainRecord,
    runs: list[str],
    tags: dict[str, str],
) -> PromotionRecord:
    i = plan.iteration
    promoted = evaluation.gate.decision.promoted
    sha256 = train.trained.result.weights_sha256
    lineage = checkpoint_tags(layout, plan, train, tags)
    version = record.register(cfg, layout, runs[0], i, sha256, lineage, champion=promoted)
    result = stages.promote(layout, i, promoted, version)
    record.log_metrics(
        cfg,
        layout,
        runs,
        {"promoted": float(promoted)},
        step=i,
        tags={"tabula.champion_iteration": result.champion},
    )
    return result


@flow(name="tabula-iteration", flow_run_name="{run}-iter-{i}")
def iteration(
    config_yaml: str,
    project: str,
    run: str,
    i: int,
    parent_run_id: str,
    tags: dict[str, str],
    iterations: int | None = None,
) -> SummaryRow:
    """Run (or resume) iteration ``i`` of ``run``, part of a run of ``iterations`` iterations
    (default: the config's; the rate schedule stretches to it); returns its summary row."""
    cfg = parse_config(config_yaml, source=f"data/{run}/params.yaml")
    layout = RunLayout(Path(project), cfg.pipeline.data_dir, run)
    plan = stages.plan(cfg, layout, i)
    write_iteration_stages(layout, plan)
    tags = {**tags, "prefect.flow_run_id": str(flow_run.id or "")}
    child = record.open_iteration_run(cfg, layout, i, parent_run_id, tags)
    runs = [child, parent_run_id]
    try:  # (from here on, a stop ends the child run FAILED or KILLED)
        progress = IterationProgress(layout, i, child, record.run_link(cfg, layout, child))
        found = {s for s, r in STAGE_RECORDS.items() if finished(layout, i, s, r) is not None}
        previous = finished(layout, i - 1, Stage.SELFPLAY, SelfplayRecord)
        v_resign = None if previous is None else previous.v_resign_next
        selfplay = run_selfplay(cfg, layout, plan, runs, v_resign)
        progress.done(Stage.SELFPLAY, selfplay, Stage.SELFPLAY in found)
        train = run_train(cfg, layout, plan, runs, iterations or cfg.pipeline.iterations)
        progress.done(Stage.TRAIN, train, Stage.TRAIN in found)
        evaluation = run_evaluate(cfg, layout, plan, runs)
        progress.done(Stage.EVALUATE, evaluation, Stage.EVALUATE in found)
        promotion = run_promote(cfg, layout, plan, evaluation, train, runs, tags)
        progress.done(Stage.PROMOTE, promotion, Stage.PROMOTE in found)
        stages.record_lineage(layout, i, f"{run}: iteration {i} (code {tags.get('git_commit')})")
        row = publish_summary(layout, i, selfplay, train, evaluation, promotion)
    except BaseException as error:  # the child run ends FAILED, or KILLED on an interrupt
        record.fail(cfg, layout, [child], error)
        raise
    record.finish(cfg, layout, child)
    return row
