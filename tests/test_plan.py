"""Iteration planning (`tabula.plan`): the training window and the seeds, pure."""

from __future__ import annotations

import pytest

from tabula.config import load_config
from tabula.plan import (
    RunState,
    derive_seed,
    next_iteration,
    plan_iteration,
    sized_steps,
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


@pytest.mark.parametrize(
    ("rows", "samples", "batch", "expected"),
    [
        (1000, 4.0, 256, 16),  # 4,000 samples: 15.6 batches, rounded up
        (1024, 4.0, 256, 16),  # exactly 16
        (10, 0.5, 256, 1),  # never fewer than one step
        (0, 4.0, 256, 1),
    ],
)
def test_steps_sized_to_the_rows_draw_each_about_samples_per_row_times(
    rows, samples, batch, expected
):
    assert sized_steps(rows, samples, batch) == expected


def _boundaries(cfg, iteration: int, trained: int, last: int | None) -> tuple[int, ...]:
    """The schedule of ``iteration`` of a run asked for 5, no budget, after ``trained`` steps,
    ``last`` of them in the previous iteration."""
    state = RunState(iteration, asked=5, default=5, trained=trained, last_steps=last)
    return next_iteration(cfg.training, state).lr_boundaries


def test_a_run_sized_to_its_data_plans_its_schedule_on_the_steps_it_trains():
    fractions = (0.8, 0.92)  # the default lr_fractions, of the steps planned in all
    fixed = load_config(None, ["training.steps=100", "training.samples_per_row=null"])
    assert fixed.training.lr_fractions == list(fractions)
    planned = [round(f * 500) for f in fractions]  # iterations x steps, whatever ran
    assert _boundaries(fixed, 3, 250, 40) == tuple(planned)
    sized = load_config(None, ["training.steps=100", "training.samples_per_row=4.0"])
    assert _boundaries(sized, 1, 0, None) == tuple(planned)  # the estimate before any trained
    # iterations 3, 4 and 5 left: 250 + 3 x 40 = 370 steps, of which 0.8 and 0.92
    assert _boundaries(sized, 3, 250, 40) == (296, 340)


def test_the_anchors_play_in_turn_and_in_the_last_unless_it_is_near() -> None:
    from tabula.plan import plays_anchors

    # every sixth: the last planned always, one in turn unless the last is less than 3 ahead
    assert plays_anchors(26, 6, True, planned=26) and plays_anchors(7, 6, True, planned=7)
    assert plays_anchors(18, 6, True, planned=26) and not plays_anchors(19, 6, True, planned=26)
    assert not plays_anchors(24, 6, True, planned=26) and not plays_anchors(24, 6, True, planned=25)
    assert plays_anchors(24, 6, True, planned=27)  # three ahead: half of six, not less
    assert plays_anchors(24, 6, False, planned=25)  # not skipped: every one in turn
    assert plays_anchors(24, 6, True, planned=None)  # a plan written before it recorded the count
    assert all(plays_anchors(i, 1, True, planned=5) for i in range(1, 6))  # every one: never near
