"""`bench.scale`'s pipeline measure: from the end of the first iteration to the end of the last,
what runs between the stages' laps included."""

from __future__ import annotations

import pytest

from bench.scale import _usage
from tasks.run.records import Spent


def _spent(i: int, cpu: float, wall: float, stages: dict, walls: dict) -> Spent:
    return Spent(i, cpu, wall, stages=stages, stage_wall_s=walls, cores=2)


def test_the_iterations_after_the_first_and_what_lies_between_their_stages():
    spent = [
        _spent(1, 100.0, 60.0, {"selfplay": 90.0}, {"selfplay": 50.0}),  # pays the start
        _spent(
            2,
            150.0,
            90.0,
            {"selfplay": 30.0, "train": 17.0, "close": 1.0},
            {"selfplay": 16.0, "train": 10.0},
        ),  # fmt: skip
        _spent(
            3,
            205.0,
            120.0,
            {"selfplay": 31.0, "train": 18.0, "close": 1.0},
            {"selfplay": 17.0, "train": 10.0},
        ),  # fmt: skip
    ]
    wall, cpu, stage_wall, stage_cpu = _usage(spent)
    assert (wall, cpu) == (60.0, 105.0)  # the budget's totals, not the laps' sums
    assert stage_wall == {"selfplay": 33.0, "train": 20.0, "between": 7.0}
    # the CPU the laps leave out of the stages with wall time: what ran between them, and close
    assert stage_cpu == pytest.approx({"selfplay": 61.0, "train": 35.0, "between": 9.0})


def test_one_iteration_is_the_whole_run():
    wall, cpu, stage_wall, _ = _usage([_spent(1, 100.0, 60.0, {"selfplay": 90.0},
                                              {"selfplay": 50.0})])  # fmt: skip
    assert (wall, cpu) == (60.0, 100.0) and stage_wall["between"] == 10.0
