"""`flows.beside`: an iteration's close in a thread beside the next iteration."""

from __future__ import annotations

import contextvars
import signal
import threading
import time
from pathlib import Path

import pytest

from flows.beside import Beside, beside
from tasks.run.cputime import BESIDE, Laps

_where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")


def test_the_work_runs_beside_the_caller_until_it_waits() -> None:
    go, done = threading.Event(), []
    work = Beside()
    work.start("close-1", lambda: (go.wait(5), done.append(1)))
    work.release()
    assert work.running and not done  # the caller went on
    go.set()
    work.wait()
    assert done == [1] and not work.running


def test_the_work_begins_once_released_or_waited_for() -> None:
    """Handed over, it waits for the next iteration's games (`release`); a caller that needs
    it ended (`wait`) lets it begin too."""
    began = threading.Event()
    work = Beside()
    work.start("close-1", began.set)
    assert not began.wait(0.3) and work.running  # held until released
    work.release()
    assert began.wait(5)
    work.wait()
    began.clear()
    work.start("close-2", began.set)
    work.wait()  # never released: waiting lets it run
    assert began.is_set() and not work.running


def test_one_at_a_time_in_order() -> None:
    order: list[int] = []
    go = threading.Event()
    work = Beside()
    work.start("close-1", lambda: (go.wait(5), order.append(1)))
    threading.Timer(0.2, go.set).start()
    work.start("close-2", order.append, 2)  # waits for close-1 first
    work.wait()
    assert order == [1, 2]


def test_its_error_is_raised_where_it_is_waited_for_once() -> None:
    def fails() -> None:
        raise OSError("disk full")

    work = Beside()
    work.start("close-1", fails)
    with pytest.raises(OSError, match="disk full"):
        work.wait()
    work.wait()  # raised once


def test_a_failed_close_starts_nothing_after_it() -> None:
    ran: list[int] = []
    work = Beside()
    work.start("close-1", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        work.start("close-2", ran.append, 2)
    work.wait()
    assert ran == []


def test_the_work_sees_the_callers_context() -> None:
    seen: list[str] = []
    token = _where.set("pipeline flow run")
    try:
        work = Beside()
        work.start("close-1", lambda: seen.append(_where.get()))
        work.wait()
    finally:
        _where.reset(token)
    assert seen == ["pipeline flow run"]


def test_one_per_run_folder(tmp_path: Path) -> None:
    assert beside(tmp_path / "a") is beside(tmp_path / "a" / ".." / "a")
    assert beside(tmp_path / "a") is not beside(tmp_path / "b")


def _spin(seconds: float) -> None:
    """Keep this thread busy for ``seconds`` of its own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_its_cpu_is_counted_while_it_runs_and_after() -> None:
    work = Beside()
    assert work.cpu_seconds() == 0.0
    go = threading.Event()
    work.start("close-1", lambda: (_spin(0.2), go.wait(5)))
    work.release()
    deadline = time.monotonic() + 5
    while work.cpu_seconds() < 0.2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 0.2 <= work.cpu_seconds() < 0.4  # read from the running thread's clock
    go.set()
    work.wait()
    ran = work.cpu_seconds()
    work.start("close-2", _spin, 0.1)
    work.wait()
    assert work.cpu_seconds() == pytest.approx(ran + 0.1, abs=0.05)


def test_the_laps_beside_it_leave_its_cpu_out() -> None:
    """The next iteration's laps charge the close running beside them to ``close``."""
    work = Beside()
    laps = Laps("rest", beside=work.cpu_seconds)
    with laps.lap("selfplay"):
        work.start("close-1", _spin, 0.3)
        work.release()
        _spin(0.3)
        work.wait()
    split = laps.totals()
    assert split[BESIDE] == pytest.approx(0.3, abs=0.08)
    assert split["selfplay"] == pytest.approx(0.3, abs=0.15)
    assert BESIDE not in laps.walls()  # CPU only: it has no wall time of its own


def test_a_wait_interrupted_leaves_the_work_to_wait_for_again() -> None:
    """A Ctrl-C or SIGTERM while the pipeline waits for the close: the wait that follows, as
    the run stops (`flows.pipeline._let_close`), still waits for it to end."""
    go, done = threading.Event(), []
    work = Beside()
    work.start("close-1", lambda: (go.wait(5), done.append(1)))
    main = threading.main_thread().ident
    assert main is not None
    # Python's own Ctrl-C, whatever handler an earlier test of this process left installed
    # (a run in-process installs tabula's, which only marks the run as interrupted).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT)).start()  # a Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            work.wait()
    finally:
        signal.signal(signal.SIGINT, before)
    assert work.running and not done
    go.set()
    work.wait()
    assert done == [1] and not work.running
