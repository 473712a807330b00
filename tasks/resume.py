"""Resume: the one way a stage finds its finished output instead of redoing it.

A stage is finished exactly when its marker ``iter-NNNN/state/STAGE.json`` exists (see
``tasks.layout``). `resumable` wraps a stage function: when the marker exists it returns the
record stored there, read back as the stage's record type (``tasks.records``); else it runs
the stage and writes the record as the marker, last. Tasks (a self-play worker, the plan) and
the flows' stage functions (self-play totals, training, evaluation, promotion) use it alike.

Test-only: ``TABULA_KILL_AT=POINT[:N]`` makes the process SIGKILL itself the N-th time (default
1) it reaches POINT, so the fault tests interrupt every stage whatever the machine's load.
The points: each `Stage` (``init``, ``plan``, ``selfplay``, ``train``, ``evaluate``,
``promote``), reached after a stage's work and before its marker, and inside the long stages
at each progress report (a self-play game, a training step, a gate or anchor game); ``dvc``
after a DVC commit and push, before the stage that made it is marked; ``lineage`` before an
iteration's files are committed to the run branch. Never set it outside tests.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from model.files import write_json
from tasks.layout import RunLayout
from tasks.records import Champion, RecordError, Stage, from_json, to_json

P = ParamSpec("P")
R = TypeVar("R")

#: The test-only variable naming the point where the process kills itself (module docstring).
KILL_AT = "TABULA_KILL_AT"
_reached: Counter[str] = Counter()
_reached_lock = threading.Lock()  # self-play workers report from several threads


def kill_point(name: str) -> None:
    """Test-only: SIGKILL this process if ``TABULA_KILL_AT`` names this visit to ``name``."""
    wanted = os.environ.get(KILL_AT)
    if not wanted:
        return
    point, _, nth = wanted.partition(":")
    if point != name:
        return
    with _reached_lock:
        _reached[name] += 1
        if _reached[name] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)


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
    """Write ``record`` to ``path`` atomically, as JSON (`tasks.records.to_json`)."""
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

    The function names its run and iteration by its parameters: ``layout``, and ``plan`` (an
    `IterationPlan`) or ``iteration`` (INIT: always 0), plus ``worker`` for a self-play worker.
    """

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            layout: RunLayout = given["layout"]
            if "plan" in given:
                i = given["plan"].iteration
            else:
                i = 0 if stage is Stage.INIT else given["iteration"]
            marker = layout.marker(i, stage.marker_name(given.get("worker")))
            done = read_record(marker, record)
            if done is not None:
                return done
            result = fn(*args, **kwargs)
            kill_point(stage.value)
            write_record(marker, result)
            return result

        return run

    return wrap
