"""`bench.scale`'s pipeline measure: from the end of the first iteration to the end of the last,
what runs between the stages' laps included."""

from __future__ import annotations

import pytest

from bench.runs import iteration_usage
from tasks.run.records import Spent

STAGES = ("selfplay", "train", "close")  # (close: CPU only, no wall time of its own)


def _spent(i: int, cpu: float, wall: float, by_stage: tuple, walls: tuple) -> Spent:
    stages = dict(zip(STAGES, by_stage, strict=False))
    return Spent(i, cpu, wall, stages, dict(zip(STAGES, walls, strict=False)), cores=2)


#: A run's budget.json: (iteration, CPU-s, wall s, then CPU-s and wall s by STAGES), totals so far.
RUN = [
    (1, 100.0, 60.0, (90.0,), (50.0,)),  # pays the start
    (2, 150.0, 90.0, (30.0, 17.0, 1.0), (16.0, 10.0)),
    (3, 205.0, 120.0, (31.0, 18.0, 1.0), (17.0, 10.0)),
]


def test_the_iterations_after_the_first_and_what_lies_between_their_stages():
    wall, cpu, stage_wall, stage_cpu = iteration_usage([_spent(*row) for row in RUN])
    assert (wall, cpu) == (60.0, 105.0)  # the budget's totals, not the laps' sums
    assert stage_wall == {"selfplay": 33.0, "train": 20.0, "between": 7.0}
    # the CPU the laps leave out of the stages with wall time: what ran between them, and close
    assert stage_cpu == pytest.approx({"selfplay": 61.0, "train": 35.0, "between": 9.0})


def test_one_iteration_is_the_whole_run():
    wall, cpu, stage_wall, _ = iteration_usage([_spent(*RUN[0])])
    assert (wall, cpu) == (60.0, 100.0) and stage_wall["between"] == 10.0


def test_the_cluster_measure_marks_each_iteration_as_budget_json_records_it(tmp_path):
    import time

    from bench.scale_cluster import _Marks
    from tasks.run.layout import RunLayout
    from tasks.run.markers import write_record
    from tasks.run.records import Budget

    layout = RunLayout(tmp_path, "data", "r")
    layout.budget.parent.mkdir(parents=True)
    marks = _Marks(layout)
    marks.start()
    try:
        for n in (1, 2):
            write_record(layout.budget, Budget(None, None, tuple(_spent(*r) for r in RUN[:n])))
            deadline = time.monotonic() + 10
            while n not in marks.at and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        marks.stop()
    assert sorted(marks.at) == [1, 2]
    (t1, s1), (t2, s2) = marks.at[1], marks.at[2]
    assert t2 > t1 and s2.busy_s >= s1.busy_s > 0
