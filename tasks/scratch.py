"""Scratch files and folders in the system's temp folder that a process killed with SIGKILL
cannot remove: named after the process that made them, so that the next process of the same
kind removes those whose process is gone.

A name is ``tabula-KIND-PID-...`` (`scratch_prefix`, for `tempfile`'s ``prefix``): the kind (a
self-play pool's compile lock, a warm-up's scratch project, a model fetched from the registry),
then the pid of its process. `sweep_orphans` removes those of a kind whose pid no longer runs;
one whose pid the system gave again stays until that process ends too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

SCRATCH = "tabula-{kind}-{pid}-"


def scratch_prefix(kind: str) -> str:
    """The name prefix of this process's scratch of ``kind`` (`SCRATCH`), for `tempfile`;
    ``kind`` has no ``-``."""
    assert "-" not in kind, kind
    return SCRATCH.format(kind=kind, pid=os.getpid())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # (another user's process)
    return True


def sweep_orphans(kind: str) -> None:
    """Remove the scratch of ``kind`` that processes now gone left behind."""
    for path in Path(tempfile.gettempdir()).glob(SCRATCH.format(kind=kind, pid="*") + "*"):
        pid = path.name.removeprefix(f"tabula-{kind}-").split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
