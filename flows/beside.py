"""Work beside the next iteration: an iteration's close runs in a thread while the next one
plays its games.

An iteration's close (`flows.iteration.close`: its model's registration, its promotion marker,
its DVC push, its lineage commit and summary) needs nothing the next iteration makes, and the
next iteration needs nothing of it but the champion, which the iteration crowns before it
returns. So the pipeline hands the close over (`Beside.start`) and goes on. The close begins
when the next iteration's flow reaches its games (`Beside.release`; in worker processes they
began before the flow run did: `flows.pipeline.games_ahead`): until then this process's one
thread of Python (the flow runs' start and end, the plan) is the work in the way, and a close
beside it would only take turns with it for the interpreter; while the games run in worker
processes, the flow's thread just waits. The next iteration's first DVC commit waits for the close
(`Beside.wait`), so that commits to the project's repository stay one at a time and in order,
and a close that failed stops the run there with its own error. A kill while a close runs is
mended on resume: the iteration whose close did not end is run again
(`flows.pipeline.closed_row`), every stage found, and its close with it.

One close at a time per run; the thread carries the caller's context (Prefect's flow run).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_running: dict[Path, Beside] = {}


class Beside:
    """The close in flight of one run (`beside`), or none."""

    def __init__(self) -> None:
        # Set when no work is in flight: waited on instead of `Thread.join`, which Python 3.11
        # leaves marking a still-running thread as ended when a signal interrupts it.
        self._idle = threading.Event()
        self._idle.set()
        self._go = threading.Event()  # the work handed over may begin
        self._error: BaseException | None = None
        self._cpu_ended = 0.0  # CPU-seconds of the threads that ended (or are ending)
        self._cpu_lock = threading.Lock()
        self._counting: int | None = None  # the thread whose clock is not in _cpu_ended yet

    def cpu_seconds(self) -> float:
        """CPU-seconds the work has spent so far, every piece started since this was made:
        its threads' own CPU clocks (the processes they start are not in them), so that the
        laps of what runs beside it can leave it out (`tasks.run.cputime.Laps`)."""
        with self._cpu_lock:
            if self._counting is None:
                return self._cpu_ended
            clock = time.pthread_getcpuclockid(self._counting)
            return self._cpu_ended + time.clock_gettime(clock)

    def start(self, name: str, work: Callable[..., Any], *args: Any) -> None:
        """Run ``work(*args)`` in a thread named ``name``, once the one before has ended (its
        error raised here, and nothing started), and from the moment `release` or `wait` is
        called."""
        self.wait()
        self._go.clear()
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=self._run, args=(context, work, args), name=name, daemon=False
        )
        self._idle.clear()
        thread.start()

    def _run(self, context: contextvars.Context, work: Callable[..., Any], args: tuple) -> None:
        self._go.wait()
        with self._cpu_lock:
            self._counting = threading.get_ident()
        try:
            context.run(work, *args)
        except BaseException as error:  # raised in the thread that waits (`wait`)
            self._error = error
        finally:
            with self._cpu_lock:
                self._cpu_ended += time.thread_time()
                self._counting = None
            self._idle.set()

    def release(self) -> None:
        """Let the work handed over begin (now that the next iteration's games do)."""
        self._go.set()

    def wait(self) -> None:
        """Let the work in flight begin if it has not, wait for it to end, and raise its
        error (once)."""
        self._go.set()
        self._idle.wait()  # (an interrupt here leaves it in flight, for the next wait)
        error, self._error = self._error, None
        if error is not None:
            raise error

    @property
    def running(self) -> bool:
        return not self._idle.is_set()


def beside(root: Path) -> Beside:
    """The `Beside` of the run whose folder is ``root`` (one per run and process)."""
    with _lock:
        return _running.setdefault(root.resolve(), Beside())
