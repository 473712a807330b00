"""SIGKILL in the middle of self-play and of training, then run again: nothing lost or doubled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from flows.pipeline import run_pipeline
from tasks import tracking
from tasks.layout import RunLayout
from tests.flows.conftest import TINY

pytestmark = pytest.mark.slow
TABULA = str(Path(sys.executable).parent / "tabula")


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


def _start(project: Path, iterations: int) -> subprocess.Popen:
    args = [TABULA, "run", "--iterations", str(iterations)]
    for item in TINY:
        args += ["--set", item]
    env = {**os.environ, "PREFECT_API_URL": _api_url(), "PREFECT_LOGGING_LEVEL": "WARNING"}
    return subprocess.Popen(
        args,
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _kill_when(proc: subprocess.Popen, ready: Callable[[], bool], limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while not ready():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the stage never started"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _selfplay_outs(layout: RunLayout, i: int) -> dict:
    lock = yaml.safe_load((layout.iteration(i) / "dvc.lock").read_text())["stages"]
    return {out["path"]: out["md5"] for out in lock["selfplay"]["outs"]}


def test_killed_run_resumes_with_nothing_lost_or_doubled(
    prefect_server, tiny_config, project, tmp_path
):
    layout = RunLayout(project, "data", tiny_config.pipeline.name)
    in_selfplay = lambda: layout.worker(1, 0).exists() and not layout.marker(1, "selfplay").exists()  # noqa: E731
    _kill_when(_start(project, 2), in_selfplay)
    in_training = lambda: layout.model_dir(2).exists() and not layout.marker(2, "train").exists()  # noqa: E731
    _kill_when(_start(project, 2), in_training)
    finish = _start(project, 2)
    assert finish.wait(timeout=600) == 0, finish.stderr.read().decode()[-3000:]

    reference = tmp_path / "reference"
    subprocess.run(["git", "clone", "-q", str(project), str(reference)], check=True)
    for path in ("data", "mlflow", ".dvc", ".dvcignore"):
        subprocess.run(["rm", "-rf", str(reference / path)], check=True)
    run_pipeline(tiny_config, reference, iterations=2)
    expected = RunLayout(reference, "data", tiny_config.pipeline.name)

    for i in (1, 2):  # same positions, byte for byte: same DVC hashes as an uninterrupted run
        assert _selfplay_outs(layout, i) == _selfplay_outs(expected, i)
        assert not list(layout.iteration(i).rglob("*.tmp"))
    client = tracking.connect(tiny_config.pipeline.mlflow_tracking_uri, project)
    exp = client.get_experiment_by_name(f"tabula/{layout.run}")
    runs = client.search_runs([exp.experiment_id])
    kinds = [
        (r.data.tags.get(tracking.TAG_KIND), r.data.tags.get(tracking.TAG_ITERATION)) for r in runs
    ]
    assert sorted(kinds, key=str) == sorted(
        [("pipeline", None), ("iteration", "1"), ("iteration", "2")], key=str
    )
    assert all(r.info.status == "FINISHED" for r in runs)
