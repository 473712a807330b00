"""The strength benchmark's extrapolation of Elo against compute (issue 15's moonshot)."""

from __future__ import annotations

import math

import pytest

from bench.strength_report import extrapolate, extrapolation_line
from tabula.ladder import GNUGO_ELO_9X9
from tasks.cputime import CORE_HOUR

ANCHORS = {f"gnugo-l{level}": elo for level, elo in GNUGO_ELO_9X9.items()}


def _point(core_hours: float, elo: float, half_width: float, win_rate: float) -> dict:
    return {
        "cpu_s": core_hours * CORE_HOUR,
        "elo": {"elo": elo, "low": elo - half_width, "high": elo + half_width},
        "matches": [{"level": 1, "win_rate": win_rate}],
    }


def test_a_line_through_two_measured_points_and_none_through_prior_only_ones():
    row = {
        "checkpoints": {
            "0": _point(0.0, -900.0, 500.0, 0.0),  # untrained: no CPU spent, no line point
            "5": _point(0.5, -850.0, 500.0, 0.0),  # lost every game: its Elo is the prior's
            "10": _point(1.0, -400.0, 98.0, 0.05),
            "40": _point(4.0, -100.0, 98.0, 0.4),
        }
    }
    e = extrapolate(row, ANCHORS, core_hours=16.0)
    assert e["fitted"] == 2
    assert e["target_elo"] == pytest.approx(114.0 + 400.0 * math.log10(9.0))
    assert e["elo_per_doubling"] == pytest.approx(150.0)  # 300 Elo over two doublings
    assert e["elo"] == pytest.approx(200.0)  # two doublings more
    # Each point's sd is 50 (95% half-width 98): the slope's sd is 50 * sqrt(2) / 2.
    low, high = e["elo_per_doubling_interval"]
    assert high - low == pytest.approx(2 * 1.96 * 50.0 * math.sqrt(2) / 2, rel=1e-6)
    assert e["interval"][0] < 200.0 < e["interval"][1]
    assert e["core_hours_to_target"] == pytest.approx(2.0 ** ((e["target_elo"] + 400.0) / 150.0))
    assert "+150 Elo per doubling" in extrapolation_line("laptop", e)


def test_a_tighter_point_weighs_more():
    row = {
        "checkpoints": {
            "1": _point(1.0, -400.0, 20.0, 0.05),
            "2": _point(2.0, -100.0, 400.0, 0.5),
            "4": _point(4.0, -300.0, 20.0, 0.2),
        }
    }
    e = extrapolate(row, ANCHORS)
    assert e["fitted"] == 3
    assert e["elo_per_doubling"] == pytest.approx(50.0, abs=2.0)  # the two tight points' line


def test_no_line_from_fewer_than_two_measured_points():
    row = {"checkpoints": {"10": _point(1.0, -500.0, 150.0, 0.05), "0": _point(0, -900, 500, 0)}}
    e = extrapolate(row, ANCHORS)
    assert e["fitted"] == 1 and "elo" not in e
    assert "no line to extend yet" in extrapolation_line("laptop", e)
