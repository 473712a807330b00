"""SIGKILL in the middle of self-play, of training and of an iteration's close (beside the next
iteration: `flows.beside`), then run again: nothing lost or doubled.

The run kills itself at named points (``TABULA_KILL_AT``, test-only), so the kills land inside
those stages however busy the machine is.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cli.clone import empty_project
from tasks import tracking
from tasks.run.layout import RunLayout
from tests import pipeline_runs as runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def uninterrupted(prefect_server, tmp_path_factory) -> Path:
    """A two-iteration TINY and GATED run that nothing interrupted (its project)."""
    project = empty_project(tmp_path_factory.mktemp("uninterrupted") / "project")
    runs.run(project, 2, prefect_server)
    return project


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_killed_run_resumes_with_nothing_lost_or_doubled(
    prefect_server, uninterrupted, tiny_config, project, processes
):
    layout = RunLayout(project, "data", tiny_config.pipeline.name)
    api = prefect_server  # its URL
    # Self-play workers as threads (TINY) or as the default's processes, which must write the
    # bytes a thread writes: the reference below plays in threads.
    extra = [f"selfplay.processes={str(processes).lower()}"]
    # The run kills itself after the second self-play game, then after the second training step.
    killed = runs.start(project, 2, api, kill_at="selfplay:2", extra=extra)
    assert runs.killed_itself(killed, limit=300)
    assert layout.worker(1, 0).exists() and not layout.marker(1, "selfplay").exists()
    killed = runs.start(project, 2, api, kill_at="train:2", extra=extra)
    assert runs.killed_itself(killed, limit=300)
    assert layout.model_dir(1).exists() and not layout.marker(1, "train").exists()
    runs.run(project, 2, api, extra=extra)

    # the same config as the killed runs (TINY and GATED), in threads: only the kills differ
    expected = RunLayout(uninterrupted, "data", tiny_config.pipeline.name)

    for i in (1, 2):  # same positions, byte for byte: same DVC hashes as an uninterrupted run
        assert runs.selfplay_outs(layout, i) == runs.selfplay_outs(expected, i)
        assert not list(layout.iteration(i).rglob("*.tmp"))
    client = tracking.connect(tiny_config.pipeline.mlflow_tracking_uri, project)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    mlflow_runs = client.search_runs([exp.experiment_id])
    kinds = [
        (r.data.tags.get(tracking.TAG_KIND), r.data.tags.get(tracking.TAG_ITERATION))
        for r in mlflow_runs
    ]
    assert sorted(kinds, key=str) == sorted(
        [("pipeline", None), ("iteration", "1"), ("iteration", "2")], key=str
    )
    assert all(r.info.status == "FINISHED" for r in mlflow_runs)


@pytest.mark.parametrize("point", ["promote", "lineage"])
def test_a_kill_in_an_iteration_close_beside_the_next_resumes_to_the_same_run(
    prefect_server, uninterrupted, project, point
):
    """Iteration 1's close (its registration and promotion record, then its lineage commit)
    runs beside iteration 2; killed there, the run resumes to an uninterrupted run's data,
    weights and decisions, every MLflow run FINISHED and every iteration tagged."""
    layout = RunLayout(project, "data", runs.RUN)
    killed = runs.start(project, 2, prefect_server, kill_at=f"{point}:1")
    assert runs.killed_itself(killed, limit=300)
    assert layout.marker(1, "evaluate").exists()
    assert layout.marker(1, "promote").exists() == (point == "lineage")
    runs.run(project, 2, prefect_server)
    assert runs.outcome(project) == runs.outcome(uninterrupted)
    runs.check_clean(project)
    listed = subprocess.run(
        ["git", "tag", "--list", "tabula/*"], cwd=project, capture_output=True, text=True
    )
    tags = listed.stdout.split()
    assert tags == [f"tabula/{runs.RUN}/iter-{i:04d}" for i in (1, 2)]


def test_a_kill_while_the_games_run_ahead_of_their_flow_resumes_to_the_same_run(
    prefect_server, uninterrupted, project
):
    """Iteration 2's games begin before its flow run does (`tasks.selfplay.play_ahead`, in
    worker processes), while iteration 1's close waits to begin beside them; killed there, the
    run resumes to an uninterrupted run's data, weights and decisions."""
    layout = RunLayout(project, "data", runs.RUN)
    extra = ["selfplay.processes=true"]
    killed = runs.start(project, 2, prefect_server, kill_at="ahead:2", extra=extra)
    assert runs.killed_itself(killed, limit=300)
    assert layout.marker(2, "plan").exists() and not layout.stage_file(2).exists()
    assert layout.marker(1, "evaluate").exists() and not layout.marker(1, "promote").exists()
    runs.run(project, 2, prefect_server, extra=extra)
    assert runs.outcome(project) == runs.outcome(uninterrupted)
    runs.check_clean(project)
