"""`bench.coldstart`: its medians, what compiling once and splitting the compile save, usage."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.coldstart import ROOT, summary


def _row(case: str, wall: float, cpu: float, compiled: int) -> dict:
    return {"case": case, "wall_s": wall, "cpu_s": cpu, "compiled": compiled, "positions": 9}


def test_the_summary_takes_each_case_s_median_and_the_saving():
    rows = [
        _row("each compiles", 90.0, 170.0, 2),
        _row("compile once", 70.0, 70.0, 1),
        _row("compile once", 72.0, 76.0, 1),
        _row("each compiles", 76.0, 140.0, 2),
        _row("compile split", 55.0, 80.0, 1),
        _row("warm cache", 11.0, 15.0, 0),
    ]
    s = summary(rows)
    assert s["each compiles"] == {"wall_s": 83.0, "cpu_s": 155.0, "compiled": 2}
    assert s["compile once"] == {"wall_s": 71.0, "cpu_s": 73.0, "compiled": 1}
    assert s["warm cache"]["compiled"] == 0
    assert s["saved_cpu_s"] == 82.0
    assert s["wall_ratio"] == pytest.approx(71.0 / 83.0, abs=1e-3)
    assert s["split_saved_wall_s"] == 16.0 and s["split_extra_cpu_s"] == 7.0


@pytest.mark.parametrize("args", [["--workers", "0"], ["--games", "0"], ["--rounds", "0"]])
def test_a_count_below_one_is_a_usage_error(args: list[str]):
    done = subprocess.run([sys.executable, "-m", "bench.coldstart", *args], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2
    assert "must be >= 1" in done.stderr.splitlines()[-1]
