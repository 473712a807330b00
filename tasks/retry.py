"""The pipeline's retry policy: a task retries only when it failed on I/O.

A flaky remote or a busy disk is worth another try; a bug is not, and shows itself at once.
Prefect applies it to the pipeline's tasks (`IO_RETRIES`); `retry_on_io` applies the same
policy to work done outside a flow (``tabula push``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _retry_on_io(task_: Any, task_run: Any, state: Any) -> bool:
    """Retry a task only when it failed on I/O (a flaky remote, a busy disk), not on a bug."""
    try:
        state.result()
    except OSError:
        return True
    except BaseException:
        return False
    return False


IO_RETRIES: dict[str, Any] = {
    "retries": 2,
    "retry_delay_seconds": 2,
    "retry_condition_fn": _retry_on_io,
}


def retry_on_io(attempt: Callable[[], T], what: str) -> T:
    """``attempt()``, tried again after an `OSError` as a task under `IO_RETRIES` is (as many
    times, after the same delay), each retry announced in one warning naming ``what``; the
    last attempt's error propagates. Any other error propagates at once."""
    retries, delay = IO_RETRIES["retries"], IO_RETRIES["retry_delay_seconds"]
    for tried in range(retries):
        try:
            return attempt()
        except OSError as error:
            logging.getLogger(__name__).warning(
                "%s failed (%s); trying again in %s s (%d of %d)",
                what, error, delay, tried + 1, retries,
            )  # fmt: skip
            time.sleep(delay)
    return attempt()
