"""Interrupts that Prefect's engine cannot drop: a Ctrl-C (or a SIGTERM) is remembered when it
raises KeyboardInterrupt (`interrupt`, the handler `tabula run` installs), and the pipeline
raises it again (`raise_if_interrupted`) when a flow returns as if nothing had happened.

Prefect's flow engine ends a flow run Completed and then closes it (its task runner, its
heartbeats, its last log lines); a KeyboardInterrupt raised in between is dropped there (at
debug level: "BaseException was raised after user code finished executing") and the flow
returns its result. A Ctrl-C at the end of an iteration would then let the run start the next
one and finish with exit 0.

An interrupt lands between any two lines, a database driver's too: a SQLite cursor stopped
mid-statement holds the database's lock until it is freed, and the traceback keeps it alive,
so the writes that record the stop would wait for that lock and fail (`free_unwound`).
"""

from __future__ import annotations

import gc
import logging
import threading
import traceback

_received = threading.Event()


def interrupt(signum: int, frame: object) -> None:
    """A signal handler (the main thread's): remember the interrupt, then raise it as
    KeyboardInterrupt, as Python's own SIGINT handler does."""
    _received.set()
    # The run now unwinds while Prefect's worker threads may still log a task's end; a handler
    # that fails because the interpreter is shutting down must not print a traceback over the
    # one line an interrupt gives.
    logging.raiseExceptions = False
    raise KeyboardInterrupt(f"signal {signum}")


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if `interrupt` ran in this process: the one it raised was
    dropped on the way (Prefect's engine), and the run must still stop."""
    if _received.is_set():
        raise KeyboardInterrupt("interrupted")


def free_unwound(error: BaseException) -> None:
    """Free what the frames ``error`` unwound (its causes' and contexts' too) still hold, and
    collect it: a database cursor an interrupt stopped mid-statement, whose lock would keep
    this process's next write waiting (MLflow's SQLite store waits 20 s, then fails). Frames
    still running keep their locals; the traceback keeps its lines."""
    seen: set[int] = set()
    unwound: list[BaseException | None] = [error]
    while unwound:
        e = unwound.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        unwound += [e.__cause__, e.__context__]
    gc.collect()
