"""What an iteration is made from: its champion, parent checkpoint, training window and seeds,
and the inputs of its stages as typed specs (one per self-play worker, one for training).

Also whether the next iteration runs, and over how many the rate schedule anneals
(`next_iteration`: the budget's and the schedule's arithmetic, in one place).

Pure: the pipeline's plan task (`tasks.planning.plan`) reads the champion, calls `plan_iteration`
and `stage_specs`, and writes the plan once, so that a promotion later in the run never changes
what an earlier iteration was made from. The flow runs the specs; reproduction replays the same
specs, never a second derivation of them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np

from tabula.config import Config, TrainingConfig


@dataclass(frozen=True)
class WorkerSpec:
    """The inputs of one self-play worker (`tasks.selfplay.selfplay_worker`).

    iteration: the iteration it plays for (part of its games' seed sequence).
    worker: w, in [0, selfplay.workers).
    champion: project-relative path of the checkpoint that plays every move of its games
        (`tasks.selfplay.run_worker` takes a path as it is, or "random": a network
        initialised from the seed).
    games: how many games it plays (`worker_games`).
    seed: 32-bit seed of its games (``derive_seed(selfplay_seed, w)``).
    folder: project-relative folder it writes (``iter-NNNN/selfplay/worker-WW``).
    v_resign: the resignation threshold its games play with, in [-1, 1] from the side to move;
        None: resignation off (paper, Methods "Self-play": calibrated on the previous games).
    """

    iteration: int
    worker: int
    champion: str
    games: int
    seed: int
    folder: str
    v_resign: float | None


@dataclass(frozen=True)
class TrainSpec:
    """The inputs of one training stage (`tasks.train.train`).

    iteration: the iteration whose network it trains.
    window: self-play folders (project-relative) it samples from, oldest first.
    parent: the iteration whose checkpoint it continues from (`tasks.train.training_init`).
    seed: 32-bit seed of its sampling and initialisation.
    steps: optimizer steps of this stage, unless ``samples_per_row`` sizes them.
    lr_boundaries: the global steps where the rate drops (the run's schedule).
    bf16: train under bf16 autocast; None: resolved on the machine when training starts
        (plans written before the precision was planned).
    samples_per_row: when set, the stage trains `sized_steps` for the new rows of its window
        instead of ``steps``, counted when it starts and recorded in its result (None: plans
        written before the switch, and the switch off).
    holdout_games: the newest games of the iteration's own self-play left out of the window,
        on which the trained network's losses are measured (0: none).
    """

    iteration: int
    window: tuple[str, ...]
    parent: int
    seed: int
    steps: int
    lr_boundaries: tuple[int, ...]
    bf16: bool | None
    samples_per_row: float | None = None
    holdout_games: int = 0

    def steps_on(self, latest: float, batch_size: int) -> int:
        """The steps the stage trains on a window whose newest iteration holds ``latest``
        rows (or their total frequency weight): `sized_steps` with ``samples_per_row``, else
        ``steps``."""
        if self.samples_per_row is None:
            return self.steps
        return sized_steps(latest, self.samples_per_row, batch_size)


@dataclass(frozen=True)
class IterationPlan:
    """Everything an iteration's stages depend on, fixed before the iteration starts.

    best: iteration whose model is the champion that plays self-play and the gate.
    parent: the checkpoint training continues from (``iter-(i-1)/model``: the latest network,
    whatever the gate decided, as in the paper).
    window: self-play directories (project-relative) training samples from, oldest first.
    selfplay_seed, train_seed, gate_seed: 32-bit seeds of the iteration's stages.
    workers, train: the stages' inputs (`stage_specs`); empty and None in plans written before
    they were recorded, whose specs `tasks.planning.upgraded` derives as those runs did.
    planned: the iterations the run was planned for when this one was (`NextIteration`): the
    last of them plays the anchors whatever ``evaluation.anchor_every`` says, so that a run's
    final network is rated; None in plans written before.
    """

    iteration: int
    best: int
    parent: int
    window: tuple[str, ...]
    selfplay_seed: int
    train_seed: int
    gate_seed: int
    workers: tuple[WorkerSpec, ...] = ()
    train: TrainSpec | None = None
    planned: int | None = None


def derive_seed(run_seed: int, *keys: int) -> int:
    """One 32-bit seed per (run, iteration, worker, ...) from the run's seed.

    32 bits because Lightning's ``seed_everything`` accepts no more.
    """
    return int(np.random.SeedSequence([run_seed, *keys]).generate_state(1, np.uint32)[0])


def window_iterations(
    i: int, games_per_iteration: int, window_games: int, window_iterations: int | None
) -> list[int]:
    """The iterations whose self-play games iteration ``i`` trains on, oldest first.

    The newest iterations back from ``i`` until the window holds ``window_games`` games, at
    most ``window_iterations`` of them (None: no limit) and never iteration 0, which plays no
    games (paper, Methods: "the most recent 500,000 games").
    """
    window: list[int] = []
    games = 0
    oldest = max(0, i - (window_iterations or i))
    for j in range(i, oldest, -1):
        if games >= window_games:
            break
        window.insert(0, j)
        games += games_per_iteration
    return window


def plan_iteration(
    cfg: Config, i: int, best: int, selfplay_dir: Callable[[int], str]
) -> IterationPlan:
    """The plan of iteration ``i`` whose champion is iteration ``best``; ``selfplay_dir(j)``
    names iteration j's self-play directory (project-relative) in the window."""
    seed = cfg.pipeline.seed
    window = window_iterations(
        i, cfg.selfplay.games, cfg.training.window_games, cfg.training.window_iterations
    )
    return IterationPlan(
        iteration=i,
        best=best,
        parent=i - 1,
        window=tuple(selfplay_dir(j) for j in window),
        selfplay_seed=derive_seed(seed, i, 0),
        train_seed=derive_seed(seed, i, 1),
        gate_seed=derive_seed(seed, i, 2),
    )


def plays_anchors(iteration: int, every: int, skip_near_last: bool, planned: int | None) -> bool:
    """Whether iteration ``iteration`` plays the anchor matches: the last one the run is
    planned for (``planned``: the count its plan records; None in plans written before) always,
    so that a run's final network is rated; one divisible by ``every`` (``evaluation.
    anchor_every``) unless, with ``skip_near_last``, that last one, which plays them anyway, is
    less than half of ``every`` ahead (the curve's points stay at least that far apart)."""
    if planned is not None and iteration >= planned:
        return True
    near = skip_near_last and planned is not None and 2 * (planned - iteration) < every
    return iteration % every == 0 and not near


def worker_games(total: int, workers: int) -> list[int]:
    """``total`` games shared out among ``workers`` self-play workers, the first ones taking
    one more when it does not divide (worker w plays ``worker_games(...)[w]``)."""
    return [total // workers + (1 if w < total % workers else 0) for w in range(workers)]


def with_v_resign(cfg: Config, v_resign: float | None) -> Config:
    """``cfg`` with self-play's resignation threshold replaced by the one calibrated on the
    previous iteration's games (paper, Methods "Self-play"); unchanged when there is none or
    resignation is off (``selfplay.v_resign: null``)."""
    if v_resign is None or cfg.selfplay.v_resign is None:
        return cfg
    return cfg.model_copy(
        update={"selfplay": cfg.selfplay.model_copy(update={"v_resign": v_resign})}
    )


def effective_v_resign(cfg: Config, calibrated: float | None) -> float | None:
    """The threshold self-play plays with: the one calibrated on the previous iteration's
    games when there is one, else the config's; None when resignation is off."""
    if cfg.selfplay.v_resign is None:
        return None
    return cfg.selfplay.v_resign if calibrated is None else calibrated


def stage_specs(
    cfg: Config,
    plan: IterationPlan,
    champion: str,
    worker_folder: Callable[[int], str],
    v_resign: float | None,
    lr_boundaries: list[int],
    bf16: bool | None,
    *,
    games: int | None = None,
) -> IterationPlan:
    """``plan`` with its stages' inputs: one `WorkerSpec` per self-play worker (``champion``
    plays, worker w writes ``worker_folder(w)``, all with threshold ``v_resign`` as
    `effective_v_resign` gives it; ``games`` in all, at least one a worker, None:
    ``selfplay.games``) and the `TrainSpec` (the rate schedule's ``lr_boundaries``, precision
    ``bf16``)."""
    workers = cfg.selfplay.workers
    total = cfg.selfplay.games if games is None else max(games, workers)
    games_of = worker_games(total, workers)
    specs = tuple(
        WorkerSpec(
            iteration=plan.iteration,
            worker=w,
            champion=champion,
            games=n,
            seed=derive_seed(plan.selfplay_seed, w),
            folder=worker_folder(w),
            v_resign=v_resign,
        )
        for w, n in enumerate(games_of)
    )
    train = train_spec(
        cfg,
        plan.window,
        seed=plan.train_seed,
        lr_boundaries=lr_boundaries,
        iteration=plan.iteration,
        parent=plan.parent,
        bf16=bf16,
    )
    return replace(plan, workers=specs, train=train)


def train_spec(
    cfg: Config,
    window: Sequence[str],
    *,
    seed: int,
    lr_boundaries: Sequence[int],
    steps: int | None = None,
    iteration: int = 0,
    parent: int = 0,
    bf16: bool | None = None,
) -> TrainSpec:
    """The inputs of a training stage on ``window`` as ``cfg``'s ``training`` section asks:
    the pipeline's (`stage_specs`) and ``tabula train``'s, so that a training switch is added
    here and nowhere else.

    steps: train exactly that many (None: ``training.steps``, or sized to the window's newest
    rows when ``training.samples_per_row`` is set). iteration, parent: the run's iteration and
    the one it continues from (0 outside a run). bf16: None resolves the precision on the
    machine when the stage starts.
    """
    t = cfg.training
    return TrainSpec(
        iteration=iteration,
        window=tuple(window),
        parent=parent,
        seed=seed,
        steps=t.steps if steps is None else steps,
        lr_boundaries=tuple(int(b) for b in lr_boundaries),
        bf16=bf16,
        samples_per_row=t.samples_per_row if steps is None else None,
        holdout_games=t.holdout_games,
    )


def sized_steps(rows: float, samples_per_row: float, batch_size: int) -> int:
    """Optimizer steps that draw each of ``rows`` new rows about ``samples_per_row`` times
    (KataGo, Wu 2019: about 4): ceil(rows x samples_per_row / batch_size), at least 1. Over
    the iterations a row stays in the window, uniform sampling draws it that often on average
    when every iteration adds about as many rows."""
    return max(1, math.ceil(rows * samples_per_row / batch_size))


#: Iterations whose mean cost estimates the next ones' (recent costs, as a run's grow).
RECENT = 5
#: Seconds in an hour, and CPU-seconds in a core-hour.
HOUR = 3600.0


@dataclass(frozen=True)
class Spend:
    """What a run had spent, over all its processes, when ``iteration`` finished: ``cpu_s``
    CPU-seconds and ``wall_s`` wall seconds (cumulative, as ``budget.json`` records them).

    matches_cpu_s, matches_wall_s: what this iteration's anchor matches alone cost (not
    cumulative; the random player's when it comes with them). They come every
    ``evaluation.anchor_every`` iterations and in a run's last, so they are predicted apart
    from the rest, which changes slowly (`predicted_cost`).
    share: the share of ``selfplay.games`` the iteration played (shrunk or stretched to end a
    budget, `next_iteration`): the rest of its cost counts as this share of an iteration's.
    """

    iteration: int
    cpu_s: float
    wall_s: float
    matches_cpu_s: float = 0.0
    matches_wall_s: float = 0.0
    share: float = 1.0


@dataclass(frozen=True)
class RunState:
    """What is known when iteration ``iteration`` is about to start: plain numbers
    (`next_iteration`).

    asked: the iterations asked for (None: as many as the budget pays for).
    default: the run's count without a budget (``pipeline.iterations``), the estimate before
        any iteration of a budgeted run finished.
    core_hours, hours: the budget's CPU and wall limits (None: none).
    cpu_s, wall_s: what the run has spent so far. spent: each finished iteration's `Spend`,
        oldest first. started: the iteration began before (its plan is written): it runs to its
        end, spent or not, so that a run stops only at a clean iteration boundary.
    trained: the run's global steps so far; last_steps: the steps the previous iteration
        trained (None: none has).
    overshoot: ``pipeline.budget_overshoot``: a new iteration predicted to end more than this
        fraction past the budget does not start (None: only a spent budget stops one).
    games, shrink: ``selfplay.games`` and ``pipeline.budget_shrink``: such an iteration plays
        the games that fit in what is left of the budget instead, when they are at least
        ``shrink`` of ``games`` (None: it never shrinks).
    stretch: ``pipeline.budget_stretch``: the iteration planned as the run's last plays the
        games that fit in what is left of the budget, up to this share more than ``games``, when
        what it would leave could not hold an iteration of its own (``shrink`` of one); when it
        could, this one is not the last (`_stretched`). None: the last plays ``games``.
    fixed_cpu_s, fixed_wall_s: what the last finished iteration spent outside self-play,
        training and its anchor matches, which a shrunk iteration still spends (the gate, the
        bookkeeping).
    anchor_every, anchor_skip: the iterations that play the anchor matches (`plays_anchors`:
        those divisible by ``anchor_every``, with ``anchor_skip`` unless the last planned is
        less than half of it ahead, and the last one): their cost, the most that recent ones cost
        (`Spend.matches_cpu_s`, `_matches_cost`), is added to those iterations' predicted cost
        and kept for the last one; 0 until an iteration that played them has finished. None:
        the run plays none.
    """

    iteration: int
    asked: int | None
    default: int
    core_hours: float | None = None
    hours: float | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    spent: tuple[Spend, ...] = ()
    started: bool = False
    trained: int = 0
    last_steps: int | None = None
    overshoot: float | None = None
    games: int | None = None
    shrink: float | None = None
    stretch: float | None = None
    fixed_cpu_s: float = 0.0
    fixed_wall_s: float = 0.0
    anchor_every: int | None = None
    anchor_skip: bool = False

    @classmethod
    def first(cls, iterations: int) -> RunState:
        """Before the first iteration of a run of ``iterations`` iterations, without a budget:
        how a training stage outside a run (``tabula train``) plans its schedule."""
        return cls(iteration=1, asked=iterations, default=iterations)


@dataclass(frozen=True)
class NextIteration:
    """Whether the next iteration runs, and for what run it is planned.

    go: False when the iterations asked for are done or the budget is spent (and the
        iteration has not begun).
    iterations: how many the run is planned for: those asked, or what the budget is expected
        to pay for, the fewer; the rate schedule anneals over them.
    lr_boundaries: the global steps where the rate drops in such a run.
    games: the self-play games of an iteration shrunk or stretched to end the run within its
        budget (`RunState.shrink`, `RunState.stretch`); None: ``selfplay.games``.
    """

    go: bool
    iterations: int
    lr_boundaries: tuple[int, ...]
    games: int | None = None


def next_iteration(training: TrainingConfig, state: RunState) -> NextIteration:
    """Stop or go for ``state.iteration``, the iterations the run is planned for and the rate
    schedule's drops: the one place an iteration's budget and schedule are worked out.

    Planned iterations: those done, plus what is left of the budget divided by the mean cost
    of the last `RECENT` finished ones, rounded up (with ``overshoot``: the whole iterations
    that fit in what is left of the budget and that fraction more; anchor matches spread over
    the iterations that play them, and those of the last kept aside), at least one more
    (``asked``, else ``default``, before any finished; the count asked without a budget); never
    more than asked. Schedule:
    ``training.lr_boundaries`` (``lr_schedule: steps``), or ``lr_fractions`` of the steps the
    planned run trains in all: ``iterations x training.steps``, or with steps sized to the data
    (``samples_per_row``) the steps trained so far plus as many as the last iteration trained
    (``training.steps`` before any) for each iteration left, so that the schedule is
    re-estimated as the games change length. An iteration that would end the run more than
    ``overshoot`` past its budget, with the anchor matches it plays (in turn, or as the last
    planned), does not start, or with ``shrink`` plays the games that fit (`_shrunk_games`);
    with ``stretch`` the last planned one plays the games that fit when they are more
    (`_stretched`).
    """
    planned = _planned_iterations(state)
    if state.asked is not None:
        planned = min(planned, state.asked)
    done = state.asked is not None and state.iteration > state.asked
    games = None if state.started else _shrunk_games(state, planned)
    if games is None and not state.started:
        planned, games = _stretched(state, planned)
    if games is not None:  # the last: its plan plays the anchors
        planned = state.iteration
    over = games is None and _would_overshoot(state, planned)
    spent = not state.started and (_spent_fraction(state) >= 1.0 or over)
    if training.samples_per_row is None:
        total = planned * training.steps
    else:
        last = training.steps if state.last_steps is None else state.last_steps
        total = state.trained + max(planned - state.iteration + 1, 1) * last
    return NextIteration(not (done or spent), planned, _boundaries(training, total), games)


def spent_fraction(
    core_hours: float | None, hours: float | None, cpu_s: float, wall_s: float
) -> float:
    """The larger of the CPU and wall fractions of a budget spent (0 without limits)."""
    parts = [0.0]
    if core_hours is not None:
        parts.append(cpu_s / (core_hours * HOUR))
    if hours is not None:
        parts.append(wall_s / (hours * HOUR))
    return max(parts)


def _spent_fraction(state: RunState) -> float:
    return spent_fraction(state.core_hours, state.hours, state.cpu_s, state.wall_s)


def predicted_cost(spent: Sequence[Spend], what: str) -> float:
    """The next iteration's cost in ``what`` ("cpu_s" or "wall_s") without anchor matches, from
    the run's cumulative records ``spent`` (oldest first): the last iteration's cost plus the
    mean change per iteration over the last `RECENT` (games lengthen and training grows with
    the window), at least 0; 0 before any iteration finished. Each iteration counts without its
    anchor matches (`Spend.matches_cpu_s`, predicted apart: `_matches_cost`), and the run's
    first only while it is the only one (`_settled`)."""
    points = _steady_points(spent, what)
    costs = [b - a for (_, a), (_, b) in pairwise(points)][-RECENT:]
    if not costs:
        return 0.0
    trend = (costs[-1] - costs[0]) / (len(costs) - 1) if len(costs) > 1 else 0.0
    return max(0.0, costs[-1] + trend)


def _finished(state: RunState) -> list[Spend]:
    """The records of the iterations finished before ``state.iteration``."""
    return [s for s in state.spent if s.iteration < state.iteration]


def _matches_cost(state: RunState, what: str) -> float:
    """What an iteration's anchor matches are expected to cost in ``what``: the most that
    those of the last ``anchor_every`` + `RECENT` finished iterations did (the matches
    lengthen as the network learns); 0 when the run plays none or none has yet."""
    if state.anchor_every is None:
        return 0.0
    recent = _finished(state)[-(state.anchor_every + RECENT) :]
    return max((float(getattr(s, f"matches_{what}")) for s in recent), default=0.0)


def _next_cost(state: RunState, what: str, planned: int) -> float:
    """The next iteration's predicted cost in ``what``: `predicted_cost`, and its anchor
    matches when it plays them in a run planned for ``planned`` iterations (`plays_anchors`)."""
    done = _finished(state)
    every = state.anchor_every
    anchored = every is not None and plays_anchors(
        state.iteration, every, state.anchor_skip, planned
    )
    return predicted_cost(done, what) + (_matches_cost(state, what) if anchored else 0.0)


def _would_overshoot(state: RunState, planned: int) -> bool:
    """The next iteration of a run planned for ``planned`` iterations, at its predicted cost,
    ends past the budget by more than ``state.overshoot`` (never without one, or before any
    iteration finished)."""
    done = _finished(state)
    if state.overshoot is None or not done:
        return False
    after = spent_fraction(
        state.core_hours,
        state.hours,
        state.cpu_s + _next_cost(state, "cpu_s", planned),
        state.wall_s + _next_cost(state, "wall_s", planned),
    )
    return after > 1.0 + state.overshoot


def _fitting_share(state: RunState, after_next: bool = False) -> float:
    """The share of the next iteration's self-play and training that fits in what is left of
    the budget once its fixed cost (the last iteration's, `RunState.fixed_cpu_s`) and its anchor
    matches are paid (a shrunk iteration is the run's last, which plays them), at the predicted
    cost of the whole iteration; the tighter of the CPU and wall limits (inf without a limit or
    a finished iteration). ``after_next``: the share of the iteration after the next one
    whole, at its predicted cost with its anchor matches in turn (`_next_cost`, in a run
    planned to end after the one measured)."""
    done = _finished(state)
    shares = [math.inf]
    for limit, used, what, fixed in (
        (state.core_hours, state.cpu_s, "cpu_s", state.fixed_cpu_s),
        (state.hours, state.wall_s, "wall_s", state.fixed_wall_s),
    ):
        scaled = (predicted_cost(done, what) if done else 0.0) - fixed
        paid = fixed + _matches_cost(state, what)
        if after_next:
            paid += _next_cost(state, what, state.iteration + 1)
        if limit is not None and scaled > 0:
            shares.append(max(0.0, limit * HOUR - used - paid) / scaled)
    return min(shares)


def _shrunk_games(state: RunState, planned: int) -> int | None:
    """The games of a next iteration (of a run planned for ``planned`` iterations) that would
    end past the budget by more than the overshoot, cut to the share of it that fits in the
    budget with the anchor matches of a run's last (`_fitting_share`), when that is at least
    ``state.shrink`` of ``state.games`` (with ``state.stretch``, any games at all while
    stopping would leave more than the overshoot of the budget unspent: the iteration before
    may have been planned not to be the last, `_stretched`, so that this one plays the last's
    anchor matches); None: the iteration runs whole, or not at all."""
    if state.shrink is None or state.games is None or not _would_overshoot(state, planned):
        return None
    share = _fitting_share(state)
    least = 0.0 if state.stretch is not None and _owed(state) else state.shrink
    if not math.isfinite(share) or share <= 0.0 or share < least:
        return None  # (inf: nothing left to scale, as after a shrunk one: the run stops)
    return max(1, math.floor(min(share, 1.0) * state.games))


def _owed(state: RunState) -> bool:
    """Stopping now would leave more than the overshoot of the budget unspent, or the run's
    final network without the anchor matches a run's last plays (the last finished iteration
    played none, where recent ones cost something)."""
    unspent = 1.0 - _spent_fraction(state) > (state.overshoot or 0.0)
    done = _finished(state)
    unrated = (
        bool(done)
        and done[-1].matches_cpu_s == 0.0
        and done[-1].matches_wall_s == 0.0
        and (_matches_cost(state, "cpu_s") > 0.0 or _matches_cost(state, "wall_s") > 0.0)
    )
    return unspent or unrated


def _stretched(state: RunState, planned: int) -> tuple[int, int | None]:
    """The iterations the run is planned for and the games of the next one, when that one is
    the last planned by the budget (not by ``asked``) and fits whole with room to spare
    (`_fitting_share` > 1, the anchor matches of a run's last paid): when at least ``shrink`` of
    an iteration would fit after it whole (its own anchor matches in turn and the bookkeeping of
    both paid), it is not the last, so that a shrunk one after it plays the last's anchor
    matches once; else it plays the games that fit, at most ``stretch`` more than ``games``, so
    that the run ends near its budget rather than up to a fraction of an iteration and a last's
    anchor matches short of it. (planned, None) otherwise: the iteration plays ``games``."""
    last = planned == state.iteration and (state.asked is None or state.asked > planned)
    if state.stretch is None or state.overshoot is None or state.games is None:
        return planned, None
    if not last or not _finished(state) or _would_overshoot(state, planned):
        return planned, None
    share = _fitting_share(state)
    if not math.isfinite(share) or share <= 1.0:
        return planned, None
    if state.shrink is not None and _fitting_share(state, after_next=True) >= state.shrink:
        return planned + 1, None
    return planned, math.floor(min(share, 1.0 + state.stretch) * state.games)


def _planned_iterations(state: RunState) -> int:
    prior, done = state.asked or state.default, state.iteration - 1
    if state.core_hours is None and state.hours is None:
        return prior
    spent = [s for s in state.spent if s.iteration <= done]
    if not spent:
        return max(prior, done + 1)
    # With an overshoot the run stops before the iteration that would pass the budget by more
    # (`_would_overshoot`), so it plans the whole iterations that fit in the budget and that
    # much more (an iteration shrunk to fit after them is planned when it starts, as the last:
    # `next_iteration`); without, it runs the one that crosses the budget too. The anchor
    # matches of the last are kept aside, and those in turn spread over the iterations.
    # With ``stretch``, the last planned is also one that starts before the budget is spent
    # (with an overshoot that holds a whole iteration, the one after would never start).
    last, left, room = spent[-1], [math.inf], 1.0 + (state.overshoot or 0.0)
    starts = [math.inf]
    for limit, what in ((state.core_hours, "cpu_s"), (state.hours, "wall_s")):
        if limit is not None:
            matches = _matches_cost(state, what)
            cost = _mean_cost(spent, what) + matches / (state.anchor_every or 1)
            left.append((room * limit * HOUR - getattr(last, what) - matches) / cost)
            starts.append(math.ceil((limit * HOUR - getattr(last, what)) / cost))
    whole = math.ceil if state.overshoot is None else math.floor
    count = whole(min(left))
    if state.stretch is not None and state.overshoot is not None:
        count = min(count, min(starts))
    return done + max(1, count)


def _steady_points(spent: Sequence[Spend], what: str) -> list[tuple[int, float]]:
    """(iteration, cumulative cost in ``what`` without anchor matches) of each record of
    ``spent``, after (0, 0), each iteration after the first counted as a whole one (its cost
    over `Spend.share`), the run's first iteration left out once another finished
    (`_settled`)."""
    points, total, before = [(0, 0.0)], 0.0, 0.0
    for k, s in enumerate(spent):
        cost = float(getattr(s, what)) - before - float(getattr(s, f"matches_{what}"))
        before = float(getattr(s, what))
        total += cost / s.share if k and s.share > 0 else cost
        points.append((s.iteration, total))
    return _settled(spent, points)


def _settled(spent: Sequence[Spend], items: list) -> list:
    """``items`` (one per record of ``spent``, oldest first, or the points before and after
    them) without the run's first iteration's once another has finished: it also paid for the
    run's start (the temporary Prefect server, the initial network, and on a cold numba cache
    the compilation of the search: 418 CPU-s against about 130 after it, measured), which would
    pull the trend of the next ones down and their mean up."""
    first = len(spent) > 1 and spent[0].iteration == 1
    return items[1:] if first else items


def _mean_cost(spent: list[Spend], what: str) -> float:
    """Mean cost of the last `RECENT` iterations in ``spent`` (cumulative records) without
    their anchor matches (`_steady_points`)."""
    points = _steady_points(spent, what)
    (i0, v0), (i1, v1) = points[max(0, len(points) - 1 - RECENT)], points[-1]
    return max((v1 - v0) / max(1, i1 - i0), 1e-9)


def _boundaries(training: TrainingConfig, total: int) -> tuple[int, ...]:
    """The global steps where the rate drops in a run of ``total`` steps."""
    if training.lr_schedule == "steps":
        return tuple(training.lr_boundaries)
    out: list[int] = []
    for f in training.lr_fractions:  # rounded, kept >= 1 and strictly increasing
        out.append(max(round(f * total), out[-1] + 1 if out else 1))
    return tuple(out)


def torch_threads(processes: int = 1, cores: int | None = None) -> int:
    """torch's intra-op threads for each of ``processes`` stages sharing ``cores`` (default:
    this machine's; self-play workers in one process, training alone): one per core, at least
    one. Training records its count, since it changes float sums."""
    return max(1, (cores or os.cpu_count() or 1) // processes)
