"""MLflow as its users expect it: ``MLFLOW_TRACKING_URI`` honoured, every run of a project in
one experiment (marked as model training), each run with its own registered model and
``champion``, and each checkpoint an MLflow PyTorch model that ``mlflow.pytorch.load_model``
loads from ``models:/NAME@champion`` with the outputs of the network ``tabula gtp`` plays (its
ownership and score heads included).
Two real ``tabula run`` subprocesses (no gating, so each promotes) against one SQLite store
outside the project."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from cli.clone import empty_project
from model.checkpoint import load_checkpoint
from model.files import file_sha256
from model.network import weights_sha256
from tabula.errors import UsageError
from tasks import tracking
from tasks.run.layout import RunLayout
from tasks.run.markers import champion
from tests import pipeline_runs as runs

pytestmark = pytest.mark.slow

RUNS = ("tiny", "tiny-b")


@pytest.fixture(scope="module")
def store(prefect_server, tmp_path_factory):
    """Two one-iteration runs of one project, tracked where ``MLFLOW_TRACKING_URI`` says."""
    root = tmp_path_factory.mktemp("mlflow-project")
    project = runs.clone(empty_project(root / "user"), root / "project")
    uri = f"sqlite:///{root / 'elsewhere' / 'mlflow.db'}"
    for name in RUNS:
        extra = [f"pipeline.name={name}", "evaluation.gating=false"]
        runs.run(project, 1, prefect_server, extra=extra, env={"MLFLOW_TRACKING_URI": uri})
    return project, uri


def test_the_environment_names_the_store(store):
    project, uri = store
    assert not (project / "mlflow" / "mlflow.db").exists()
    client = tracking.connect(uri)
    exp = client.get_experiment_by_name(tracking.EXPERIMENT)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    parents = client.search_runs([exp.experiment_id], f"tags.`{tracking.TAG_KIND}` = 'pipeline'")
    assert sorted(r.data.tags[tracking.TAG_RUN] for r in parents) == sorted(RUNS)
    assert {e.name for e in client.search_experiments()} == {tracking.EXPERIMENT, "Default"}


def test_each_run_keeps_its_champion(store):
    project, uri = store
    client = tracking.connect(uri)
    for name in RUNS:
        version = client.get_model_version_by_alias(f"tabula-{name}", "champion")
        assert version.tags[tracking.TAG_RUN] == name
        layout = RunLayout(project, "data", name)
        best = champion(layout)
        assert best is not None and (best.iteration, str(best.version)) == (1, str(version.version))
        net, _ = load_checkpoint(layout.model(1))
        assert version.tags[tracking.TAG_SHA] == weights_sha256(net)


def test_the_champion_loads_as_an_mlflow_pytorch_model(store, tmp_path, monkeypatch):
    import mlflow.pytorch

    import mlflow

    project, uri = store
    # As a user's script would. MLflow's setter also writes MLFLOW_TRACKING_URI into this
    # process's environment, which monkeypatch restores after the test.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    loaded = mlflow.pytorch.load_model(f"models:/tabula-{RUNS[1]}@champion")
    info = mlflow.models.get_model_info(f"models:/tabula-{RUNS[1]}@champion")
    # The run's networks have the ownership and score heads: the model gives them too.
    names = ["policy", "value", "ownership", "score"]
    assert [s.name for s in info.signature.outputs.inputs] == names
    assert info.metadata[tracking.TAG_RUN] == RUNS[1]

    # What `tabula gtp --model models:/tabula-tiny-b@champion` plays: the checkpoint behind it.
    layout = RunLayout(project, "data", RUNS[1])
    path, _ = tracking.resolve_model(f"models:/tabula-{RUNS[1]}@champion", uri, project, tmp_path)
    assert file_sha256(path) == file_sha256(layout.model(1))
    net, _ = load_checkpoint(path)
    planes = net.shape.inputs.planes  # (23 with the liberty planes: the quick start's)
    x = torch.from_numpy(np.random.default_rng(0).random((5, planes, 5, 5), np.float32))
    with torch.no_grad():
        expected, got = net.forward_aux(x), loaded(x)
    assert torch.allclose(got[0], expected[0], atol=1e-6)
    assert torch.allclose(got[1], expected[1], atol=1e-6)
    assert torch.allclose(got[2], expected[2], atol=1e-6)
    assert torch.allclose(got[3], expected[3] * 25, atol=1e-5)  # the margin, in points


# A user's process with no tabula code in reach: the editable install's finder taken out, run
# from a folder of its own, so that only MLflow and torch can load the model.
WITHOUT_TABULA = """
import importlib.util, sys
ours = "__editable__"
sys.meta_path = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith(ours)]
sys.path_hooks = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith(ours)]
sys.path_importer_cache.clear()
for name in ("tabula", "model", "tasks", "flows", "cli"):
    assert importlib.util.find_spec(name) is None, name
import mlflow.pytorch, torch
net = mlflow.pytorch.load_model(sys.argv[1])
policy, value, ownership, score = net(torch.zeros(2, 23, 5, 5))  # 17 + 6 liberty planes
print(tuple(policy.shape), tuple(value.shape), tuple(ownership.shape), tuple(score.shape))
"""


def test_the_champion_loads_where_no_tabula_code_is(store, tmp_path):
    _, uri = store
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI")}
    argv = [sys.executable, "-c", WITHOUT_TABULA, f"models:/tabula-{RUNS[0]}@champion"]
    ran = subprocess.run(
        argv, cwd=tmp_path, env={**env, "MLFLOW_TRACKING_URI": uri}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().splitlines()[-1] == "(2, 26) (2,) (2, 25) (2,)"


def test_checkpoints_are_logged_models_with_their_elo_the_champion_first(store):
    """The experiment's Models tab: one logged model per checkpoint, named after its
    iteration, with its Elo (the run's scale) and anchor scores linked; ranked by Elo within
    a run, the champion comes first."""
    _, uri = store
    client = tracking.connect(uri)
    experiment = client.get_experiment_by_name(tracking.EXPERIMENT).experiment_id
    by_elo = [{"field_name": "metrics.elo", "ascending": False}]
    models = client.search_logged_models([experiment], order_by=by_elo)
    assert sorted(m.name for m in models) == sorted(f"tabula-{r}-iter-0001" for r in RUNS)
    for name in RUNS:
        own = [m for m in models if m.tags.get(tracking.TAG_RUN) == name]
        linked = {m.key for m in own[0].metrics or []}
        assert {"elo", "eval/score_vs_random"} <= linked, linked
        champion_version = client.get_model_version_by_alias(f"tabula-{name}", "champion")
        assert champion_version.source == f"models:/{own[0].model_id}"
    elos = [next(m.value for m in model.metrics if m.key == "elo") for model in models]
    assert elos == sorted(elos, reverse=True)


def test_an_unknown_model_is_one_line(store, tmp_path):
    project, uri = store
    with pytest.raises(UsageError, match=r"models:/nope@champion: .*tabula-tiny"):
        tracking.resolve_model("models:/nope@champion", uri, project, tmp_path)
