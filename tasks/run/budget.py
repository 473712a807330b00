"""A run's budget: what it may spend, what it has spent, and the plan it implies.

``tabula run --core-hours H`` (or ``--hours H`` of wall time) gives a run a budget. The run
counts the CPU-seconds of all its processes (`tasks.run.cputime.process_tree_cpu_seconds`)
and the wall seconds, iteration by iteration and over every resume, in ``budget.json``
(`tasks.run.records.Budget`); before each iteration it stops itself if the budget is spent, so
it always ends at a clean iteration boundary. The learning-rate schedule is planned over the
iterations the budget is expected to pay for (`planned_iterations`): the mean cost of the
iterations so far divides what is left. Each iteration's plan records the boundaries it used,
so reproduction stays exact however the estimate moved.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from tasks.run.cputime import CORE_HOUR, process_tree_cpu_seconds
from tasks.run.layout import RunLayout
from tasks.run.markers import read_record, write_record
from tasks.run.records import Budget, Spent

#: Iterations whose mean cost estimates the next ones' (recent costs, as a run's grow).
RECENT = 5


def read_budget(layout: RunLayout) -> Budget:
    """The run's budget record (no limits and nothing spent before the first write)."""
    return read_record(layout.budget, Budget) or Budget(None, None)


def set_limits(layout: RunLayout, core_hours: float | None, hours: float | None) -> Budget:
    """Record the limits this invocation gives (an extension raises them; None keeps what the
    run had), keeping what was spent."""
    budget = read_budget(layout)
    updated = replace(
        budget,
        core_hours=budget.core_hours if core_hours is None else core_hours,
        hours=budget.hours if hours is None else hours,
    )
    if updated != budget or not layout.budget.exists():
        write_record(layout.budget, updated)
    return updated


def limited(budget: Budget) -> bool:
    return budget.core_hours is not None or budget.hours is not None


def spent_fraction(budget: Budget, cpu_s: float, wall_s: float) -> float:
    """The larger of the CPU and wall fractions of the budget spent (0 without limits)."""
    parts = [0.0]
    if budget.core_hours is not None:
        parts.append(cpu_s / (budget.core_hours * CORE_HOUR))
    if budget.hours is not None:
        parts.append(wall_s / (budget.hours * 3600.0))
    return max(parts)


def planned_iterations(budget: Budget, done: int, prior: int) -> int:
    """How many iterations the budget is expected to pay for: those done, plus what is left
    divided by the mean cost of the last `RECENT` ones (``prior`` before any finished); at
    least one more than done."""
    if not limited(budget):
        return prior
    spent = [s for s in budget.spent if s.iteration <= done]
    if not spent:
        return max(prior, done + 1)
    last = spent[-1]
    left = [math.inf]
    if budget.core_hours is not None:
        left.append((budget.core_hours * CORE_HOUR - last.cpu_s) / _mean_cost(spent, "cpu_s"))
    if budget.hours is not None:
        left.append((budget.hours * 3600.0 - last.wall_s) / _mean_cost(spent, "wall_s"))
    return done + max(1, math.ceil(min(left)))


def _mean_cost(spent: list[Spent], what: str) -> float:
    """Mean cost of the last `RECENT` iterations in ``spent`` (cumulative records)."""
    points = [(0, 0.0), *((s.iteration, float(getattr(s, what))) for s in spent)]
    (i0, v0), (i1, v1) = points[max(0, len(points) - 1 - RECENT)], points[-1]
    return max((v1 - v0) / max(1, i1 - i0), 1e-9)


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


def record_iteration(
    layout: RunLayout, i: int, cpu_s: float, wall_s: float, stages: dict[str, float]
) -> Budget:
    """Add iteration ``i``'s entry to ``budget.json`` (replacing one it had)."""
    budget = read_budget(layout)
    kept = tuple(s for s in budget.spent if s.iteration != i)
    entry = Spent(i, round(cpu_s, 3), round(wall_s, 3), dict(stages))
    updated = replace(budget, spent=tuple(sorted((*kept, entry), key=lambda s: s.iteration)))
    write_record(layout.budget, updated)
    return updated


def spent_on(budget: Budget, i: int) -> Spent | None:
    """Iteration ``i``'s entry, None before it finished."""
    return next((s for s in budget.spent if s.iteration == i), None)
