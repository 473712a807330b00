"""The pipeline's retry policy: a task retries only when it failed on I/O.

A flaky remote or a busy disk is worth another try; a bug is not, and shows itself at once.
"""

from __future__ import annotations

from typing import Any


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
