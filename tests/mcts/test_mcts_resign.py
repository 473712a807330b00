"""Resignation rule and threshold calibration on synthetic games with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tabula.resign import Calibration, ResignTrace, calibrate, false_positive_rate, should_resign


def trace(low_black: float, low_white: float, winner: int) -> ResignTrace:
    return ResignTrace(low_black, low_white, winner)


def test_rule_needs_both_values_below() -> None:
    assert should_resign(-0.95, -0.92, -0.9)
    assert not should_resign(-0.95, -0.85, -0.9)
    assert not should_resign(-0.85, -0.95, -0.9)
    assert not should_resign(-0.99, -0.99, None)


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
