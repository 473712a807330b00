"""Iteration planning (`tabula.plan`): the training window and the seeds, pure."""

from __future__ import annotations

import pytest

from tabula.config import load_config
from tabula.plan import (
    derive_seed,
    plan_iteration,
    window_iterations,
    with_v_resign,
    worker_games,
)


@pytest.mark.parametrize(
    ("i", "per_iteration", "games", "most", "expected"),
    [
        (1, 4, 100, None, [1]),  # never iteration 0: it plays no games
        (5, 4, 100, None, [1, 2, 3, 4, 5]),
        (5, 4, 100, 2, [4, 5]),  # at most window_iterations
        (5, 4, 8, None, [4, 5]),  # enough games: stop
        (5, 4, 9, None, [3, 4, 5]),  # one more iteration to reach window_games
        (5, 10, 1, None, [5]),
    ],
)
def test_window_is_the_newest_iterations_until_enough_games(
    i, per_iteration, games, most, expected
):
    assert window_iterations(i, per_iteration, games, most) == expected


def test_plan_names_directories_and_derives_seeds_from_the_run_seed():
    cfg = load_config(None, ["selfplay.games=4", "training.window_games=8", "pipeline.seed=7"])
    plan = plan_iteration(cfg, 3, 1, lambda j: f"data/r/iter-{j:04d}/selfplay")
    assert plan.iteration == 3 and plan.best == 1 and plan.parent == 2
    assert plan.window == ("data/r/iter-0002/selfplay", "data/r/iter-0003/selfplay")
    assert (plan.selfplay_seed, plan.train_seed, plan.gate_seed) == tuple(
        derive_seed(7, 3, k) for k in range(3)
    )
    assert plan == plan_iteration(cfg, 3, 1, lambda j: f"data/r/iter-{j:04d}/selfplay")


def test_derived_seeds_are_32_bit_and_distinct_per_key():
    seeds = {derive_seed(2017, i, k) for i in range(20) for k in range(3)}
    assert len(seeds) == 60 and all(0 <= s < 2**32 for s in seeds)
    assert derive_seed(2017, 1, 0) == 221537779  # runs resume and reproduce: never changes


@pytest.mark.parametrize(("total", "workers"), [(192, 2), (7, 3), (2, 4), (16, 16)])
def test_games_are_shared_out_to_the_last_one(total: int, workers: int):
    games = worker_games(total, workers)
    assert len(games) == workers and sum(games) == total
    assert max(games) - min(games) <= 1 and games == sorted(games, reverse=True)


def test_a_calibrated_threshold_replaces_the_configured_one_unless_resignation_is_off():
    cfg = load_config(None, ["selfplay.v_resign=-0.9"])
    assert with_v_resign(cfg, -0.8).selfplay.v_resign == -0.8
    assert with_v_resign(cfg, None) is cfg
    off = load_config(None)  # the quick start never resigns
    assert with_v_resign(off, -0.8).selfplay.v_resign is None
