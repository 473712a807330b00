"""Two iterations end to end on real Prefect, MLflow and DVC; resume; the run lock."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from flows.pipeline import _plays, closed_row, run_pipeline
from tabula.config import config_to_flat_dict, parse_config
from tasks import tracking, versioning
from tasks.run.layout import RunLayout, RunLock, RunLockedError

pytestmark = pytest.mark.slow


@pytest.fixture
def two_iterations(prefect_server, tiny_config, project):
    rows = run_pipeline(tiny_config, project, iterations=2)
    return tiny_config, project, rows


def test_two_iterations_leave_everything_traceable(two_iterations):
    cfg, project, rows = two_iterations
    assert [r.iteration for r in rows] == [1, 2]
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)

    # MLflow: a parent run with two iteration children, metrics, datasets, model versions.
    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, project)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get(tracking.TAG_KIND) == "pipeline"]
    children = [r for r in runs if r.data.tags.get(tracking.TAG_KIND) == "iteration"]
    assert len(parents) == 1 and len(children) == 2
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    child = next(c for c in children if c.data.tags[tracking.TAG_ITERATION] == "2")
    assert {"selfplay/positions", "eval/score_vs_random", "elo"} <= set(child.data.metrics)
    assert {"cpu/selfplay_s", "wall/selfplay_s", "busy/train", "busy/iteration"} <= set(
        child.data.metrics
    )
    assert "rules.board_size" in child.data.params
    pictures = {a.path for a in client.list_artifacts(child.info.run_id, "pictures")}
    assert pictures == {"pictures/selfplay.svg", "pictures/anchor-random.svg"}  # (random only)
    assert child.data.tags.get("git_commit")
    sha = child.data.tags["git_commit"].removesuffix("-dirty")
    assert child.data.tags.get("mlflow.source.git.commit") == sha  # MLflow's own tag
    assert exp.name == "tabula" and exp.tags["mlflow.experimentKind"] == "custom_model_development"
    inputs = child.inputs.dataset_inputs
    digests = {d.dataset.name: d.dataset.digest for d in inputs}
    assert "selfplay-iter-0002" in digests and "selfplay-iter-0001" in digests
    lock = (layout.iteration(2) / "dvc.lock").read_text()
    assert all(d[:8] in lock for d in digests.values())
    name = cfg.pipeline.registered_model_name()
    versions = client.search_model_versions(f"name = '{name}'")
    assert len(versions) == 2
    champion = (
        client.get_model_version_by_alias(name, "champion")
        if any(r.promoted for r in rows)
        else None
    )
    if champion is not None:
        assert champion.tags["tabula.run"] == layout.run

    # DVC: everything committed and pushed, lineage names the window.
    assert versioning.status(project) == {}
    train_deps = versioning.stage_deps(project, layout.stage_file(2), "train")
    assert layout.rel(layout.selfplay(1)) in train_deps
    assert layout.rel(layout.selfplay(2)) in train_deps
    assert layout.rel(layout.model_dir(1)) in train_deps
    dvc = str(Path(sys.executable).parent / "dvc")  # the venv's, whether or not it is on PATH
    dag = subprocess.run([dvc, "dag", "--md"], cwd=project, capture_output=True, text=True)
    assert "iter-0002" in dag.stdout

    # Git: the user's branch is untouched; the run branch and tags hold the lineage.
    head = subprocess.run(
        ["git", "log", "--oneline", "main"], cwd=project, capture_output=True, text=True
    ).stdout
    assert len(head.strip().splitlines()) == 1
    branch = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", f"tabula/runs/{layout.run}"],
        cwd=project,
        capture_output=True,
        text=True,
    ).stdout
    assert f"data/{layout.run}/iter-0002/dvc.lock" in branch
    assert f"data/{layout.run}/uid" in branch.splitlines()  # a clone resumes as this run
    tags = subprocess.run(["git", "tag"], cwd=project, capture_output=True, text=True).stdout
    assert f"tabula/{layout.run}/iter-0002" in tags

    # Prefect: the iteration's markdown artifact exists.
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as prefect:
        artifact = prefect.read_latest_artifacts()
        keys = {a.key for a in artifact}
    assert f"{layout.run}-iter-0002" in keys


def _flow_runs(name: str) -> int:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    only = FlowRunFilter(name=FlowRunFilterName(any_=[name]))
    with get_client(sync_client=True) as prefect:
        return len(prefect.read_flow_runs(flow_run_filter=only))


def test_rerun_finds_finished_work(two_iterations):
    cfg, project, rows = two_iterations
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    before = {p: p.stat().st_mtime_ns for p in layout.root.rglob("*.parquet")}
    # Self-play's worker processes start with a run that plays, not with a finished one.
    assert not _plays(cfg, layout, 2, None, None, 0.0)
    assert _plays(cfg, layout, 3, None, None, 0.0)
    flows = [_flow_runs(f"{layout.run}-iter-{i}") for i in (1, 2)]
    again = run_pipeline(cfg, project, iterations=2)
    assert [repr(r) for r in again] == [repr(r) for r in rows]  # (repr: nan == nan)
    after = {p: p.stat().st_mtime_ns for p in layout.root.rglob("*.parquet")}
    assert before == after  # nothing recomputed
    # The last two iterations run their flows again (an iteration's close runs beside the
    # next one, so only a stage file two iterations on says it ended): every stage found.
    assert closed_row(layout, 1) is None and closed_row(layout, 2) is None
    assert [_flow_runs(f"{layout.run}-iter-{i}") for i in (1, 2)] == [f + 1 for f in flows]
    # One iteration more, then the same command again: iteration 1 is closed now (iteration 3
    # began), so its row comes from its records, with no flow run the second time.
    assert [r.iteration for r in run_pipeline(cfg, project, iterations=3)] == [1, 2, 3]
    closed = closed_row(layout, 1)
    assert closed is not None
    elo = {"elo": rows[0].elo, "elo_low": rows[0].elo_low, "elo_high": rows[0].elo_high}
    assert repr(replace(closed, **elo)) == repr(rows[0])
    ran = [_flow_runs(f"{layout.run}-iter-{i}") for i in (1, 2, 3)]
    assert [r.iteration for r in run_pipeline(cfg, project, iterations=3)] == [1, 2, 3]
    assert {p: p.stat().st_mtime_ns for p in before} == before
    again_ran = [_flow_runs(f"{layout.run}-iter-{i}") for i in (1, 2, 3)]
    assert again_ran == [ran[0], ran[1] + 1, ran[2] + 1]


def test_second_pipeline_on_the_same_run_is_refused(tiny_config, project):
    layout = RunLayout(project, tiny_config.pipeline.data_dir, tiny_config.pipeline.name)
    with RunLock(layout), pytest.raises(RunLockedError, match="already running"):
        run_pipeline(tiny_config, project, iterations=1)


def test_changed_config_on_resume_is_refused(prefect_server, tiny_config, project):
    from tabula.config import ConfigError

    layout = RunLayout(project, tiny_config.pipeline.data_dir, tiny_config.pipeline.name)
    layout.root.mkdir(parents=True)
    from tasks.frozen_config import freeze_config

    freeze_config(tiny_config, layout)
    changed = tiny_config.model_copy(
        update={"search": tiny_config.search.model_copy(update={"simulations": 7})}
    )
    with pytest.raises(ConfigError, match="search.simulations"):
        freeze_config(changed, layout)
    longer = tiny_config.model_copy(
        update={"pipeline": tiny_config.pipeline.model_copy(update={"iterations": 50})}
    )
    assert freeze_config(longer, layout) == layout.params.read_text()  # only more iterations
    moved = tiny_config.model_copy(
        update={
            "pipeline": tiny_config.pipeline.model_copy(
                update={
                    "dask_address": "tcp://10.0.0.5:8786",
                    "prefect_api_url": "http://h:4200/api",
                }
            )
        }
    )
    text = freeze_config(moved, layout)  # the cluster moved: resumed there, the file kept
    resumed = parse_config(text, source="resumed")
    assert resumed.pipeline.dask_address == "tcp://10.0.0.5:8786"
    assert resumed.pipeline.prefect_api_url == "http://h:4200/api"
    assert config_to_flat_dict(resumed.model_copy(update={"pipeline": tiny_config.pipeline})) == (
        config_to_flat_dict(tiny_config)
    )
    assert parse_config(layout.params.read_text(), source="f").pipeline.dask_address is None
    # Frozen before files said their format (format 1), with the same values: resumes.
    old = "".join(line for line in layout.params.read_text().splitlines(keepends=True)
                  if "config_version" not in line)  # fmt: skip
    layout.params.write_text(old)
    assert parse_config(old, source="old").pipeline.config_version == 1
    assert freeze_config(tiny_config, layout) == old
