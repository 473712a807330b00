"""Where an experiment keeps its artifacts: under a URI (a tracking server's own store, s3)
or under a local folder, one subfolder per experiment either way (MLflow on SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks import tracking


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        ("mlflow-artifacts:/tabula", "mlflow-artifacts:/tabula/tabula_x"),
        ("s3://bucket/mlflow/", "s3://bucket/mlflow/tabula_x"),
    ],
)
def test_an_artifact_uri_gets_one_folder_per_experiment(tmp_path: Path, root, expected):
    client = tracking.connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    found = client.get_experiment(tracking.experiment(client, "tabula/x", root))
    assert found.artifact_location == expected


def test_a_local_artifact_root_is_resolved(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    client = tracking.connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    found = client.get_experiment(tracking.experiment(client, "tabula/x", "mlflow/artifacts"))
    assert Path(found.artifact_location.removeprefix("file://")) == (
        tmp_path / "mlflow" / "artifacts" / "tabula_x"
    )
