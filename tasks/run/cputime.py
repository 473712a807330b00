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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tasks.run.records import Spent

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


def process_tree_cpu_seconds() -> float:
    """CPU-seconds (user + system) this process has used since it started, with every live
    descendant's and every finished descendant's that was waited for: what a run's processes
    have spent so far, while they run (``wait4`` counts a child only once it has ended)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            t = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # ended between the listing and the reading: its parent counts it
        total += t.user + t.system + t.children_user + t.children_system
    return total


@dataclass(frozen=True)
class Mark:
    """A moment of this process tree: its CPU-seconds so far (`process_tree_cpu_seconds`) and
    the monotonic clock."""

    cpu_s: float
    wall_s: float

    @classmethod
    def now(cls) -> Mark:
        return cls(process_tree_cpu_seconds(), time.monotonic())


@dataclass
class Meter:
    """What the run has spent: ``base`` (what its earlier processes spent, None for none) plus
    this process's spending since the meter started.

    Counts from ``cpu_start`` CPU-seconds of this process tree (0: since the process started,
    as ``tabula run``; a caller that did other work first passes what it had used), and wall
    time from the meter's creation.
    """

    cpu_start: float = 0.0
    base: Spent | None = None
    wall_start: float = field(init=False, default_factory=time.monotonic)

    def cpu(self) -> float:
        """CPU-seconds this process tree has spent since the meter's start."""
        return process_tree_cpu_seconds() - self.cpu_start

    def wall(self) -> float:
        return time.monotonic() - self.wall_start

    def totals(self) -> tuple[float, float]:
        """(CPU-seconds, wall seconds) the run has spent, earlier processes included."""
        cpu0, wall0 = (self.base.cpu_s, self.base.wall_s) if self.base else (0.0, 0.0)
        return cpu0 + self.cpu(), wall0 + self.wall()

    @classmethod
    def from_now(cls) -> Meter:
        return cls(cpu_start=process_tree_cpu_seconds())


def cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container or ``taskset``
    limits it; ``os.cpu_count`` elsewhere): the denominator of "cores busy". (As
    ``selfplay.workers: auto`` counts them: `tabula.config.models.usable_cores`; this layer
    imports no config.)"""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def busy(cpu_s: float, wall_s: float, n_cores: int) -> float | None:
    """The share of ``n_cores`` that ``cpu_s`` CPU-seconds kept busy over ``wall_s`` wall
    seconds (1.0: every core all the time); None for no wall time."""
    return cpu_s / (wall_s * n_cores) if wall_s > 0 and n_cores > 0 else None


def stage_metrics(cpu: Mapping[str, float], wall: Mapping[str, float], n_cores: int,
                  gpu: Mapping[str, float] | None = None) -> dict:  # fmt: skip
    """An iteration's use of the machine as metrics: ``cpu/STAGE_s``, ``wall/STAGE_s`` and
    ``busy/STAGE`` (the share of the cores busy, `busy`) by stage, and ``busy/iteration``;
    with ``gpu`` (`Laps.gpu_busy`), ``gpu_busy/STAGE``."""
    metrics = {f"gpu_busy/{stage}": share for stage, share in (gpu or {}).items()}
    metrics |= {f"cpu/{stage}_s": seconds for stage, seconds in cpu.items()}
    metrics |= {f"wall/{stage}_s": seconds for stage, seconds in wall.items()}
    for stage, seconds in wall.items():
        share = busy(cpu.get(stage, 0.0), seconds, n_cores)
        if share is not None:
            metrics[f"busy/{stage}"] = round(share, 4)
    share = busy(sum(cpu.values()), sum(wall.values()), n_cores)
    if share is not None:
        metrics["busy/iteration"] = round(share, 4)
    return metrics


class Readings(Protocol):
    """A source of readings taken while laps run (`tasks.gpu_use.GpuUse`)."""

    def take(self) -> list[float]: ...


#: The name `Laps` charges the CPU-seconds of the work beside the laps to (an iteration's close).
BESIDE = "close"


class Laps:
    """CPU-seconds of this process tree, and wall seconds, by name: what is spent inside a
    `lap` block goes to its name, everything else to ``rest`` (the bookkeeping between the
    stages' work). With ``gpu`` (the GPU's busy share, read while the laps run), each name also
    gets the mean of the readings made during its laps. With ``beside`` (the CPU-seconds so far
    of work that runs beside the laps in threads of this process: the previous iteration's
    close, `flows.beside`), what that work spends goes to ``close`` (`BESIDE`, CPU only: it has
    no wall time of its own), not to the lap it ran beside."""

    def __init__(
        self, rest: str, gpu: Readings | None = None, beside: Callable[[], float] | None = None
    ) -> None:
        self.rest, self.gpu, self.beside = rest, gpu, beside
        self.last_beside = beside() if beside is not None else 0.0
        self.last = process_tree_cpu_seconds()
        self.last_wall = time.monotonic()
        self.laps: dict[str, float] = {}
        self.wall_laps: dict[str, float] = {}
        self.gpu_readings: dict[str, list[float]] = {}
        if gpu is not None:
            gpu.take()  # (what was read before the laps began is no lap's)

    def _charge(self, name: str) -> None:
        now, wall = process_tree_cpu_seconds(), time.monotonic()
        aside = 0.0
        if self.beside is not None:
            spent = self.beside()
            aside, self.last_beside = spent - self.last_beside, spent
            self.laps[BESIDE] = self.laps.get(BESIDE, 0.0) + aside
        self.laps[name] = self.laps.get(name, 0.0) + now - self.last - aside
        self.wall_laps[name] = self.wall_laps.get(name, 0.0) + wall - self.last_wall
        self.last, self.last_wall = now, wall
        if self.gpu is not None:
            self.gpu_readings.setdefault(name, []).extend(self.gpu.take())

    @contextmanager
    def lap(self, name: str, since: Mark | None = None) -> Iterator[None]:
        """Charge what the block spends to ``name`` (what was spent before it to ``rest``).

        since: where the block's work began, when it began before the laps did (self-play's
        games, started before the iteration's flow run: `tasks.selfplay.play_ahead`). The
        first lap then takes everything from that mark on, the bookkeeping that ran beside
        its work included, so that the laps still split the time between them once; a later
        lap, or a mark after the laps began, ignores it."""
        if since is not None and not self.laps and since.wall_s <= self.last_wall:
            self.last, self.last_wall = since.cpu_s, since.wall_s
        else:
            self._charge(self.rest)
        try:
            yield
        finally:
            self._charge(name)

    def totals(self) -> dict[str, float]:
        """The CPU-seconds by name (sorted, as a record stores them), with everything since
        the last block charged to ``rest``."""
        self._charge(self.rest)
        return {k: round(v, 3) for k, v in sorted(self.laps.items())}

    def walls(self) -> dict[str, float]:
        """The wall seconds by name, up to the last `totals` (which charges ``rest``)."""
        return {k: round(v, 3) for k, v in sorted(self.wall_laps.items())}

    def gpu_busy(self) -> dict[str, float]:
        """The GPU's mean busy share by name, up to the last `totals`; empty without readings."""
        return {k: round(sum(v) / len(v), 4) for k, v in sorted(self.gpu_readings.items()) if v}
