"""Prefect as a control room: after a real ``tabula run`` (a subprocess with the CLI's own
Prefect settings), the Prefect API holds the iteration flow run's stage lines in its logs and a
progress artifact at 100% naming the iteration's MLflow run, while the terminal got none of
those lines."""

from __future__ import annotations

import pytest

from tests import pipeline_runs as runs

pytestmark = pytest.mark.slow


def test_stage_logs_and_progress_reach_the_prefect_api(prefect_server, project):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterKey,
        FlowRunFilter,
        FlowRunFilterName,
        LogFilter,
        LogFilterFlowRunId,
    )

    stderr = runs.run(project, 1, prefect_server)
    with get_client(sync_client=True) as client:
        named = FlowRunFilter(name=FlowRunFilterName(any_=[f"{runs.RUN}-iter-1"]))
        ours = [
            f
            for f in client.read_flow_runs(flow_run_filter=named)
            if f.parameters.get("project") == str(project)
        ]  # (the server is shared)
        (flow_run,) = ours
        only = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id]))
        messages = [log.message for log in client.read_logs(log_filter=only)]
        key = f"{runs.RUN}-iter-0001-progress"
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key])))  # fmt: skip
        (artifact,) = [a for a in artifacts if a.flow_run_id == flow_run.id]
    for start in ("self-play: ", "training: ", "evaluation: gate ", "promotion: "):
        lines = [m for m in messages if m.startswith(start)]
        assert len(lines) == 1, (start, messages)
        assert start not in stderr  # the run loggers' INFO lines stay off the terminal
    assert any(m.startswith(f"iteration 1 of {runs.RUN}: MLflow run ") for m in messages)
    assert artifact.type == "progress" and float(artifact.data) == 100.0
    assert "MLflow run " in (artifact.description or "")
