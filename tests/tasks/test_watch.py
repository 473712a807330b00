"""Stage progress reports reach the installed display, and nothing when none is installed."""

from __future__ import annotations

from tasks.run.records import Stage
from tasks.watch import counting, report, showing


def test_reports_reach_the_display_only_inside_showing() -> None:
    seen: list[tuple[str, int, int]] = []
    report("before", 1, 2)
    with showing(lambda *a: seen.append(a)):
        report("iter 1 training (steps)", 3, 10)
    report("after", 2, 2)
    assert seen == [("iter 1 training (steps)", 3, 10)]


def test_counting_reports_one_more_per_event() -> None:
    seen: list[tuple[str, int, int]] = []
    with showing(lambda *a: seen.append(a)):
        one = counting(Stage.EVALUATE, "iter 2 gate (games)", 3)
        for record in ("a", "b", "c"):
            one(record)
    assert seen == [("iter 2 gate (games)", k, 3) for k in (1, 2, 3)]
