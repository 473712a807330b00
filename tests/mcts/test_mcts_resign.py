"""Resignation rule and threshold calibration on synthetic games with known answers; the
vectorised rule that self-play applies (`resign_mask`) and its use in the game loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tabula.mcts import SearchParams
from tabula.resign import (
    Calibration,
    ResignTrace,
    calibrate,
    false_positive_rate,
    resign_mask,
    should_resign,
)
from tabula.selfplay import SelfPlayParams, play_games


def trace(low_black: float, low_white: float, winner: int) -> ResignTrace:
    return ResignTrace(low_black, low_white, winner)


def test_rule_needs_both_values_below() -> None:
    assert should_resign(-0.95, -0.92, -0.9)
    assert not should_resign(-0.95, -0.85, -0.9)
    assert not should_resign(-0.85, -0.95, -0.9)
    assert not should_resign(-0.99, -0.99, None)


def test_mask_resigns_only_below_the_threshold_on_both_values() -> None:
    v = -0.9
    root = np.array([-0.95, -0.95, -0.85, -0.9, -0.95, -0.91, -1.0])
    best = np.array([-0.92, -0.85, -0.95, -0.95, -0.9, -0.91, -1.0])
    expected = [True, False, False, False, False, True, True]  # -0.9 itself is not below
    off = np.zeros(len(root), dtype=bool)
    assert resign_mask(root, best, v, off).tolist() == expected
    assert resign_mask(root.astype(np.float32), best.astype(np.float32), v, off).tolist() == (
        expected
    )


def test_mask_never_resigns_a_resign_disabled_game_or_without_threshold() -> None:
    root = best = np.full(4, -0.99)
    disabled = np.array([True, False, True, False])
    assert resign_mask(root, best, -0.9, disabled).tolist() == [False, True, False, True]
    assert not resign_mask(root, best, None, disabled).any()
    assert not resign_mask(root, best, None, ~disabled).any()
    assert resign_mask(root[:0], best[:0], -0.9, disabled[:0]).shape == (0,)


@pytest.mark.parametrize("v_resign", [None, -1.0, -0.9, -0.5, 0.0, 0.3])
def test_mask_agrees_with_should_resign(v_resign: float | None) -> None:
    rng = np.random.default_rng(3)
    root = np.round(rng.uniform(-1, 1, 400), 1).astype(np.float32)  # many ties with v_resign
    best = np.round(rng.uniform(-1, 1, 400), 1).astype(np.float32)
    disabled = rng.random(400) < 0.2
    mask = resign_mask(root, best, v_resign, disabled)
    for i in range(400):
        rule = should_resign(float(root[i]), float(best[i]), v_resign) and not disabled[i]
        assert mask[i] == rule, (i, root[i], best[i])


def _black_is_lost(planes: np.ndarray, rng: np.random.Generator | None = None):
    """Uniform priors; value -0.99 for black to move, +0.99 for white: every root value and
    best child value of black is about -0.99, of white about +0.99."""
    B, M = planes.shape[0], planes.shape[2] * planes.shape[3]
    black = planes[:, 16, 0, 0] == 1
    return np.full((B, M + 1), 1 / (M + 1), np.float32), np.where(black, -0.99, 0.99)


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_selfplay_resigns_exactly_where_the_mask_says(fraction: float) -> None:
    params = SelfPlayParams(
        board_size=5, komi=0.5,
        search=SearchParams(algorithm="puct", simulations=8, dirichlet_alpha=0.3),
        temperature_moves=2, v_resign=-0.9, resign_disabled_fraction=fraction,
        concurrent_games=3, batch_size=16,
    )  # fmt: skip
    games = list(play_games(_black_is_lost, params, 6, np.random.default_rng(1)))
    assert len(games) == 6
    for g in games:
        if g.resign_disabled:  # plays on to the end, both values recorded below v_resign
            assert g.resigned == 0 and g.length > 0
            assert max(g.root_values[0], g.best_child_values[0]) < -0.9
        else:  # black resigns before its first move
            assert (g.resigned, g.winner, g.length, g.score) == (1, -1, 0, None)
    disabled = sum(g.resign_disabled for g in games)
    assert disabled == 6 * fraction if fraction in (0.0, 1.0) else 0 < disabled < 6


def test_trace_from_search_keeps_each_sides_lowest_max() -> None:
    t = ResignTrace.from_search(
        to_play=[1, -1, 1, -1, 1],
        root_values=[0.1, -0.2, -0.8, -0.5, -0.9],
        best_child_values=[0.0, -0.3, -0.6, -0.7, -0.95],
        winner=-1,
    )
    assert (t.min_black, t.min_white, t.winner) == (pytest.approx(-0.9), pytest.approx(-0.5), -1)
    assert t.lowest_non_loser == pytest.approx(-0.5)
    assert ResignTrace.from_dict(t.to_dict()) == t
    one_move = ResignTrace.from_search([1], [0.0], [0.0], 1)
    assert math.isinf(one_move.min_white)
    assert ResignTrace.from_dict(one_move.to_dict()) == one_move


def test_false_positives_are_games_a_non_loser_would_have_resigned() -> None:
    traces = [
        trace(-0.95, 0.2, winner=1),  # Black won after dipping to -0.95
        trace(-0.97, 0.1, winner=-1),  # Black dipped and lost: a correct resignation
        trace(-0.3, -0.93, winner=0),  # jigo: White would have resigned a draw
        trace(0.5, -0.2, winner=1),
    ]
    assert false_positive_rate(traces, -0.9) == pytest.approx(2 / 4)
    assert false_positive_rate(traces, -0.96) == pytest.approx(0 / 4)
    assert false_positive_rate(traces, -0.94) == pytest.approx(1 / 4)


def test_calibration_with_a_known_answer() -> None:
    # 100 games; the winner's lowest value is -0.99, -0.98, ..., 0.00 (one each). The loser
    # always went to -1. At most 5 % = 5 false positives: the threshold is the 6th lowest
    # winner value, -0.94 (games at exactly -0.94 do not resign: the rule is strict <).
    lows = np.round(-0.99 + 0.01 * np.arange(100), 2)
    traces = [trace(float(v), -1.0, winner=1) for v in lows[::-1]]
    v_next, rate = calibrate(traces, v_resign=-0.9, target=0.05)
    assert v_next == pytest.approx(-0.94)
    assert rate == pytest.approx(9 / len(traces))  # -0.99 .. -0.91 are below -0.9
    assert false_positive_rate(traces, v_next) <= 0.05
    assert false_positive_rate(traces, v_next + 0.011) > 0.05  # the highest such threshold


def test_threshold_rises_when_resigning_was_safe() -> None:
    traces = [trace(0.3, -1.0, winner=1) for _ in range(30)]
    result = calibrate(traces, v_resign=-0.9, target=0.05)
    assert result == Calibration(pytest.approx(0.3), 0.0)


def test_never_resign_qualifies_when_nothing_else_does() -> None:
    traces = [trace(-1.0, -1.0, winner=0) for _ in range(40)]
    assert calibrate(traces, -0.9).v_resign == -1.0
    assert false_positive_rate(traces, -1.0) == 0.0


def test_too_few_games_keep_the_threshold() -> None:
    traces = [trace(0.3, -1.0, winner=1) for _ in range(19)]
    assert calibrate(traces, -0.9, target=0.05) == (-0.9, 0.0)
    assert calibrate(traces, -0.9, target=0.05, min_games=10).v_resign == pytest.approx(0.3)


def test_no_traces_and_disabled_resignation() -> None:
    v, rate = calibrate([], -0.8)
    assert v == -0.8 and math.isnan(rate)
    v, rate = calibrate([trace(0.0, 0.0, 1)] * 30, None)
    assert v is None and math.isnan(rate)
    with pytest.raises(ValueError):
        calibrate([], -0.9, target=1.5)
