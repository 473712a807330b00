"""CPU time of a command and every process it starts: the budget unit of the strength benchmark.

Budgets are CPU-seconds, not wall time (docs/strength.md): these machines are shared, and a
process's user + system time does not grow while it waits for a core, so two configs given the
same CPU budget get the same compute however busy the machine is. The OS keeps the count: ``wait4``
returns the resource usage of the child and of every descendant it waited for (Prefect's
temporary server, DVC and git subprocesses, self-play workers), which is all a well-behaved
command starts.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CORE_HOUR = 3600.0  # CPU-seconds in one core-hour


@dataclass(frozen=True)
class Measured:
    """A finished command: exit code, CPU-seconds (user + system, it and its descendants),
    wall seconds, and the last lines of its stderr (for a one-line failure report)."""

    returncode: int
    cpu_s: float
    wall_s: float
    stderr_tail: str


def cpu_seconds(usage: os.struct_rusage | object) -> float:
    """User + system seconds of a ``resource``/``wait4`` usage record."""
    return float(usage.ru_utime + usage.ru_stime)  # type: ignore[attr-defined]


def run_measured(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
) -> Measured:
    """Run ``argv`` to completion and measure it. stdout and stderr go to ``log`` (appended)
    or are discarded; the stderr tail comes from that log."""
    handle = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    finally:
        if log is not None:
            handle.close()  # type: ignore[union-attr]
    tail = ""
    if log is not None and log.exists():
        lines = log.read_bytes()[-4000:].decode(errors="replace").strip().splitlines()
        tail = "\n".join(lines[-5:])
    return Measured(proc.returncode, cpu_seconds(usage), time.monotonic() - started, tail)
