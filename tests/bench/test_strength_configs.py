"""`bench.strength_configs`: every config the strength benchmark trains loads, and the named
screenings differ from the default in what their names say."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.strength_configs import CONFIGS
from tabula.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    entry = CONFIGS[name]
    return load_config(ROOT / entry.file, entry.overrides)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_config_loads(name: str) -> None:
    cfg = _load(name)
    assert cfg.evaluation.anchor_games == 0  # rated after the budget, never inside the run
    assert cfg.pipeline.iterations == 1000


def test_screenings_change_what_they_name() -> None:
    default = _load("default")
    assert _load("katago").training.lr_values == [0.01, 0.001, 0.0001]  # as its run was frozen
    assert _load("lr3").training.lr_values == default.training.lr_values == [0.03, 0.003, 0.0003]
    assert _load("lr10").training.lr_values == [0.1, 0.01, 0.001]
    assert _load("g192").selfplay.games == default.selfplay.games // 2
    assert (_load("reduced").selfplay.decided_threshold, default.selfplay.decided_threshold) == (
        0.9,
        None,
    )
    wide = _load("wide").network
    assert (
        (wide.blocks, wide.filters) == (6, 64) != (default.network.blocks, default.network.filters)
    )


def test_the_target_screenings_change_one_switch_each_at_an_equal_budget() -> None:
    default, baseline = _load("default"), _load("baseline")
    assert default.pipeline.budget_overshoot is None and baseline.pipeline.budget_overshoot == 0.03
    assert baseline.model_copy(update={"pipeline": default.pipeline}) == default
    assert _load("tau0").selfplay.move_choice == "opening"
    assert _load("ktemp").selfplay.move_choice == "decay"
    assert [_load(n).training.value_target_mix for n in ("z0", "mix25")] == [0.0, 0.25]
    assert _load("visitvalue").selfplay.root_value == "visits"
    reduced = _load("reduced01").selfplay
    assert (reduced.decided_threshold, reduced.decided_row_weight) == (0.9, 0.1)
    frequency = _load("reduced01f")
    assert frequency.selfplay == reduced and frequency.training.row_weights == "frequency"
    assert _load("reduced01").training.row_weights == "loss"
    ladders = _load("ladders")
    assert ladders.network.ladders and not baseline.network.ladders
    assert ladders.model_copy(update={"network": baseline.network}) == baseline
    gpool = _load("gpool")
    assert gpool.network.global_pooling and not baseline.network.global_pooling
    assert gpool.model_copy(update={"network": baseline.network}) == baseline
    spr8 = _load("spr8")
    assert (spr8.training.samples_per_row, baseline.training.samples_per_row) == (8.0, 4.0)
    assert spr8.model_copy(update={"training": baseline.training}) == baseline
    spr2 = _load("spr2")
    assert spr2.training.samples_per_row == 2.0
    assert spr2.model_copy(update={"training": baseline.training}) == baseline
    win5 = _load("win5")
    assert (win5.training.window_games, baseline.training.window_games) == (1920, 3840)
    assert win5.model_copy(update={"training": baseline.training}) == baseline
    win3 = _load("win3")  # against win5, the quick start's default in config format 11
    assert win3.training.window_games == 1152
    assert win3.model_copy(update={"training": win5.training}) == win5
    # (win3's window was the quick start's default in config formats 12 and 13)
    then = load_config(None).training.model_copy(update={"window_games": 1152})
    assert win3 == _load("baseline").model_copy(update={"training": then})
    fast2 = _load("fast2")
    assert (fast2.selfplay.fast_simulations, win5.selfplay.fast_simulations) == (2, None)
    assert fast2.model_copy(update={"selfplay": win5.selfplay}) == win5
    fresh = _load("fresh")
    assert fresh.training == spr2.training.model_copy(update={"window_games": 1920})
    assert fresh.model_copy(update={"training": baseline.training}) == baseline
    score = _load("score")
    assert (score.search.score_utility, baseline.search.score_utility) == (0.4, 0.0)
    assert score.model_copy(update={"search": baseline.search}) == baseline
    for name in ("full32", "surprise"):  # the ladder planes' screenings: ladders is their baseline
        assert _load(name).network == ladders.network
    full32 = _load("full32")
    assert (full32.search.simulations, full32.selfplay.fast_simulations) == (32, 4)
    assert full32.model_copy(update={"search": ladders.search, "selfplay": ladders.selfplay}) == (
        ladders
    )
    ladfast2 = _load("ladfast2")
    assert (ladfast2.network, ladfast2.selfplay.fast_simulations) == (ladders.network, 2)
    assert ladfast2.model_copy(update={"selfplay": ladders.selfplay}) == ladders
    lf2spr2 = _load("lf2spr2")
    assert lf2spr2.training == spr2.training
    assert lf2spr2.model_copy(update={"training": ladfast2.training}) == ladfast2
    lf2win5 = _load("lf2win5")
    assert lf2win5.training == _load("win5").training
    assert lf2win5.model_copy(update={"training": ladfast2.training}) == ladfast2
    lf2win3 = _load("lf2win3")
    assert lf2win3.training == _load("win3").training
    assert lf2win3.model_copy(update={"training": ladfast2.training}) == ladfast2
    deep32 = _load("deep32")
    assert deep32.network == baseline.network
    assert (deep32.search, deep32.selfplay) == (full32.search, full32.selfplay)
    assert deep32.model_copy(update={"search": baseline.search, "selfplay": baseline.selfplay}) == (
        baseline
    )
    surprise = _load("surprise")
    assert surprise.selfplay.policy_surprise_weight == 0.5
    assert surprise.training.row_weights == "frequency"
    changed = {"selfplay": ladders.selfplay, "training": ladders.training}
    assert surprise.model_copy(update=changed) == ladders
    for name in (
        "tau0",
        "ktemp",
        "z0",
        "mix25",
        "visitvalue",
        "reduced01",
        "reduced01f",
        "ladders",
        "gpool",
        "spr8",
        "spr2",
        "win5",
        "fresh",
        "score",
        "full32",
        "ladfast2",
        "lf2spr2",
        "lf2win5",
        "lf2win3",
        "deep32",
        "surprise",
    ):
        assert _load(name).pipeline.budget_overshoot == 0.03
        assert _load(name).pipeline.budget_shrink is None  # (frozen before it came)
        assert _load(name).pipeline.budget_stretch is None
