"""`flows.beside`: an iteration's close in a thread beside the next iteration."""

from __future__ import annotations

import contextvars
import threading
from pathlib import Path

import pytest

from flows.beside import Beside, beside

_where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")


def test_the_work_runs_beside_the_caller_until_it_waits() -> None:
    go, done = threading.Event(), []
    work = Beside()
    work.start("close-1", lambda: (go.wait(5), done.append(1)))
    assert work.running and not done  # the caller went on
    go.set()
    work.wait()
    assert done == [1] and not work.running


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
