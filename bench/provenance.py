"""Where a benchmark's figures come from: the commit, the machine and whether others shared it,
and compute counted in units that do not depend on the CPU.

A core-hour is not a unit across machines (an iteration of the default costs about 29 CPU-s on
a 2-core AMD EPYC with AVX-512 and about 68 on the Intel Xeon of earlier runs), and a run on a
machine other processes also use spends its budget differently. So every strength JSON records
the commit and whether its tree had local changes (`commit`), the CPU model (`cpu_model`), and
for each run what the rest of the machine did meanwhile (`Sharing`: the machine's busy
CPU-seconds from ``/proc/stat`` less the run's own, and the load average at both ends), beside
its self-play network evaluations, trained samples and iterations (`compute`), and how much
work a CPU-second bought along the run (`pace`): a CPU-second budget is fair between runs only
while that holds, and a host that slows (its other tenants, its clocks) shows there and not in
`Sharing`, which sees this machine's processes only.
"""

from __future__ import annotations

import os
import statistics
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Other processes' CPU above this share of the machine's cores during a run marks it shared.
SHARED_ABOVE = 0.05
#: A run whose last third of iterations bought less than this share of its first third's
#: self-play work per CPU-second is marked slowed (`pace`).
SLOWED_BELOW = 0.85


def commit(root: Path) -> dict[str, Any]:
    """``{"commit": the HEAD hash or None outside git, "dirty": tracked files changed}``."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=30, check=True)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    head = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if head else None
    return {"commit": head, "dirty": bool(status)}


def cpu_model(cpuinfo: str) -> str:
    """The first ``model name`` of a ``/proc/cpuinfo`` text ("unknown" without one)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return "unknown"


def machine() -> dict[str, Any]:
    """This machine: its CPU model and its cores."""
    info = Path("/proc/cpuinfo")
    text = info.read_text() if info.exists() else ""
    return {"cpu_model": cpu_model(text), "cores": os.cpu_count()}


def busy_seconds(stat: str, ticks_per_s: float) -> float:
    """The machine's busy CPU-seconds since boot from a ``/proc/stat`` text: its ``cpu`` line's
    user, nice, system, irq, softirq and steal ticks (idle and iowait left out)."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(x) for x in fields[1:9]]
            ticks += [0] * (8 - len(ticks))
            user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
            return (user + nice + system + irq + softirq + steal) / ticks_per_s
    raise ValueError("no cpu line in /proc/stat")


@dataclass(frozen=True)
class Snapshot:
    """The machine at one moment: busy CPU-seconds since boot and the 1-minute load average."""

    busy_s: float
    load: float

    @classmethod
    def now(cls) -> Snapshot:
        stat = Path("/proc/stat")
        busy = busy_seconds(stat.read_text(), os.sysconf("SC_CLK_TCK")) if stat.exists() else 0.0
        return cls(busy, os.getloadavg()[0])


@dataclass(frozen=True)
class Sharing:
    """What the rest of the machine did during a run, measured: ``others_cpu_s``, the machine's
    busy CPU-seconds less the run's own (``own_cpu_s``, its process tree's); ``others_share``,
    that over the seconds of the machine's ``cores`` during the run's wall time;
    ``load_start`` and ``load_end``, the 1-minute load average at both ends; ``shared``: others
    used more than `SHARED_ABOVE` of the machine."""

    wall_s: float
    cores: int
    own_cpu_s: float
    others_cpu_s: float
    others_share: float
    load_start: float
    load_end: float
    shared: bool

    @classmethod
    def between(cls, start: Snapshot, end: Snapshot, own_cpu_s: float, wall_s: float,
                cores: int) -> Sharing:  # fmt: skip
        others = max(0.0, end.busy_s - start.busy_s - own_cpu_s)
        share = others / max(wall_s * cores, 1e-9)
        return cls(round(wall_s, 3), cores, round(own_cpu_s, 3), round(others, 3),
                   round(share, 4), start.load, end.load, share > SHARED_ABOVE)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def merged(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One `Sharing` dict over the invocations of a resumed run (sums; the first start's load,
    the last end's; shared if any part was); None without any."""
    if not parts:
        return None
    wall = sum(p["wall_s"] for p in parts)
    cores_s = sum(p["wall_s"] * p["cores"] for p in parts)
    others = sum(p["others_cpu_s"] for p in parts)
    return {
        "wall_s": round(wall, 3),
        "cores": max(p["cores"] for p in parts),
        "own_cpu_s": round(sum(p["own_cpu_s"] for p in parts), 3),
        "others_cpu_s": round(others, 3),
        "others_share": round(others / cores_s, 4) if cores_s else 0.0,
        "load_start": parts[0]["load_start"],
        "load_end": parts[-1]["load_end"],
        "shared": any(p["shared"] for p in parts),
    }


def compute(iterations: int, evaluations: int, simulations: int, positions: int,
            trained_steps: int, batch_size: int) -> dict[str, int]:  # fmt: skip
    """A run's compute in units that do not depend on the CPU: iterations, self-play network
    evaluations and simulations, positions played, and samples trained (steps x batch)."""
    return {
        "iterations": iterations,
        "selfplay_evaluations": evaluations,
        "selfplay_simulations": simulations,
        "selfplay_positions": positions,
        "trained_steps": trained_steps,
        "trained_samples": trained_steps * batch_size,
    }


def pace(rates: list[float]) -> dict[str, Any] | None:
    """How much self-play work a CPU-second bought along a run, from ``rates``: each iteration's
    network evaluations per CPU-second of self-play, in order. The medians of the first and
    last thirds of the iterations (the first iteration left out: it also pays for start-up and
    compilation), the last's share of the first, and ``slowed`` when that share is below
    `SLOWED_BELOW`. None with fewer than four iterations. A network that grows during the run
    (``network.grow``) lowers it too."""
    steady = rates[1:]
    if len(steady) < 3:
        return None
    third = len(steady) // 3
    first, last = statistics.median(steady[:third]), statistics.median(steady[-third:])
    share = last / first if first > 0 else 0.0
    return {
        "first_third": round(first, 1),
        "last_third": round(last, 1),
        "share": round(share, 4),
        "slowed": share < SLOWED_BELOW,
    }
