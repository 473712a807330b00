"""The model registry registers what it uploads: the checkpoint is copied, the copy's weights
are hashed and exported, and a checkpoint whose weights are not the ones its training recorded
is refused before anything reaches the store (MLflow on SQLite in a temp folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from mlflow.artifacts import download_artifacts

from model.checkpoint import load_checkpoint, save_checkpoint
from model.network import make_network, weights_sha256
from tasks import tracking
from tasks.tracking.registry import WeightsChangedError, logged_model_id, register_checkpoint
from tasks.tracking.runs import write_metrics

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
    assert found.source == f"models:/{logged_model_id(found)}"  # the version is the logged model
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    location = client.get_logged_model(logged_model_id(found)).artifact_location
    local = Path(download_artifacts(location, dst_path=str(tmp_path / "d"), tracking_uri=uri))
    assert (local / "extra_files" / "model.pt").read_bytes() == Path(checkpoint).read_bytes()
    # Registering again finds the version: nothing is uploaded twice.
    assert register_checkpoint(client, NAME, run_id, Path(checkpoint), recorded, {}) == version
    assert len(_models(client, run_id)) == 1


def _models(client, run_id: str) -> list:
    """Every logged model of ``run_id``'s experiment."""
    experiment = client.get_run(run_id).info.experiment_id
    return list(client.search_logged_models([experiment]))


def test_registration_leaves_the_default_store_and_the_environment_as_they_were(
    tmp_path, tiny_checkpoint, monkeypatch
):
    """A training stage leaves MLflow's default store set (Lightning's logger sets it); a
    registration must put it back without writing it into ``MLFLOW_TRACKING_URI``, or every
    process started later (the next ``tabula run``) would use that store."""
    import mlflow

    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # (put back after the test)
    mlflow.set_tracking_uri(elsewhere)
    os.environ.pop("MLFLOW_TRACKING_URI")  # the logger removes what the setter wrote
    try:
        client, run_id = _store(tmp_path)
        checkpoint = Path(shutil.copy(tiny_checkpoint, tmp_path / "model.pt"))
        recorded = weights_sha256(load_checkpoint(checkpoint)[0])
        register_checkpoint(client, NAME, run_id, checkpoint, recorded, {})
        assert "MLFLOW_TRACKING_URI" not in os.environ
        assert mlflow.get_tracking_uri() == elsewhere
    finally:
        mlflow.set_tracking_uri(None)


def test_checkpoints_are_logged_models_ranked_by_their_linked_elo(tmp_path, tiny_checkpoint):
    """What the experiment's Models tab shows: one logged model per checkpoint, named after
    its iteration, with the metrics linked to it; a kill between the logged model and the
    version reuses the model."""
    client, run_id = _store(tmp_path)
    experiment = client.get_run(run_id).info.experiment_id
    checkpoint = Path(shutil.copy(tiny_checkpoint, tmp_path / "model.pt"))
    recorded = weights_sha256(load_checkpoint(checkpoint)[0])
    second = client.create_run(experiment).info.run_id
    for run, i, elo in ((run_id, 1, 40.0), (second, 2, 90.0)):
        tags = {tracking.TAG_ITERATION: str(i)}
        version = register_checkpoint(client, NAME, run, checkpoint, recorded, tags)
        model_id = logged_model_id(client.get_model_version(NAME, version))
        write_metrics(client, run, {"elo": elo}, i, model_id=model_id)
    ranked = client.search_logged_models(
        [experiment], order_by=[{"field_name": "metrics.elo", "ascending": False}]
    )
    assert [m.name for m in ranked] == [f"{NAME}-iter-0002", f"{NAME}-iter-0001"]
    assert [(m.metrics[0].key, m.metrics[0].value) for m in ranked] == [
        ("elo", 90.0),
        ("elo", 40.0),
    ]
    assert [m.source_run_id for m in ranked] == [second, run_id]
    # the version lost to a kill: registering again makes it from the model already logged
    client.delete_model_version(NAME, "2")
    assert str(register_checkpoint(client, NAME, second, checkpoint, recorded, {})) == "3"
    assert logged_model_id(client.get_model_version(NAME, "3")) == ranked[0].model_id
    assert len(_models(client, run_id)) == 2


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
