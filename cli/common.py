"""What every `tabula` command shares: the ``--config``/``--set`` options and the config they
name (`config_from`), one-line errors (`expected_errors`, `one_line_console_errors`), Ctrl-C and
SIGTERM as an interrupt that sticks (`interrupt_on_signals`) and a process that ends after one
(`exit_within`), and the project folder (`project_dir`, the working directory)."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer

from tabula.errors import TabulaError, first_line

#: Environment defaults of every `tabula` process (the user's environment wins).
QUIET_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    # Stage lines go to the flow run's page in the Prefect UI, not to the terminal.
    "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL": "INFO",
    "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "INFO",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "DVC_NO_ANALYTICS": "true",
}

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config (default: embedded quick-start).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: section.key=value (repeatable)."),
]


def interrupt_on_signals() -> None:
    """SIGTERM (``kill``, a scheduler stopping the run) unwinds like Ctrl-C, so the run's MLflow
    runs end KILLED and its lock is released; SIGKILL leaves that to the next resume. Both are
    remembered (`tasks.interrupts`), so that one Prefect's engine drops still stops the run.
    A SIGINT ignored (a run started in the background, ``tabula run &``) stays ignored."""
    from tasks.interrupts import interrupt

    signal.signal(signal.SIGTERM, interrupt)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, interrupt)


#: The exit code of a command stopped by an interrupt (a shell's, for SIGINT).
INTERRUPTED = 130
#: After an interrupt, the seconds the interpreter may take to end (join its threads, run its
#: exit handlers) before the process ends itself (`exit_within`).
EXIT_GRACE_S = 30.0


def exit_within(seconds: float, code: int) -> None:
    """End the process with ``code`` if it is still alive ``seconds`` from now, after printing
    the stacks of its threads (a daemon timer).

    An interrupt raises KeyboardInterrupt wherever the main thread happens to be, which can
    leave a lock taken (a logging handler's, say); a thread that then waits for that lock keeps
    the interpreter's exit, which joins every thread, waiting for ever, and a scheduler's
    SIGTERM would leave the process behind. When a command has exited, there is nothing left
    to finish: a run has ended its MLflow runs and released its lock."""

    def overdue() -> None:
        sys.stderr.write(f"tabula: still exiting {seconds:g} s after the interrupt; its threads:\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(code)

    timer = threading.Timer(seconds, overdue)
    timer.daemon = True
    timer.start()


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"tabula: {message}", err=True)
    raise typer.Exit(code)


def expected_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn expected failures into one line on stderr; let bugs show their traceback.

    A `TabulaError` (bad config, a corrupt file, an unknown run, ...) or a file that is missing,
    unreadable or a folder exits 2; the environment failing (disk full, a file size limit, a
    folder that cannot be made) exits 1. Anything else, a ValueError from inside numpy
    included, is a bug: it propagates with its traceback.
    """

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (TabulaError, FileNotFoundError, PermissionError, IsADirectoryError) as exc:
            _fail(first_line(exc))
        except OSError as exc:
            _fail(
                f"{first_line(exc)} (check free disk space, file size limits and "
                "permissions, then run again)",
                code=1,
            )
        except KeyboardInterrupt:
            _fail("interrupted", code=INTERRUPTED)

    return wrapper


class _NoTracebackForExpected(logging.Filter):
    """Prefect logs a failed task's or flow's traceback on the console. For an expected error
    the one line of `expected_errors` says it all, so the console keeps Prefect's one-line
    record and drops the traceback (Prefect's API log, written earlier, keeps it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], TabulaError | OSError):
            record.exc_info, record.exc_text = None, None
        return True


def one_line_console_errors() -> None:
    """Install `_NoTracebackForExpected` on the root handlers (Prefect's console handler)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _NoTracebackForExpected) for f in handler.filters):
            handler.addFilter(_NoTracebackForExpected())


def config_from(config: Path | None, overrides: list[str] | None):
    """The config ``--config`` and ``--set`` name (`tabula.config.load_config`)."""
    from tabula.config import load_config

    return load_config(config, overrides or ())


def project_dir() -> Path:
    """The project a command works in: the working directory."""
    return Path.cwd()
