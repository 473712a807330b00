"""The cluster path: self-play fanned out to a Dask cluster, and the Prefect deployment.

The Dask test is real: a ``LocalCluster`` of two worker processes (one thread each), the
session's Prefect server, MLflow on SQLite and DVC with a local remote. Its self-play must run
in the Dask workers' processes and give the same shards (the same DVC hash) as a local run.
The deployment test registers ``prefect.yaml`` with ``prefect deploy`` and has a worker of the
process pool run a tiny pipeline from it, as ``README`` ("Scaling out") tells a user to.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.clone import empty_project
from flows.pipeline import run_pipeline
from tabula.config import Config
from tasks import tracking, versioning
from tasks.run.layout import RunLayout, read_json
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]


def _selfplay_outs(layout: RunLayout, i: int) -> dict[str, str]:
    lock = yaml.safe_load((layout.iteration(i) / "dvc.lock").read_text())["stages"]
    return {out["path"]: out["md5"] for out in lock["selfplay"]["outs"]}


def _fresh_project(tmp_path: Path, name: str) -> Path:
    return empty_project(tmp_path / name)


def test_config_and_layout_cross_process_boundaries(tiny_config: Config, tmp_path: Path):
    """Dask pickles a task's arguments to send them to a worker."""
    layout = RunLayout(tmp_path, "data", "tiny")
    assert pickle.loads(pickle.dumps(tiny_config)) == tiny_config
    assert pickle.loads(pickle.dumps(layout)) == layout


@pytest.mark.slow
def test_selfplay_runs_on_dask_workers_and_matches_a_local_run(
    prefect_server, tiny_config, project, tmp_path
):
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        worker_pids = set(client.run(os.getpid).values())
        rows = run_pipeline(
            tiny_config, project, iterations=1, dask_address=cluster.scheduler_address
        )
    assert [r.iteration for r in rows] == [1]
    layout = RunLayout(project, tiny_config.pipeline.data_dir, tiny_config.pipeline.name)

    # Each self-play worker task ran in a Dask worker process, not in the flow's.
    ran_in = {
        read_json(layout.marker(1, f"selfplay-w{w:02d}"))["pid"]
        for w in range(tiny_config.selfplay.workers)
    }
    assert ran_in <= worker_pids and os.getpid() not in ran_in

    # Same shards as a local run of the same config: the same DVC hash.
    local = _fresh_project(tmp_path, "local")
    run_pipeline(tiny_config, local, iterations=1)
    reference = RunLayout(local, tiny_config.pipeline.data_dir, tiny_config.pipeline.name)
    assert _selfplay_outs(layout, 1) == _selfplay_outs(reference, 1)

    # MLflow and DVC as usual: an iteration run with self-play metrics, everything pushed.
    client = tracking.connect(tiny_config.pipeline.mlflow_tracking_uri, project)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    runs = client.search_runs([exp.experiment_id])
    child = next(r for r in runs if r.data.tags.get(tracking.TAG_KIND) == "iteration")
    assert child.data.metrics["selfplay/games"] == tiny_config.selfplay.games
    assert versioning.status(project) == {}

    # Prefect saw the worker tasks finish, though they ran in other processes.
    states = _task_states(child.data.tags["prefect.flow_run_id"])
    assert states["selfplay-i1-w0"] == states["selfplay-i1-w1"] == "COMPLETED", states


def test_a_dask_worker_plays_on_the_threads_it_was_started_with(tiny_config):
    """Its own share of its own machine (``dask worker --nthreads``), not the flow machine's
    cores over the run's workers."""
    from distributed import Client, LocalCluster

    from tabula.plan import torch_threads
    from tasks.selfplay import worker_threads

    one = tiny_config.model_copy(
        update={"selfplay": tiny_config.selfplay.model_copy(update={"workers": 1})}
    )
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=3, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        assert client.submit(worker_threads, one, pure=False).result() == 3
    assert worker_threads(one) == torch_threads(1)


def _task_states(flow_run_id: str) -> dict[str, str]:
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId

    only = TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[UUID(flow_run_id)]))
    with get_client(sync_client=True) as prefect:
        runs = prefect.read_task_runs(task_run_filter=only)
    return {r.name: r.state.type.value for r in runs if r.state is not None}


def test_deployment_entry_point_matches_prefect_yaml():
    """prefect.yaml loads, and each deployment's entry point imports with its parameters."""
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert spec["deployments"]
    for deployment in spec["deployments"]:
        path, name = deployment["entrypoint"].split(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        params = inspect.signature(getattr(module, name).fn).parameters
        assert set(deployment.get("parameters", {})) <= set(params)
        assert deployment["work_pool"]["name"] == "tabula-process"
    from flows.deploy import scheduled_pipeline

    params = inspect.signature(scheduled_pipeline.fn).parameters
    assert list(params) == [
        "config", "iterations", "more", "name", "dask_address", "overrides", "project"
    ]  # fmt: skip


@pytest.mark.slow
def test_deployment_runs_the_pipeline_through_a_process_worker(prefect_server, project):
    """``prefect deploy`` reads prefect.yaml; a worker of the pool runs a tiny pipeline."""
    from prefect.client.orchestration import get_client

    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_server,
        "TABULA_PROJECT": str(ROOT),
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    prefect = str(Path(sys.executable).parent / "prefect")
    for args in (
        ["work-pool", "create", "tabula-process", "--type", "process", "--overwrite"],
        ["--no-prompt", "deploy", "--name", "quickstart"],
    ):
        done = subprocess.run(
            [prefect, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    parameters = {
        "config": "",
        "iterations": 1,
        "name": "tiny",
        "overrides": TINY,
        "project": str(project),
    }
    layout = RunLayout(project, "data", "tiny")
    # A run given iterations goes to that total; the schedule's runs give none, and the
    # deployment's `more: 1` adds one iteration each time.
    for given, reached in ((parameters, 1), ({k: v for k, v in parameters.items()
                                              if k != "iterations"}, 2)):  # fmt: skip
        with get_client(sync_client=True) as client:
            deployment = client.read_deployment_by_name("tabula-scheduled-pipeline/quickstart")
            assert deployment.parameters["more"] == 1
            run = client.create_flow_run_from_deployment(deployment.id, parameters=given)
        worker = subprocess.run([prefect, "worker", "start", "--pool", "tabula-process",
                                 "--run-once"], cwd=project, env=env, capture_output=True,
                                text=True, timeout=600)  # fmt: skip
        assert worker.returncode == 0, worker.stderr[-3000:]
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(run.id).state
        assert state is not None and state.is_completed(), (state, worker.stderr[-3000:])
        assert layout.marker(reached, "promote").exists()
        assert not layout.marker(reached + 1, "promote").exists()
