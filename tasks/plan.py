"""The run's first stage and each iteration's first: the random initial network, and the plan.

The plan (`tabula.plan.IterationPlan`) fixes what an iteration is made from and the inputs of
its stages, the self-play workers' and training's specs, before the iteration starts; it is
written once, and the flow and reproduction both run the specs it holds (`specs_of`).
"""

from __future__ import annotations

from prefect import task

from tabula.config import Config
from tabula.plan import (
    IterationPlan,
    TrainSpec,
    WorkerSpec,
    effective_v_resign,
    plan_iteration,
    planned_steps,
    stage_specs,
)
from tasks.retry import IO_RETRIES
from tasks.run.layout import RunLayout, reset_dir
from tasks.run.markers import champion, finished, resumable
from tasks.run.records import InitRecord, SelfplayRecord, Stage, TrainRecord


@task(name="init-model", task_run_name="init-model", **IO_RETRIES)
@resumable(Stage.INIT, InitRecord)
def init_model(cfg: Config, layout: RunLayout, seed: int) -> InitRecord:
    """The randomly initialised network that starts the run (iteration 0)."""
    from model.checkpoint import save_checkpoint
    from model.network import network_for, weights_sha256
    from tasks.stage_files import init_metadata

    reset_dir(layout.model_dir(0))
    net = network_for(cfg, seed)
    save_checkpoint(layout.model(0), net, init_metadata(layout.run, seed))
    return InitRecord(model=layout.rel(layout.model(0)), sha256=weights_sha256(net))


@task(name="plan", task_run_name="plan-i{iteration}", **IO_RETRIES)
@resumable(Stage.PLAN, IterationPlan)
def plan(cfg: Config, layout: RunLayout, iteration: int, iterations: int) -> IterationPlan:
    """Fix what ``iteration`` is made from (`tabula.plan.plan_iteration`: the champion, the
    parent checkpoint, the window and the seeds) and its stages' inputs, for a run planned
    for ``iterations`` iterations; written once, so that a promotion later in the run never
    changes what an earlier iteration was made from."""
    best = champion(layout)
    made = plan_iteration(
        cfg,
        iteration,
        0 if best is None else best.iteration,
        lambda j: layout.rel(layout.selfplay(j)),
    )
    return stage_specs(
        cfg,
        made,
        layout.rel(layout.model(made.best)),
        lambda w: layout.rel(layout.worker(iteration, w)),
        _calibrated_v_resign(cfg, layout, iteration),
        lr_boundaries(cfg, layout, iteration, iterations),
        training_bf16(cfg),
    )


def lr_boundaries(cfg: Config, layout: RunLayout, iteration: int, iterations: int) -> list[int]:
    """The rate schedule's drops for ``iteration`` of a run planned for ``iterations``
    iterations: the count it was asked for, or what its budget is expected to pay for
    (`tasks.run.budget`), so that a run anneals within itself
    (`tabula.config.TrainingConfig.boundaries_for`); with steps sized to the data, over the
    steps `tabula.plan.planned_steps` expects from what the previous iteration trained."""
    previous = finished(layout, iteration - 1, Stage.TRAIN, TrainRecord)
    ran = None if previous is None else previous.trained.result
    trained, last = (0, None) if ran is None else (ran.global_step, ran.steps)
    total = planned_steps(cfg, iteration, iterations, trained, last)
    return cfg.training.boundaries_for(iterations, total)


def training_bf16(cfg: Config) -> bool:
    """Whether training runs under bf16 autocast: ``training.bf16``, with "auto" resolved for
    this machine (`model.evaluator.native_bf16`)."""
    if cfg.training.bf16 != "auto":
        return bool(cfg.training.bf16)
    from model.evaluator import native_bf16

    return native_bf16(cfg.pipeline.device)


def _calibrated_v_resign(cfg: Config, layout: RunLayout, iteration: int) -> float | None:
    previous = finished(layout, iteration - 1, Stage.SELFPLAY, SelfplayRecord)
    return effective_v_resign(cfg, None if previous is None else previous.v_resign_next)


def specs_of(
    cfg: Config, layout: RunLayout, plan: IterationPlan, iterations: int | None = None
) -> tuple[tuple[WorkerSpec, ...], TrainSpec]:
    """The stage inputs of ``plan``: those it holds, or, for a plan written before they were
    recorded, the ones its run used (the previous iteration's calibrated threshold; for
    training, what its record says it ran with, else the schedule of a run of ``iterations``
    and the precision of this machine)."""
    if plan.train is not None:
        return plan.workers, plan.train
    trained = finished(layout, plan.iteration, Stage.TRAIN, TrainRecord)
    if trained is None:
        planned = iterations or cfg.pipeline.iterations
        bf16, boundaries = None, lr_boundaries(cfg, layout, plan.iteration, planned)
    else:
        ran = trained.trained.result
        bf16 = ran.bf16
        boundaries = list(ran.lr_boundaries) or cfg.training.boundaries_for(
            cfg.pipeline.iterations
        )  # () when the boundaries were not recorded: the config's, as train_stage then did
    full = stage_specs(
        cfg,
        plan,
        layout.rel(layout.model(plan.best)),
        lambda w: layout.rel(layout.worker(plan.iteration, w)),
        _calibrated_v_resign(cfg, layout, plan.iteration),
        boundaries,
        bf16,
    )
    assert full.train is not None
    return full.workers, full.train
