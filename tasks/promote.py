"""The promotion stage: crown the candidate the gate promoted, and name the champion after.

``champion.json`` points at the current best checkpoint; it is replaced atomically, so a reader
sees the old champion or the new one, never half of either.
"""

from __future__ import annotations

from prefect import task

from tasks.retry import IO_RETRIES
from tasks.run.layout import RunLayout
from tasks.run.markers import champion, write_record
from tasks.run.records import Champion, PromotionRecord


@task(name="set-champion", task_run_name="champion-i{iteration}", **IO_RETRIES)
def set_champion(layout: RunLayout, iteration: int, version: int | str | None) -> Champion:
    """Make iteration ``iteration``'s model the champion: ``champion.json``, replaced atomically."""
    crowned = Champion(iteration, layout.rel(layout.model(iteration)), version)
    write_record(layout.champion, crowned)
    return crowned


@task(name="promote", task_run_name="promote-i{iteration}", **IO_RETRIES)
def promote(
    layout: RunLayout, iteration: int, promoted: bool, version: int | str | None
) -> PromotionRecord:
    """Crown iteration ``iteration``'s model when the gate promoted it; the champion after."""
    if promoted:
        set_champion.fn(layout, iteration, version)
    best = champion(layout)
    return PromotionRecord(
        promoted=promoted, version=version, champion=0 if best is None else best.iteration
    )
