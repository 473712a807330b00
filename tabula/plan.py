"""What an iteration is made from: its champion, parent checkpoint, training window and seeds,
and the inputs of its stages as typed specs (one per self-play worker, one for training).

Pure: the pipeline's plan task (`tasks.plan.plan`) reads the champion, calls `plan_iteration`
and `stage_specs`, and writes the plan once, so that a promotion later in the run never changes
what an earlier iteration was made from. The flow runs the specs; reproduction replays the same
specs, never a second derivation of them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tabula.config import Config


@dataclass(frozen=True)
class WorkerSpec:
    """The inputs of one self-play worker (`tasks.selfplay.selfplay_worker`).

    iteration: the iteration it plays for (part of its games' seed sequence).
    worker: w, in [0, selfplay.workers).
    champion: project-relative path of the checkpoint that plays every move of its games.
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


@dataclass(frozen=True)
class IterationPlan:
    """Everything an iteration's stages depend on, fixed before the iteration starts.

    best: iteration whose model is the champion that plays self-play and the gate.
    parent: the checkpoint training continues from (``iter-(i-1)/model``: the latest network,
    whatever the gate decided, as in the paper).
    window: self-play directories (project-relative) training samples from, oldest first.
    selfplay_seed, train_seed, gate_seed: 32-bit seeds of the iteration's stages.
    workers, train: the stages' inputs (`stage_specs`); empty and None in plans written before
    they were recorded, whose specs `tasks.plan.specs_of` derives as those runs did.
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
) -> IterationPlan:
    """``plan`` with its stages' inputs: one `WorkerSpec` per self-play worker (``champion``
    plays, worker w writes ``worker_folder(w)``, all with threshold ``v_resign`` as
    `effective_v_resign` gives it) and the `TrainSpec` (the rate schedule's
    ``lr_boundaries``, precision ``bf16``)."""
    games = worker_games(cfg.selfplay.games, cfg.selfplay.workers)
    workers = tuple(
        WorkerSpec(
            iteration=plan.iteration,
            worker=w,
            champion=champion,
            games=n,
            seed=derive_seed(plan.selfplay_seed, w),
            folder=worker_folder(w),
            v_resign=v_resign,
        )
        for w, n in enumerate(games)
    )
    train = TrainSpec(
        iteration=plan.iteration,
        window=plan.window,
        parent=plan.parent,
        seed=plan.train_seed,
        steps=cfg.training.steps,
        lr_boundaries=tuple(lr_boundaries),
        bf16=bf16,
        samples_per_row=cfg.training.samples_per_row,
        holdout_games=cfg.training.holdout_games,
    )
    return replace(plan, workers=workers, train=train)


def sized_steps(rows: int, samples_per_row: float, batch_size: int) -> int:
    """Optimizer steps that draw each of ``rows`` new rows about ``samples_per_row`` times
    (KataGo, Wu 2019: about 4): ceil(rows x samples_per_row / batch_size), at least 1. Over
    the iterations a row stays in the window, uniform sampling draws it that often on average
    when every iteration adds about as many rows."""
    return max(1, math.ceil(rows * samples_per_row / batch_size))


def planned_steps(
    cfg: Config, iteration: int, iterations: int, trained: int, last: int | None
) -> int:
    """The steps a run planned for ``iterations`` iterations is expected to train in all, when
    iteration ``iteration`` starts with ``trained`` global steps done and the previous
    iteration trained ``last`` (None: none has). Fixed steps: ``iterations x
    training.steps``; sized to the data (``training.samples_per_row``), each iteration left
    is expected to train as many as the last one did (``training.steps`` before any has), so
    the schedule is re-estimated as the games change length."""
    if cfg.training.samples_per_row is None:
        return iterations * cfg.training.steps
    left = max(iterations - iteration + 1, 1)
    return trained + left * (cfg.training.steps if last is None else last)


def torch_threads(processes: int = 1, cores: int | None = None) -> int:
    """torch's intra-op threads for each of ``processes`` stages sharing ``cores`` (default:
    this machine's; self-play workers in one process, training alone): one per core, at least
    one. Training records its count, since it changes float sums."""
    return max(1, (cores or os.cpu_count() or 1) // processes)
