"""What an iteration is made from: its champion, parent checkpoint, training window and seeds.

Pure: the pipeline's task (`tasks.stages.plan`) reads the champion, calls `plan_iteration` and
writes the plan once, so that a promotion later in the run never changes what an earlier
iteration was made from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tabula.config import Config


@dataclass(frozen=True)
class IterationPlan:
    """Everything an iteration's stages depend on, fixed before the iteration starts.

    best: iteration whose model is the champion that plays self-play and the gate.
    parent: the checkpoint training continues from (``iter-(i-1)/model``: the latest network,
    whatever the gate decided, as in the paper).
    window: self-play directories (project-relative) training samples from, oldest first.
    selfplay_seed, train_seed, gate_seed: 32-bit seeds of the iteration's stages.
    """

    iteration: int
    best: int
    parent: int
    window: tuple[str, ...]
    selfplay_seed: int
    train_seed: int
    gate_seed: int


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
