"""MLflow run statuses say how a pipeline run ended: FINISHED, KILLED on SIGTERM or after a
SIGKILL (marked when the run resumes), FAILED when a stage raises. Real ``tabula run``
subprocesses against the session's Prefect server, MLflow on SQLite."""

from __future__ import annotations

import signal
import time

import pytest

from tabula.config import load_config
from tasks import tracking
from tasks.run.layout import RunLayout
from tests import pipeline_runs as runs
from tests.conftest import TINY

pytestmark = pytest.mark.slow


def test_sigterm_ends_the_runs_killed(prefect_server, project):
    run = runs.start(project, 1, prefect_server)
    deadline = time.monotonic() + 600
    while runs.statuses(project).get("iter-1") != "RUNNING":  # the iteration's run is open
        assert run.proc.poll() is None, run.stderr_tail()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    run.proc.send_signal(signal.SIGTERM)
    run.wait(timeout=300)
    assert runs.statuses(project) == {"pipeline": "KILLED", "iter-1": "KILLED"}


def test_sigkill_leaves_runs_that_the_resume_marks_killed(prefect_server, project):
    assert runs.killed_itself(runs.start(project, 1, prefect_server, kill_at="train"))
    assert runs.statuses(project) == {"pipeline": "RUNNING", "iter-1": "RUNNING"}  # nobody said
    cfg = load_config(None, TINY)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    assert len(tracking.mark_killed(cfg, layout)) == 2  # what run_pipeline does under the lock
    assert runs.statuses(project) == {"pipeline": "KILLED", "iter-1": "KILLED"}
    runs.run(project, 1, prefect_server)  # the resume reopens and finishes them
    assert runs.statuses(project) == {"pipeline": "FINISHED", "iter-1": "FINISHED"}


def test_a_stage_that_raises_ends_its_runs_failed(prefect_server, project):
    """A file where iteration 2's self-play folder goes: its stage raises (one line, exit 1)."""
    runs.run(project, 1, prefect_server)
    cfg = load_config(None, TINY)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    layout.iteration(2).mkdir(parents=True)
    layout.selfplay(2).write_text("not a folder\n")
    line = runs.error_line(runs.run(project, 2, prefect_server, expect=1))
    assert "Not a directory" in line
    assert runs.statuses(project) == {
        "pipeline": "FAILED",
        "iter-1": "FINISHED",
        "iter-2": "FAILED",
    }
