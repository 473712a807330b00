"""CPU-time accounting of the strength benchmark: a command and all it starts, not wall time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tasks.run.cputime import run_measured

BURN = """
import subprocess, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
if sys.argv[1] == "parent":
    child = subprocess.Popen([sys.executable, "-c", __CODE__, "child"])
    burn(0.6)
    child.wait()
    time.sleep(0.5)  # waiting is wall time, not CPU time
    print("done", flush=True)
    sys.exit(3)
burn(0.6)
"""


def test_cpu_of_the_command_and_its_children_is_counted_and_sleep_is_not(tmp_path: Path) -> None:
    code = BURN.replace("__CODE__", repr(BURN.replace("__CODE__", "''")))
    log = tmp_path / "log.txt"
    m = run_measured([sys.executable, "-c", code, "parent"], cwd=tmp_path, log=log)
    assert m.returncode == 3 and "done" in m.stderr_tail
    # 0.6 s burned in the parent plus 0.6 s in the child, plus interpreter start-up twice
    assert 1.2 <= m.cpu_s < 2.5
    assert m.wall_s >= 0.5 + 0.6  # the child's burn runs beside the parent's, the sleep after


def test_a_failing_command_is_measured_and_reported(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    m = run_measured(
        [sys.executable, "-c", "raise SystemExit('no such run')"], cwd=tmp_path, log=log
    )
    assert m.returncode == 1 and m.stderr_tail.endswith("no such run")


def test_a_missing_program_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_measured([str(tmp_path / "nothing-here")], cwd=tmp_path)
