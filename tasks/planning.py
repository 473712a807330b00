"""What a run and each of its iterations start from: the random initial network, whether the
next iteration runs and for what run it is planned, and the iteration's plan.

The plan (`tabula.plan.IterationPlan`) fixes what an iteration is made from and the inputs of
its stages, the self-play workers' and training's specs, before the iteration starts; it is
written once, and the flow and reproduction both run the specs it holds. A plan written before
the specs were recorded is upgraded when it is read (`read_plan`), as its run played it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from prefect import task

from tabula.config import Config
from tabula.plan import (
    RECENT,
    IterationPlan,
    NextIteration,
    RunState,
    Spend,
    effective_v_resign,
    next_iteration,
    plan_iteration,
    stage_specs,
)
from tasks.retry import IO_RETRIES
from tasks.run.budget import read_budget
from tasks.run.cputime import Meter
from tasks.run.layout import RunLayout, reset_dir
from tasks.run.markers import champion, finished, resumable
from tasks.run.records import (
    EvaluationRecord,
    InitRecord,
    SelfplayRecord,
    Spent,
    Stage,
    TrainRecord,
)


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


def upcoming(
    cfg: Config, layout: RunLayout, meter: Meter, i: int, asked: int | None
) -> NextIteration:
    """Whether iteration ``i`` of a run asked for ``asked`` iterations (None: as many as its
    budget pays for) runs, and the run it is planned for (`tabula.plan.next_iteration`), from
    the run's ``budget.json``, what ``meter`` says it spent, whether the iteration began, what
    the previous one trained, and how far past its budget the run may end
    (``pipeline.budget_overshoot``: the next iteration's cost is predicted from the last), or
    the games it plays when it shrinks or stretches to end within the budget
    (``pipeline.budget_shrink``, ``pipeline.budget_stretch``)."""
    budget = read_budget(layout)
    cpu, wall = meter.totals()
    every = cfg.evaluation.anchor_every if cfg.evaluation.anchor_games else None
    # (the random player comes with the anchors unless it has its own turn: a steady cost)
    own_turn = {"random"} if cfg.evaluation.random_every is not None else set()
    # (a shrunk or stretched iteration counts as its share of one with the stretch, format 13)
    games = cfg.selfplay.games if cfg.pipeline.budget_stretch is not None else None
    spent = _spends(layout, budget.spent, (every or 1) + RECENT + 1, own_turn, games)
    state = replace(
        _trained(cfg, layout, i, asked),
        core_hours=budget.core_hours,
        hours=budget.hours,
        cpu_s=cpu,
        wall_s=wall,
        spent=spent,
        started=layout.marker(i, Stage.PLAN.marker_name()).exists(),
        overshoot=cfg.pipeline.budget_overshoot,
        games=cfg.selfplay.games,
        shrink=cfg.pipeline.budget_shrink,
        stretch=cfg.pipeline.budget_stretch,
        anchor_every=every,
        anchor_skip=cfg.evaluation.anchor_skip_near_last,
    )
    if budget.spent:
        state = replace(state, **_fixed_costs(budget.spent, spent[-1]))
    return next_iteration(cfg.training, state)


def _spends(
    layout: RunLayout, spent: Sequence[Spent], recent: int, steady: set[str], games: int | None
) -> tuple[Spend, ...]:
    """The budget's records as the planner reads them, each of the ``recent`` newest with what
    its anchor matches cost (the ``evaluate`` stage's CPU and wall seconds in the share its
    anchor matches took of its games' seconds; the rest is the gate's, and that of the matches
    named in ``steady``, which play in turns of their own) and the share of ``games``
    (``selfplay.games``; None: each counts as a whole one) its self-play played."""
    out = []
    for k, s in enumerate(spent):
        if k < len(spent) - recent:
            out.append(Spend(s.iteration, s.cpu_s, s.wall_s))
            continue
        share = _anchor_share(layout, s.iteration, steady)
        cpu = share * s.stages.get("evaluate", 0.0)
        wall = share * s.stage_wall_s.get("evaluate", 0.0)
        part = 1.0 if games is None else _games_share(layout, s.iteration, games)
        out.append(Spend(s.iteration, s.cpu_s, s.wall_s, cpu, wall, part))
    return tuple(out)


def _games_share(layout: RunLayout, i: int, games: int) -> float:
    """The share of ``games`` iteration ``i``'s self-play played (1: not recorded)."""
    played = finished(layout, i, Stage.SELFPLAY, SelfplayRecord)
    return 1.0 if played is None or played.games < 1 else played.games / games


def _anchor_share(layout: RunLayout, i: int, steady: set[str]) -> float:
    """The share of iteration ``i``'s match seconds its anchor matches took, those named in
    ``steady`` left out (0: none, or its evaluation not recorded)."""
    evaluated = finished(layout, i, Stage.EVALUATE, EvaluationRecord)
    if evaluated is None:
        return 0.0
    anchors = sum(a.seconds for name, a in evaluated.anchors.items() if name not in steady)
    games = sum(a.seconds for a in evaluated.anchors.values()) + evaluated.gate.seconds
    return anchors / games if games > 0 else 0.0


#: The stages whose cost scales with an iteration's self-play games.
SCALED = ("selfplay", "train")


def _fixed_costs(spent: Sequence[Spent], matches: Spend) -> dict[str, float]:
    """What the last finished iteration of ``spent`` (cumulative records) spent outside
    self-play, training and its anchor matches (``matches``: its planner's record), in CPU and
    wall seconds (`tabula.plan.RunState.fixed_cpu_s`)."""
    last = spent[-1]
    before = spent[-2] if len(spent) > 1 else Spent(0, 0.0, 0.0, {})
    out = {}
    for key, cost, stages, played in (
        ("fixed_cpu_s", last.cpu_s - before.cpu_s, last.stages, matches.matches_cpu_s),
        ("fixed_wall_s", last.wall_s - before.wall_s, last.stage_wall_s, matches.matches_wall_s),
    ):  # (0 where the stages were not recorded: runs of before)
        scaled = sum(stages.get(k, 0.0) for k in SCALED)
        out[key] = max(0.0, cost - scaled - played) if scaled > 0 else 0.0
    return out


def _trained(cfg: Config, layout: RunLayout, i: int, asked: int | None) -> RunState:
    """The state before iteration ``i`` without a budget: what the previous one trained."""
    previous = finished(layout, i - 1, Stage.TRAIN, TrainRecord)
    ran = None if previous is None else previous.trained.result
    return RunState(
        iteration=i,
        asked=asked,
        default=cfg.pipeline.iterations,
        trained=0 if ran is None else ran.global_step,
        last_steps=None if ran is None else ran.steps,
    )


def given_limits(
    cfg: Config,
    layout: RunLayout,
    iterations: int | None,
    core_hours: float | None,
    hours: float | None,
) -> tuple[float | None, float | None]:
    """The CPU and wall limits this invocation gives the run: those named (``--core-hours``,
    ``--hours``); when it names neither nor the iterations, on a run without limits yet, the
    config's (``pipeline.core_hours``, ``pipeline.hours``: the quick start's wall clock); else
    none, and a run keeps the limits it has (`tasks.run.budget.set_limits`)."""
    if core_hours is not None or hours is not None or iterations is not None:
        return core_hours, hours
    budget = read_budget(layout)
    if budget.core_hours is not None or budget.hours is not None:
        return None, None
    return cfg.pipeline.core_hours, cfg.pipeline.hours


def asked_iterations(
    cfg: Config,
    layout: RunLayout,
    iterations: int | None,
    core_hours: float | None,
    hours: float | None,
) -> int | None:
    """The iterations a run is asked for: ``iterations`` when given, else the config's
    ``pipeline.iterations`` unless the run has a budget (these limits, or the ones it was given
    before), which then says how many (None)."""
    if iterations is not None:
        return iterations
    budget = read_budget(layout)
    limits = (core_hours, hours, budget.core_hours, budget.hours)
    return None if any(x is not None for x in limits) else cfg.pipeline.iterations


@task(name="plan", task_run_name="plan-i{iteration}", **IO_RETRIES)
def plan(cfg: Config, layout: RunLayout, iteration: int, planned: NextIteration) -> IterationPlan:
    """Fix what ``iteration`` is made from (`tabula.plan.plan_iteration`: the champion, the
    parent checkpoint, the window and the seeds) and its stages' inputs, training with the
    rate schedule of the run it is ``planned`` for; written once, so that a promotion later in
    the run never changes what an earlier iteration was made from. A plan written before is
    returned as it is, upgraded when it lacks the specs (`upgraded`)."""
    return upgraded(cfg, layout, _fixed(cfg, layout, iteration, planned), planned.lr_boundaries)


@resumable(Stage.PLAN, IterationPlan)
def _fixed(cfg: Config, layout: RunLayout, iteration: int, planned: NextIteration) -> IterationPlan:
    best = champion(layout)
    made = plan_iteration(
        cfg,
        iteration,
        0 if best is None else best.iteration,
        lambda j: layout.rel(layout.selfplay(j)),
    )
    return stage_specs(
        cfg,
        replace(made, planned=planned.iterations),
        layout.rel(layout.model(made.best)),
        lambda w: layout.rel(layout.worker(iteration, w)),
        _calibrated_v_resign(cfg, layout, iteration),
        list(planned.lr_boundaries),
        training_bf16(cfg),
        games=planned.games,
    )


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


def read_plan(cfg: Config, layout: RunLayout, i: int) -> IterationPlan | None:
    """Iteration ``i``'s written plan with its stages' inputs (`upgraded`, its training
    planned as by a run of ``pipeline.iterations``); None when it has none."""
    written = finished(layout, i, Stage.PLAN, IterationPlan)
    if written is None:
        return None
    planned = next_iteration(cfg.training, _trained(cfg, layout, i, cfg.pipeline.iterations))
    return upgraded(cfg, layout, written, planned.lr_boundaries)


def upgraded(
    cfg: Config, layout: RunLayout, plan: IterationPlan, lr_boundaries: Sequence[int]
) -> IterationPlan:
    """``plan`` with its stage inputs: those it holds, or, for a plan written before they
    were recorded, the ones its run used (the previous iteration's calibrated threshold; for
    training, what its record says it ran with, else ``lr_boundaries`` and the precision of
    the machine it trains on)."""
    if plan.train is not None:
        return plan
    trained = finished(layout, plan.iteration, Stage.TRAIN, TrainRecord)
    bf16, boundaries = None, list(lr_boundaries)
    if trained is not None:
        ran = trained.trained.result
        bf16 = ran.bf16
        # () when the boundaries were not recorded: the config's, as training then used.
        unrecorded = next_iteration(cfg.training, RunState.first(cfg.pipeline.iterations))
        boundaries = list(ran.lr_boundaries or unrecorded.lr_boundaries)
    return stage_specs(
        cfg,
        plan,
        layout.rel(layout.model(plan.best)),
        lambda w: layout.rel(layout.worker(plan.iteration, w)),
        _calibrated_v_resign(cfg, layout, plan.iteration),
        boundaries,
        bf16,
    )
