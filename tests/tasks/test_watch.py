"""Stage progress reports reach the installed display, and nothing when none is installed;
the line each finished stage gets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tasks.run.records import Stage, Trained, TrainRecord, TrainResult
from tasks.watch import counting, report, showing, stage_line


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


def test_the_training_line_gives_the_held_out_loss_when_games_were_held_out() -> None:
    result = TrainResult(Path("m.pt"), Path("t.ckpt"), 40, 20, 0, 2.5, 0.5, 1.9, 0.1, "ab",
                         100.0, 480, 8)  # fmt: skip
    record = TrainRecord(Trained(result, seconds=3.0, threads=1), hashes={}, window={})
    assert stage_line(record) == (
        "training: 20 steps to global step 40, loss 2.500 (policy 1.900, value 0.500) in 3 s"
    )
    held = dataclasses.replace(result, val_loss=2.75)
    line = stage_line(dataclasses.replace(record, trained=Trained(held, 3.0, 1)))
    assert line.endswith("value 0.500), on held-out games 2.750 in 3 s")
