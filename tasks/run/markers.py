"""Resume markers: the one way a stage finds its finished output instead of redoing it.

A stage is finished exactly when its marker ``iter-NNNN/state/STAGE.json`` exists (see
`tasks.run.layout`). `resumable` wraps a stage function: when the marker exists it returns the
record stored there, read back as the stage's record type (`tasks.run.records`); else it runs
the stage and writes the record as the marker, last. Tasks (a self-play worker, the plan) and
the flows' stage functions (self-play totals, training, evaluation, promotion) use it alike.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from model.files import write_json
from tasks.run.codec import RecordError, from_json, to_json
from tasks.run.faults import kill_point
from tasks.run.layout import RunLayout
from tasks.run.records import Champion, Stage

P = ParamSpec("P")
R = TypeVar("R")


def read_record(path: Path, record: type[R]) -> R | None:
    """The record stored at ``path`` as a ``record``, or None when there is no file."""
    if not path.exists():
        return None
    try:
        return from_json(record, json.loads(path.read_text()))
    except RecordError as wrong:
        raise RecordError(f"{path}: {wrong}") from None
    except json.JSONDecodeError as broken:
        raise RecordError(f"{path}: not JSON ({broken}); remove it to redo the stage") from None


def write_record(path: Path, record: Any) -> None:
    """Write ``record`` to ``path`` atomically, as JSON (`tasks.run.codec.to_json`)."""
    write_json(path, to_json(record))


def finished(
    layout: RunLayout, i: int, stage: Stage, record: type[R], worker: int | None = None
) -> R | None:
    """The record of a finished stage of iteration ``i``, or None when it has to (re)run."""
    return read_record(layout.marker(i, stage.marker_name(worker)), record)


def finished_iterations(layout: RunLayout) -> int:
    """How many iterations of the run have finished, counted from 1 (the last one finished
    before the first unfinished: its ``promote`` marker, the last stage's, exists)."""
    i = 0
    while layout.marker(i + 1, Stage.PROMOTE.marker_name()).exists():
        i += 1
    return i


def champion(layout: RunLayout) -> Champion | None:
    """The run's current champion (``champion.json``), None before the run has one."""
    return read_record(layout.champion, Champion)


def resumable(stage: Stage, record: type[R]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a stage function resumable over its marker (module docstring).

    The function names its run and iteration by its parameters: ``layout``, and ``spec`` (a
    stage input of `tabula.plan`, with its worker if it has one), ``plan`` (an `IterationPlan`)
    or ``iteration`` (INIT: always 0), plus ``worker`` for a self-play worker.
    """

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            layout: RunLayout = given["layout"]
            worker = given.get("worker")
            if "spec" in given:  # a stage input (`tabula.plan`): its iteration, its worker
                i, worker = given["spec"].iteration, getattr(given["spec"], "worker", None)
            elif "plan" in given:
                i = given["plan"].iteration
            else:
                i = 0 if stage is Stage.INIT else given["iteration"]
            marker = layout.marker(i, stage.marker_name(worker))
            done = read_record(marker, record)
            if done is not None:
                return done
            result = fn(*args, **kwargs)
            kill_point(stage.value)
            write_record(marker, result)
            return result

        return run

    return wrap
