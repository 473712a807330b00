"""The strength benchmark's extrapolation of Elo against compute (the moonshot of
docs/strength.md)."""

from __future__ import annotations

import math

import pytest

from bench.strength_report import extrapolate, extrapolation_line, pace_line
from tabula.ladder import GNUGO_ELO_9X9
from tasks.run.cputime import CORE_HOUR

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
    # At log2(16) = 4 the line's variance is 50^2 (1 - 2 * 4 / 2 + 4^2 / 2) = 12,500.
    assert e["interval"] == pytest.approx([200.0 - 1.96 * 12500**0.5, 200.0 + 1.96 * 12500**0.5])
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


def test_a_champion_that_wins_one_level_and_loses_the_next_counts():
    champion = _point(4.0, 80.0, 98.0, 1.0)
    champion["matches"].append({"level": 5, "win_rate": 0.0})
    row = {"checkpoints": {"10": _point(1.0, -400.0, 98.0, 0.05), "40": champion}}
    assert extrapolate(row, ANCHORS)["fitted"] == 2


def test_scatter_beyond_the_errors_widens_the_interval():
    on_line = {str(h): _point(h, 100.0 * math.log2(h), 98.0, 0.3) for h in (1, 2, 4)}
    scattered = {**on_line, "2": _point(2.0, 300.0, 98.0, 0.3)}
    tight, wide = (extrapolate({"checkpoints": c}, ANCHORS) for c in (on_line, scattered))
    width = [e["elo_per_doubling_interval"][1] - e["elo_per_doubling_interval"][0]
             for e in (tight, wide)]  # fmt: skip
    assert tight["elo_per_doubling"] == pytest.approx(100.0)
    assert width[1] > 2 * width[0]


@pytest.mark.parametrize("gain", [-50.0, 0.0, 0.01])
def test_no_crossing_without_a_real_gain(gain: float):
    row = {"checkpoints": {"1": _point(1.0, -400.0, 98.0, 0.05),
                           "4": _point(4.0, -400.0 + 2 * gain, 98.0, 0.1)}}  # fmt: skip
    e = extrapolate(row, ANCHORS)
    assert e["elo_per_doubling"] == pytest.approx(gain, abs=1e-6)
    assert e["core_hours_to_target"] is None
    assert extrapolation_line("x", e).endswith("its interval includes no gain at all")


def _games(store, match_id: str, player: str, wins: int, games: int) -> None:
    """``games`` games of ``player`` against GnuGo level 1, colours alternating, ``wins`` won."""
    from tasks.run.results import append_results

    rows = []
    for k in range(games):
        black, white = (player, "gnugo-l1") if k % 2 == 0 else ("gnugo-l1", player)
        mine = 1 if black == player else -1
        winner = mine if k < wins else -mine
        rows.append({"match_id": match_id, "game": k, "black": black, "white": white,
                     "winner": winner, "reason": "score", "score": 5.0 * winner})  # fmt: skip
    append_results(store, rows)


def test_the_deeper_budget_is_rated_apart_on_the_same_scale(tmp_path):
    from bench.strength_report import DEEP_LADDER, add_elo, deep_table

    work = tmp_path / "a"
    _games(work / "ladder", "m-vs-gnugo-l1", "m", wins=10, games=100)
    row = {"config": "a", "champion": 3, "checkpoints": {"3": {"player": "m"}},
           "deep": {"simulations": 400, "player": "m", "matches": []}}  # fmt: skip
    alone = add_elo([row], [], tmp_path)["gnugo-l1"]
    shallow = row["checkpoints"]["3"]["elo"]["elo"]
    assert row["deep"]["elo"] is None  # no deep games yet: no deep rating
    _games(work / DEEP_LADDER, "m-vs-gnugo-l1", "m", wins=60, games=100)
    add_elo([row], [], tmp_path)
    assert row["checkpoints"]["3"]["elo"]["elo"] == pytest.approx(shallow)  # not mixed in
    assert alone == 0.0  # GnuGo level 1 is the scale's zero in both fits
    assert shallow < 0 < row["deep"]["elo"]["elo"]
    assert "400 simulations" in deep_table([row], "quick", 400).title


def test_a_run_that_slowed_is_named_and_a_steady_one_is_not() -> None:
    slowed = {"first_third": 8_864.0, "last_third": 5_693.0, "share": 0.6423, "slowed": True}
    line = pace_line("lf2spr2", slowed)
    assert line is not None and line.startswith("lf2spr2: ") and "64%" in line
    assert "5,693 against 8,864" in line
    assert pace_line("ladfast2", {**slowed, "share": 0.94, "slowed": False}) is None
    assert pace_line("short", None) is None
