"""The model registry registers what it uploads: the checkpoint is copied, the copy's weights
are hashed and exported, and a checkpoint whose weights are not the ones its training recorded
is refused before anything reaches the store (MLflow on SQLite in a temp folder)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from model.checkpoint import load_checkpoint, save_checkpoint
from model.network import make_network, weights_sha256
from tasks import tracking
from tasks.tracking.registry import WeightsChangedError, register_checkpoint

NAME = "tabula-tiny"


def _store(tmp_path: Path):
    client = tracking.connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("x", artifact_location=str(tmp_path / "artifacts"))
    return client, client.create_run(experiment).info.run_id


def test_the_version_holds_and_is_tagged_with_what_was_uploaded(tmp_path, tiny_checkpoint):
    client, run_id = _store(tmp_path)
    checkpoint = shutil.copy(tiny_checkpoint, tmp_path / "model.pt")
    recorded = weights_sha256(load_checkpoint(checkpoint)[0])
    version = register_checkpoint(client, NAME, run_id, Path(checkpoint), recorded, {"k": 1})
    found = client.get_model_version(NAME, version)
    assert found.tags[tracking.TAG_SHA] == recorded and found.tags["k"] == "1"
    uploaded = Path(client.download_artifacts(run_id, "model/extra_files/model.pt", tmp_path))
    assert uploaded.read_bytes() == Path(checkpoint).read_bytes()
    # Registering again finds the version: nothing is uploaded twice.
    assert register_checkpoint(client, NAME, run_id, Path(checkpoint), recorded, {}) == version


def test_weights_other_than_the_recorded_ones_are_refused(tmp_path, tiny_checkpoint):
    client, run_id = _store(tmp_path)
    checkpoint = tmp_path / "iter-0001" / "model" / "model.pt"
    checkpoint.parent.mkdir(parents=True)
    shutil.copy(tiny_checkpoint, checkpoint)
    other = make_network(5, blocks=1, filters=8, seed=1, value_hidden=16)  # valid, not trained
    recorded = weights_sha256(other)
    with pytest.raises(WeightsChangedError, match=f"^{checkpoint}: its weights are not") as err:
        register_checkpoint(client, NAME, run_id, checkpoint, recorded, {})
    assert len(str(err.value).splitlines()) == 1
    assert client.search_model_versions(f"name = '{NAME}'") == []
    assert client.list_artifacts(run_id) == []  # nothing uploaded

    save_checkpoint(checkpoint, other, {"model_id": "tiny"})  # the recorded weights: accepted
    assert str(register_checkpoint(client, NAME, run_id, checkpoint, recorded, {})) == "1"
