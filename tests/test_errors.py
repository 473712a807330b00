"""The CLI's error contract (docs/style.md, principle 12): a TabulaError is one line and exit 2; a
bug keeps its traceback, a ValueError from deep inside a library included."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import typer
from typer.testing import CliRunner

from cli.common import expected_errors
from tabula.errors import TabulaError, UsageError, first_line


def _command_raising(exc: BaseException):
    """A one-command app whose command, wrapped like every `tabula` command, raises ``exc``."""
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.command()
    @expected_errors
    def fail() -> None:
        raise exc

    return CliRunner().invoke(app, [])


def test_a_tabula_error_is_one_line_and_exit_2() -> None:
    result = _command_raising(UsageError("no run named 'x'\nsecond line"))
    assert result.exit_code == 2
    assert result.stderr == "tabula: no run named 'x'\n"
    assert "Traceback" not in result.output


def test_a_bug_inside_numpy_keeps_its_traceback() -> None:
    try:
        np.zeros(3).reshape(2, 2)
    except ValueError as e:
        bug = e
    result = _command_raising(bug)
    assert result.exit_code == 1
    assert result.exception is bug  # propagated, not turned into a line
    assert "tabula:" not in result.stderr


def test_a_missing_file_is_one_line_and_a_full_disk_exit_1() -> None:
    missing = _command_raising(FileNotFoundError(2, "No such file or directory"))
    assert missing.exit_code == 2
    assert missing.stderr == "tabula: [Errno 2] No such file or directory\n"
    full = _command_raising(OSError(28, "No space left on device"))
    assert full.exit_code == 1 and full.stderr.startswith("tabula: [Errno 28] No space left")


#: A `tabula` process (`cli.main`) with one more command, ``stop``: it starts a thread (one that
#: never ends when argv[1] is "stuck") and is interrupted, as Ctrl-C or SIGTERM would.
_INTERRUPTED_COMMAND = textwrap.dedent(
    """
    import sys, threading
    from cli import app, main
    from cli.common import expected_errors

    sys.modules["cli.app"].EXIT_GRACE_S = 2.0
    forever = sys.argv.pop(1) == "stuck"

    @app.command()
    @expected_errors
    def stop() -> None:
        waiting = threading.Event()
        threading.Thread(target=waiting.wait, args=(None if forever else 0.1,)).start()
        raise KeyboardInterrupt

    main()
    """
)


def _interrupted(thread: str) -> tuple[int, str, float]:
    started = time.monotonic()
    argv = [sys.executable, "-c", _INTERRUPTED_COMMAND, thread, "stop"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stderr, time.monotonic() - started


def test_an_interrupted_command_ends_though_a_thread_never_does() -> None:
    """The interpreter's exit joins every thread: one waiting for ever (for a lock the interrupt
    left taken) would keep the process alive; `cli.main` ends it after its grace, with the
    stacks of its threads."""
    code, stderr, _ = _interrupted("stuck")
    assert code == 130
    assert stderr.startswith("tabula: interrupted\ntabula: still exiting 2 s after the interrupt")
    assert "in wait" in stderr  # the stuck thread's stack
    code, stderr, seconds = _interrupted("ends")  # a thread that ends: no wait for the grace
    assert (code, stderr) == (130, "tabula: interrupted\n")
    assert seconds < 30


def test_usage_error_is_also_a_value_error() -> None:
    assert issubclass(UsageError, TabulaError) and issubclass(UsageError, ValueError)


def test_every_expected_failure_derives_from_tabula_error() -> None:
    from cli.ui import UiError
    from model.checkpoint import CheckpointError
    from model.datamodule import DataWindowError
    from model.shards import ShardError
    from tabula.arena import ArenaError
    from tabula.config import ConfigError
    from tabula.elo import RatingError
    from tabula.gating import GateError
    from tabula.go.coords import CoordinateError
    from tabula.go.game import IllegalMoveError
    from tabula.sgf import SgfError
    from tasks.match import MatchError
    from tasks.players import PlayerSpecError
    from tasks.run.layout import RunLockedError
    from tasks.run.results import ResultsStoreError
    from tasks.tracking import TrackingStoreError
    from tasks.train import TrainError, WindowChangedError
    from tasks.versioning import VersioningError

    expected = [ArenaError, CheckpointError, ConfigError, CoordinateError, DataWindowError]
    expected += [GateError, IllegalMoveError, MatchError, PlayerSpecError, RatingError]
    expected += [ResultsStoreError, RunLockedError, ShardError, SgfError, TrainError, UiError]
    expected += [TrackingStoreError, VersioningError, WindowChangedError]
    assert [c.__name__ for c in expected if not issubclass(c, TabulaError)] == []
    # Training refuses bad inputs with these, and reproduction catches them as ValueError.
    for refused in (CheckpointError, DataWindowError, ShardError, TrainError, WindowChangedError):
        assert issubclass(refused, ValueError), refused


def test_first_line() -> None:
    assert first_line(ValueError("one\ntwo")) == "one"
    assert first_line(ValueError("  \n")) == "ValueError"
    assert first_line(KeyError("k"), with_type=True) == "KeyError: 'k'"
