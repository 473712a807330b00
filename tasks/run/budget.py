"""A run's budget on disk: ``budget.json`` (`tasks.run.records.Budget`), its limits and what
each iteration spent.

``tabula run --core-hours H`` (or ``--hours H`` of wall time) gives a run a budget. The run
counts the CPU-seconds of all its processes (`tasks.run.cputime.Meter`) and the wall seconds,
iteration by iteration and over every resume, in ``budget.json``. What that implies, whether
the next iteration runs and how many the rate schedule is planned over, is worked out in one
place, `tabula.plan.next_iteration`; each iteration's plan records the boundaries it used, so
reproduction stays exact however the estimate moved. This module only reads and writes the
file.
"""

from __future__ import annotations

from dataclasses import replace

from tasks.run.cputime import Meter
from tasks.run.layout import RunLayout
from tasks.run.markers import read_record, write_record
from tasks.run.records import Budget, Spent
from tasks.run.summary import SummaryRow


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


def metered(
    layout: RunLayout, core_hours: float | None, hours: float | None, cpu_start: float
) -> Meter:
    """Record the limits this invocation gives (`set_limits`) and start the run's meter: what
    the run's earlier processes spent, plus this process tree's CPU-seconds from
    ``cpu_start`` and its wall time from now."""
    budget = set_limits(layout, core_hours, hours)
    return Meter(cpu_start=cpu_start, base=budget.spent[-1] if budget.spent else None)


def record_iteration(
    layout: RunLayout,
    i: int,
    cpu_s: float,
    wall_s: float,
    stages: dict[str, float],
    stage_wall_s: dict[str, float] | None = None,
    cores: int | None = None,
    gpu_busy: dict[str, float] | None = None,
) -> Budget:
    """Add iteration ``i``'s entry to ``budget.json`` (replacing one it had): the run's totals,
    the iteration's CPU (and wall) seconds by stage, the cores it could use and the GPU's busy
    share by stage."""
    budget = read_budget(layout)
    kept = tuple(s for s in budget.spent if s.iteration != i)
    entry = Spent(i, round(cpu_s, 3), round(wall_s, 3), dict(stages), dict(stage_wall_s or {}),
                  cores, dict(gpu_busy or {}))  # fmt: skip
    updated = replace(budget, spent=tuple(sorted((*kept, entry), key=lambda s: s.iteration)))
    write_record(layout.budget, updated)
    return updated


def charge(layout: RunLayout, meter: Meter, row: SummaryRow) -> SummaryRow:
    """Record what the run has spent when iteration ``row.iteration`` finished (``meter``'s
    totals, and its stages' CPU-seconds) on its first finish; a finished iteration's flow that
    ran again to mend it keeps what it spent (its row says so), the mend counting to the next."""
    recorded = spent_on(read_budget(layout), row.iteration)
    if recorded is not None:
        return measured_as(row, recorded)
    cpu, wall = meter.totals()
    i, stages = row.iteration, row.stage_cpu_s
    record_iteration(layout, i, cpu, wall, stages, row.stage_wall_s, row.cores, row.gpu_busy)
    return row


def measured_as(row: SummaryRow, spent: Spent) -> SummaryRow:
    """``row`` with the CPU and wall seconds by stage, the cores and the GPU's busy share that
    ``spent`` recorded."""
    return replace(
        row, stage_cpu_s=dict(spent.stages), stage_wall_s=dict(spent.stage_wall_s),
        cores=spent.cores, gpu_busy=dict(spent.gpu_busy),
    )  # fmt: skip


def spent_on(budget: Budget, i: int) -> Spent | None:
    """Iteration ``i``'s entry, None before it finished."""
    return next((s for s in budget.spent if s.iteration == i), None)
