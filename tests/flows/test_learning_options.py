"""The learning switches end to end on real Prefect, MLflow and DVC: the Gumbel search and
gating off in a two-iteration run, and the paper's settings they replaced in the quick start;
a run extended past its plan keeps a live rate schedule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flows.pipeline import run_pipeline
from flows.reproduce import reproduce
from model.checkpoint import load_checkpoint
from model.network import GlobalPoolingBlock
from model.shards import read_shard, read_shard_info
from tabula.config import load_config
from tabula.plan import IterationPlan
from tasks import tracking
from tasks.reproduce import redo_train_stage, run_layout
from tasks.run.layout import RunLayout
from tasks.run.markers import champion, finished, read_record
from tasks.run.records import SelfplayRecord, Stage, TrainRecord
from tests.conftest import TINY
from tests.pipeline_runs import GATED

pytestmark = pytest.mark.slow


def test_gumbel_search_without_gating(prefect_server, project):
    """With playout caps (their fast rows recorded) and the root value mixed into the value
    target too."""
    cfg = load_config(None, [*TINY, "search.algorithm=gumbel", "search.gumbel_m=4",
                             "evaluation.gating=false", "selfplay.full_search_fraction=0.5",
                             "selfplay.record_fast_rows=true", "training.value_target_mix=0.5",
                             "pipeline.name=gumbel"])  # fmt: skip
    rows = run_pipeline(cfg, project, iterations=2)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)

    # Gating off: no gate games, every candidate promoted, no gate win rate to show.
    assert [r.promoted for r in rows] == [True, True]
    assert [r.win_rate for r in rows] == [None, None]
    gate = json.loads((layout.match(2) / "gate" / "gate.json").read_text())
    assert gate["reason"] == "gating-off" and gate["games_played"] == 0
    best = champion(layout)
    assert best is not None and best.iteration == 2
    assert all(r.elo is not None for r in rows)  # still rated (games against random)

    # Self-play of iteration 2 used iteration 1's network: the latest, not a gated one.
    shards = sorted(layout.selfplay(2).rglob("*.parquet"))
    assert shards
    info = read_shard_info(shards[0])
    _, metadata = load_checkpoint(layout.model(1))
    assert info.metadata["model_id"] == metadata["model_id"]
    assert info.metadata["policy_target"] == "gumbel-improved-policy"
    rows = [read_shard(s) for s in shards]
    pi = np.concatenate([r.pi for r in rows])
    np.testing.assert_allclose(pi.sum(axis=1), 1.0, rtol=1e-5)
    assert ((pi > 0).sum(axis=1) > cfg.search.simulations).any()  # pi', not 4 visits
    full = np.concatenate([r.full_search for r in rows])
    assert full.any() and not full.all()  # playout caps: some moves had the fast search
    root = np.concatenate([r.root_value for r in rows])
    assert (np.abs(root) <= 1).all() and (root != np.concatenate([r.z for r in rows])).any()


def test_the_papers_search_targets_gate_and_resignation(prefect_server, project):
    """The paper's switches, which the quick start left for the laptop preset's (configs/9x9.yaml
    and the paper preset keep them): PUCT with visit counts as targets, every move searched in full,
    z alone, the gate deciding promotion, resignation at the configured threshold."""
    cfg = load_config(None, [*TINY, *GATED, "search.algorithm=puct",
                             "selfplay.full_search_fraction=1.0", "training.value_target_mix=0.0",
                             "network.aux_heads=false", "pipeline.name=paper"])  # fmt: skip
    rows = run_pipeline(cfg, project, iterations=2)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)

    for i, row in enumerate(rows, start=1):
        gate = json.loads((layout.match(i) / "gate" / "gate.json").read_text())
        assert gate["reason"] == "threshold" and gate["games_played"] == cfg.evaluation.gating_games
        assert row.win_rate == gate["win_rate"]
        assert row.promoted == (gate["win_rate"] > cfg.evaluation.gating_threshold)
    promoted = [r.iteration for r in rows if r.promoted]
    best = champion(layout)
    assert (best.iteration if best is not None else 0) == max(promoted, default=0)

    played = read_record(layout.marker(1, Stage.SELFPLAY.marker_name()), SelfplayRecord)
    assert played is not None and played.v_resign_used == -0.9
    shards = sorted(layout.selfplay(2).rglob("*.parquet"))
    assert shards and read_shard_info(shards[0]).metadata["policy_target"] == "visits"
    records = [read_shard(s) for s in shards]
    assert np.concatenate([r.full_search for r in records]).all()
    net, _ = load_checkpoint(layout.model(2))
    assert not net.aux


def test_an_extended_run_stretches_its_rate_schedule_and_reproduces(prefect_server, project):
    """lr_schedule run: a 2-iteration run drops the rate at 90% of its 8 steps; extended to 4
    iterations, the drop moves to 90% of 16 steps, so iteration 3 trains at the full rate
    again. Each iteration records what it used, and reproduction follows the record."""
    cfg = load_config(None, [*TINY, "training.lr_fractions=[0.9]", "pipeline.iterations=2",
                             "pipeline.name=stretch"])  # fmt: skip
    assert cfg.training.lr_schedule == "run"
    run_pipeline(cfg, project, iterations=2)
    run_pipeline(cfg, project, iterations=4)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    used = {}
    for i in (1, 2, 3, 4):
        record = finished(layout, i, Stage.TRAIN, TrainRecord)
        assert record is not None
        used[i] = (record.trained.result.lr_boundaries, record.trained.result.lr)
    assert used == {1: ((7,), 0.01), 2: ((7,), 0.001), 3: ((14,), 0.01), 4: ((14,), 0.001)}

    uri = tracking.resolve_uri(cfg.pipeline.mlflow_tracking_uri, project)
    remote = str(project / cfg.pipeline.dvc_remote)
    result = reproduce("3", str(project), cfg.pipeline.name, uri, remote)
    assert result.match, (result.differences, result.recorded_sha256, result.rebuilt_sha256)


def test_network_options_end_to_end(prefect_server, project):
    """network.aux_heads: self-play writes each played-out game's final ownership and score
    (consistent with each other: the owned points minus komi are the score), training adds
    the two losses and logs them by step in MLflow, and the checkpoint reproduces; with
    network.global_pooling, network.liberties, network.ladders and network.grow too (one run
    for all: each costs a whole pipeline run): the second iteration grows the network by a
    block."""
    cfg = load_config(None, [*TINY, "network.aux_heads=true", "network.global_pooling=true",
                             "network.liberties=true", "network.ladders=true",
                             "network.blocks=2",
                             "network.grow=[[2,3]]", "selfplay.v_resign=null",
                             "pipeline.name=aux"])  # fmt: skip
    run_pipeline(cfg, project, iterations=2)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    rows = [read_shard(s) for s in sorted(layout.selfplay(2).rglob("*.parquet"))]
    scored = np.concatenate([r.scored for r in rows])
    owner = np.concatenate([r.ownership for r in rows]).astype(np.int64)
    score = np.concatenate([r.score for r in rows])
    side = np.concatenate([r.to_play for r in rows]).astype(np.float64)
    assert scored.any()
    np.testing.assert_allclose(owner[scored].sum(axis=1) - cfg.rules.komi * side[scored],
                               score[scored])  # fmt: skip
    net, metadata = load_checkpoint(layout.model(2))
    assert net.aux and {"ownership", "score"} <= set(metadata["losses"])
    assert isinstance(net.tower[1], GlobalPoolingBlock)
    assert net.shape.liberties and net.shape.ladders  # (self-play and the gate took them too)
    assert net.stem[0].in_channels == 26
    assert net.shape.blocks == 3 and load_checkpoint(layout.model(1))[0].shape.blocks == 2

    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, project)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    runs = client.search_runs([exp.experiment_id], "tags.`tabula.run` = 'aux'")
    logged = {k for r in runs for k in r.data.metrics}
    assert {"loss/ownership", "loss/score"} <= logged, logged

    uri = tracking.resolve_uri(cfg.pipeline.mlflow_tracking_uri, project)
    remote = str(project / cfg.pipeline.dvc_remote)
    result = reproduce("2", str(project), cfg.pipeline.name, uri, remote)
    assert result.match, (result.differences, result.recorded_sha256, result.rebuilt_sha256)


def test_steps_sized_to_the_data_and_held_out_games_reproduce(prefect_server, project):
    """training.samples_per_row: each iteration trains as many steps as its own new rows call
    for (less the held-out game's), and the rate schedule plans on the steps trained so far;
    training.holdout_games: the newest game of each iteration's self-play is measured instead
    of trained on, its losses in the record and in MLflow; reproduction replays both. With
    the playout caps as KataGo runs them: quiet fast searches whose rows are not recorded, so
    the rows counted are full searches' only, and reduced visits in decided positions; the full
    rows weighted by their policy surprise (weights above 1 through training and reproduction)."""
    cfg = load_config(None, [*TINY, "training.samples_per_row=2.0", "training.holdout_games=1",
                             "training.lr_fractions=[0.9]", "selfplay.full_search_fraction=0.5",
                             "selfplay.quiet_fast_searches=true", "selfplay.record_fast_rows=false",
                             "selfplay.decided_threshold=0.05", "selfplay.decided_lookback=1",
                             "selfplay.policy_surprise_weight=0.5",
                             "pipeline.name=sized"])  # fmt: skip
    run_pipeline(cfg, project, iterations=2)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    trained = {}
    for i in (1, 2):
        shards = [read_shard(s) for s in sorted(layout.selfplay(i).rglob("*.parquet"))]
        assert all(s.full_search.all() for s in shards)  # the fast searches' rows left out
        assert any((s.weight > 1.0).any() for s in shards)  # the surprising rows
        selfplay = finished(layout, i, Stage.SELFPLAY, SelfplayRecord)
        assert selfplay is not None  # reduced visits: decided moves' searches are fast too,
        assert sum(len(s.z) for s in shards) < 0.45 * selfplay.positions  # the draw alone: 0.5
        ids, first = np.unique(shards[-1].game_id, return_index=True)
        held = int((shards[-1].game_id == ids[first.argmax()]).sum())  # the newest game's rows
        rows = sum(len(s.z) for s in shards) - held
        record = finished(layout, i, Stage.TRAIN, TrainRecord)
        assert record is not None
        result = trained[i] = record.trained.result
        assert result.steps == math.ceil(rows * 2.0 / cfg.training.batch_size), (rows, result)
        assert result.held_out_positions == held
        vals = (result.val_loss, result.val_value_loss, result.val_policy_loss)
        assert all(v is not None and math.isfinite(v) for v in vals), vals
    assert trained[2].global_step == trained[1].steps + trained[2].steps
    plan = finished(layout, 2, Stage.PLAN, IterationPlan)
    assert plan is not None and plan.train is not None
    # iteration 1's count, once more: lr_fractions of the steps trained and one more such
    total = trained[1].global_step + trained[1].steps
    expected = tuple(round(f * total) for f in cfg.training.lr_fractions)
    assert plan.train.lr_boundaries == expected

    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, project)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    runs = client.search_runs([exp.experiment_id], "tags.`tabula.run` = 'sized'")
    logged = {k for r in runs for k in r.data.metrics}
    assert {"val/loss", "val/value_loss", "val/policy_loss", "loss"} <= logged, logged
    assert {"train/val_loss", "train/held_out_positions"} <= logged, logged

    uri = tracking.resolve_uri(cfg.pipeline.mlflow_tracking_uri, project)
    remote = str(project / cfg.pipeline.dvc_remote)
    verdict = reproduce("2", str(project), cfg.pipeline.name, uri, remote)
    assert verdict.match, (verdict.differences, verdict.recorded_sha256, verdict.rebuilt_sha256)
    staged = redo_train_stage(*run_layout(layout.params), 2)  # what `dvc repro` runs
    assert staged.match, (staged.differences, staged.recorded_sha256, staged.rebuilt_sha256)
