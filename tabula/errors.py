"""The one error base: `TabulaError` marks a failure a person can act on, not a bug.

Bad config, a missing or corrupt file, an illegal GTP move, an unknown run, a run that is
already going: each module raises its own subclass of `TabulaError` (``ConfigError``,
``ShardError``, ``CheckpointError``, ...) with a one-line message that names the thing and what
to do. The CLI prints exactly that line and exits 2; any other exception is a bug and keeps its
traceback (docs/style.md, principle 12). A class that callers also catch as ``ValueError`` (a bad
value, e.g. a corrupt shard refused inside training) keeps ``ValueError`` as a second base.

Pure: no I/O, nothing at import time.
"""

from __future__ import annotations

__all__ = ["TabulaError", "UsageError", "first_line"]


class TabulaError(Exception):
    """An expected failure; ``str(e)`` is one line naming the thing and what to do."""


class UsageError(TabulaError, ValueError):
    """A bad argument to a command or task that has no error class of its own: a count out
    of range, a target or run name that names nothing."""


def first_line(exc: BaseException, *, with_type: bool = False) -> str:
    """The first line of ``str(exc)``, for folding a library's many-line message into ours.

    ``with_type`` prefixes the exception's class name ("UnpicklingError: ..."), for messages
    from arbitrary code where the class says what went wrong. An empty message gives the class
    name alone.
    """
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = text.splitlines()[0]
    return f"{type(exc).__name__}: {line}" if with_type else line
