"""``tabula reproduce``: rebuild a checkpoint in a fresh clone from DVC and MLflow alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flows.pipeline import run_pipeline
from flows.reproduce import reproduce
from tasks import tracking
from tasks.run.layout import RunLayout

pytestmark = pytest.mark.slow


@pytest.fixture
def clone(prefect_server, tiny_config, project, tmp_path):
    run_pipeline(tiny_config, project, iterations=2)
    fresh = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(project), str(fresh)], check=True)
    subprocess.run(
        ["git", "fetch", "-q", "origin", "refs/heads/tabula/*:refs/heads/tabula/*"],
        cwd=fresh,
        check=True,
    )
    uri = tracking.resolve_uri(tiny_config.pipeline.mlflow_tracking_uri, project)
    remote = str(project / tiny_config.pipeline.dvc_remote)
    return tiny_config, fresh, uri, remote


def test_reproduce_iteration_in_a_fresh_clone_matches(clone):
    cfg, fresh, uri, remote = clone
    assert not (fresh / "data" / cfg.pipeline.name).exists()
    result = reproduce("2", str(fresh), cfg.pipeline.name, uri, remote)
    assert result.match, (result.differences, result.recorded_sha256, result.rebuilt_sha256)
    assert result.iteration == 2 and len(result.recorded_sha256) == 64


def test_reproduce_a_registered_version_and_detect_a_tampered_shard(clone):
    cfg, fresh, uri, remote = clone
    name = cfg.pipeline.registered_model_name()
    assert reproduce(f"models:/{name}/2", str(fresh), cfg.pipeline.name, uri, remote).match
    layout = RunLayout(fresh, cfg.pipeline.data_dir, cfg.pipeline.name)
    shard = sorted(layout.selfplay(2).rglob("*.parquet"))[0]
    _flip_a_byte_of_the_data(shard)
    result = reproduce("2", str(fresh), cfg.pipeline.name, uri, remote)
    assert not result.match
    assert any(layout.rel(layout.selfplay(2)) in line for line in result.differences)


def _flip_a_byte_of_the_data(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))
