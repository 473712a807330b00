"""Test-only fault points: where the fault tests make a run's process kill itself.

``TABULA_KILL_AT=POINT[:N]`` makes the process SIGKILL itself the N-th time (default 1) it
reaches POINT, so the fault tests interrupt every stage whatever the machine's load. The
points: each `Stage` (``init``, ``plan``, ``selfplay``, ``train``, ``evaluate``, ``promote``),
reached after a stage's work and before its marker, and inside the long stages at each progress
report (a self-play game, a training step, a gate or anchor game); ``dvc`` after a DVC commit,
before the stage that made it is marked; ``lineage`` before an iteration's files are
committed to the run branch; ``completed`` once an iteration's flow run is Completed, before
Prefect's engine has closed it; ``ahead`` once an iteration's games have begun before its flow run
(`flows.pipeline.games_ahead`); ``push`` in ``tabula push``, after each iteration's data is in the
DVC remote (the git refs go last). ``TABULA_KILL_SIGNAL=INT`` sends the process group a SIGINT there
instead, as Ctrl-C in a terminal does (the Ctrl-C tests). Never set them outside tests.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

#: The test-only variable naming the point where the process kills itself.
KILL_AT = "TABULA_KILL_AT"
#: The test-only variable naming the signal sent there instead of SIGKILL ("INT": Ctrl-C).
KILL_SIGNAL = "TABULA_KILL_SIGNAL"
_reached: Counter[str] = Counter()
_reached_lock = threading.Lock()  # self-play workers report from several threads


def kill_point(name: str) -> None:
    """Test-only: SIGKILL this process if ``TABULA_KILL_AT`` names this visit to ``name`` (or
    send its process group ``TABULA_KILL_SIGNAL``)."""
    wanted = os.environ.get(KILL_AT)
    if not wanted:
        return
    point, _, nth = wanted.partition(":")
    if point != name:
        return
    with _reached_lock:
        _reached[name] += 1
        if _reached[name] == int(nth or 1):
            sent = os.environ.get(KILL_SIGNAL)
            if sent:
                os.killpg(os.getpgrp(), signal.Signals[f"SIG{sent}"])
            else:
                os.kill(os.getpid(), signal.SIGKILL)
