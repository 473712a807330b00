"""Progress of the pipeline's long stages, for whoever shows it (the ``tabula run`` console).

Stages call ``report(label, done, total)`` as they go (self-play games per worker, training
steps, match games); a display installed with ``showing(display)`` in the same process gets
each call. Where none is installed (tests, a Dask worker's process on a cluster) a report goes
nowhere, so stages never depend on being watched. Reports may come from several threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Display = Callable[[str, int, int], None]
"""``display(label, done, total)``: ``label`` names one bar, e.g. "iter 2 training (steps)"."""

_display: Display | None = None


@contextmanager
def showing(display: Display) -> Iterator[None]:
    """Send this process's stage reports to ``display`` inside the ``with`` block."""
    global _display
    previous, _display = _display, display
    try:
        yield
    finally:
        _display = previous


def report(label: str, done: int, total: int) -> None:
    """Tell the installed display (if any) that ``done`` of ``total`` are finished."""
    display = _display
    if display is not None:
        display(label, done, total)


def counter(label: str, total: int) -> Callable[[object], None]:
    """A callback for per-item events (a finished game): each call reports one more done."""
    done = 0

    def one(_: object) -> None:
        nonlocal done
        done += 1
        report(label, done, total)

    return one
