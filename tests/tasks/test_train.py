"""One training stage end to end: export with lineage, resume, determinism, refusals."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from model.checkpoint import load_checkpoint, save_checkpoint
from model.datamodule import synthetic_records
from model.files import file_sha256
from model.network import make_network, weights_sha256
from model.shards import ShardError, write_shard
from tabula.config import load_config
from tabula.plan import RunState, TrainSpec, next_iteration
from tasks.tracking.logger import lightning_logger
from tasks.train import TrainError, train_stage

N = 5
OVERRIDES = [
    "rules.board_size=5",
    "network.blocks=1",
    "network.filters=8",
    "network.value_hidden=16",
    "training.batch_size=32",
    "training.checkpoint_every=4",
    "training.lr_boundaries=[6]",
    "training.lr_values=[0.05,0.005]",
    "training.window_games=8",
    "training.deterministic=true",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    for it in range(2):
        rec = synthetic_records(N, 8, 6, seed=it, iteration=it, prefix=f"i{it}-")
        write_shard(root / f"iter-{it}" / "worker-00.parquet", rec)
    return root


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, OVERRIDES)


def _spec(cfg, window: list[Path], **kw) -> TrainSpec:
    """A stage's spec: 5 steps, seed 11, the schedule of the config's run unless ``kw`` says."""
    planned = next_iteration(cfg.training, RunState.first(cfg.pipeline.iterations))
    window_ = tuple(str(w) for w in window)
    args = dict(iteration=0, window=window_, parent=0, seed=11, steps=5, bf16=None)
    args["lr_boundaries"] = planned.lr_boundaries
    return TrainSpec(**{**args, **kw})


def _stage(
    cfg, data: Path, out: Path, *, init=None, logger=None, model_id=None, progress=False, **spec
):
    """``train_stage`` on ``data`` into ``out/model.pt``; ``spec``: `TrainSpec` fields."""
    where = dict(init=init, logger=logger, model_id=model_id, progress=progress)
    return train_stage(cfg, _spec(cfg, [data], **spec), out / "model.pt", **where)


def test_export_carries_lineage_and_loads_weights_only(cfg, data: Path, tmp_path: Path) -> None:
    result = _stage(cfg, data, tmp_path / "a", model_id="run/iter-0001")
    assert result.global_step == 5 and result.ckpt == tmp_path / "a" / "train.ckpt"
    assert result.ckpt.is_file() and result.samples_per_s > 0
    assert result.games == 8 and result.positions == 48
    assert np.isfinite([result.loss, result.value_loss, result.policy_loss, result.l2_loss]).all()
    net, meta = load_checkpoint(result.model, expect_board_size=N)
    assert weights_sha256(net) == result.weights_sha256
    assert meta["model_id"] == "run/iter-0001" and meta["parent"] is None
    assert meta["seed"] == 11 and meta["global_step"] == 5 and meta["steps"] == 5
    assert meta["config"]["training"]["lr_boundaries"] == [6]
    shards = {Path(s["path"]).parent.name: s for s in meta["shards"]}
    assert set(shards) == {"iter-0", "iter-1"}
    assert shards["iter-0"]["sha256"] == file_sha256(Path(shards["iter-0"]["path"]))
    assert not shards["iter-0"]["used"] and shards["iter-1"]["used"]  # 8 most recent games
    assert meta["window"] == {"positions": 48, "games": 8, "iterations": [1], "dropped_games": 0}
    torch.load(result.model, weights_only=True)  # plain payload, as the GTP engine loads it
    assert result.to_dict()["model"] == str(result.model)


def test_same_inputs_and_seed_give_bit_identical_weights(cfg, data: Path, tmp_path: Path) -> None:
    a = _stage(cfg, data, tmp_path / "a")
    b = _stage(cfg, data, tmp_path / "b")
    c = _stage(cfg, data, tmp_path / "c", seed=12)
    assert a.weights_sha256 == b.weights_sha256
    assert file_sha256(a.model) != "" and a.weights_sha256 != c.weights_sha256
    # And through a resume: the same parent .ckpt, data and seed rebuild the same child.
    a2 = _stage(cfg, data, tmp_path / "a2", init=a.ckpt, seed=5)
    b2 = _stage(cfg, data, tmp_path / "b2", init=b.ckpt, seed=5)
    assert a2.weights_sha256 == b2.weights_sha256


def test_resume_continues_global_step_momentum_and_schedule(
    cfg, data: Path, tmp_path: Path
) -> None:
    first = _stage(cfg, data, tmp_path / "1")
    second = _stage(cfg, data, tmp_path / "2", init=first.ckpt, steps=4)
    assert second.global_step == 9
    ck = torch.load(second.ckpt, weights_only=True)
    assert ck["global_step"] == 9
    group = ck["optimizer_states"][0]["param_groups"][0]
    assert group["lr"] == 0.005 and group["weight_decay"] == 0.0  # step 8 is past boundary 6
    assert ck["optimizer_states"][0]["state"]  # momentum buffers carried on
    _, meta = load_checkpoint(second.model)
    assert meta["parent"] == {"path": str(first.ckpt), "sha256": file_sha256(first.ckpt)}


def test_an_exported_model_starts_weights_and_schedule_at_its_step(
    cfg, data: Path, tmp_path: Path
) -> None:
    net = make_network(N, 1, 8, seed=3, value_hidden=16, aux=cfg.network.aux_heads,
                       liberties=cfg.network.liberties)  # fmt: skip
    start = save_checkpoint(tmp_path / "init.pt", net, {"global_step": 6})
    result = _stage(cfg, data, tmp_path / "x", init=start, steps=2)
    assert result.global_step == 8
    ck = torch.load(result.ckpt, weights_only=True)
    assert ck["optimizer_states"][0]["param_groups"][0]["lr"] == 0.005


def test_a_network_that_grows_continues_from_its_parent_deepened(
    cfg, data: Path, tmp_path: Path
) -> None:
    """network.grow: at its iteration, the stage deepens its parent (`model.network.deepened`)
    and trains a new trainer from the run's step on, the rate schedule where the run is; the
    next iteration resumes the grown one as usual; the same inputs grow the same weights."""
    first = _stage(cfg, data, tmp_path / "1", iteration=1)
    grows = load_config(None, [*OVERRIDES, "network.grow=[[2,3]]"])
    second = _stage(grows, data, tmp_path / "2", init=first.ckpt, iteration=2, steps=4)
    assert second.global_step == 9
    net, _ = load_checkpoint(second.model)
    assert net.shape.blocks == 3 and net.tower[2].bn2.weight.abs().sum() > 0  # trained from 0
    ck = torch.load(second.ckpt, weights_only=True)
    assert ck["optimizer_states"][0]["param_groups"][0]["lr"] == 0.005  # step 9: past 6
    third = _stage(grows, data, tmp_path / "3", init=second.ckpt, iteration=3, steps=2)
    assert third.global_step == 11 and load_checkpoint(third.model)[0].shape.blocks == 3
    again = _stage(grows, data, tmp_path / "2b", init=first.ckpt, iteration=2, steps=4)
    assert again.weights_sha256 == second.weights_sha256
    with pytest.raises(TrainError, match="does not match"):  # never shrinks
        _stage(cfg, data, tmp_path / "back", init=second.ckpt, iteration=3)


def test_a_corrupt_shard_fails_with_its_name_before_training(
    cfg, data: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "window" / "bad.parquet"
    write_shard(bad, synthetic_records(N, 2, 3, seed=0))
    bad.write_bytes(bad.read_bytes()[:-100])
    out = tmp_path / "out"
    with pytest.raises(ShardError, match=str(bad)):
        spec = _spec(cfg, [data, bad.parent], steps=3, seed=0)
        train_stage(cfg, spec, out / "model.pt", progress=False)
    assert not out.exists()


def test_an_init_of_another_shape_or_kind_is_refused(cfg, data: Path, tmp_path: Path) -> None:
    other = save_checkpoint(tmp_path / "big.pt", make_network(N, 2, 8, seed=0), {})
    with pytest.raises(TrainError, match="does not match"):
        _stage(cfg, data, tmp_path / "o", init=other)
    assert cfg.network.aux_heads  # the default: a network without the heads is another kind
    plain = make_network(N, 1, 8, seed=0, value_hidden=16)
    plain_ckpt = save_checkpoint(tmp_path / "plain.pt", plain, {})
    with pytest.raises(TrainError, match="'aux': False"):
        _stage(cfg, data, tmp_path / "o", init=plain_ckpt)
    junk = tmp_path / "junk.pt"
    torch.save({"hello": 1}, junk)
    with pytest.raises(TrainError, match="neither a Lightning"):
        _stage(cfg, data, tmp_path / "o", init=junk)
    with pytest.raises(TrainError, match="not found"):
        _stage(cfg, data, tmp_path / "o", init=tmp_path / "missing.ckpt")
    with pytest.raises(TrainError, match="steps"):
        _stage(cfg, data, tmp_path / "o", steps=0)


@pytest.mark.slow  # creating the SQLite tracking schema alone takes seconds
def test_logs_to_an_mlflow_run_it_does_not_end(
    cfg, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("t", artifact_location=str(tmp_path / "artifacts"))
    run = client.create_run(exp).info.run_id
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _stage(cfg, data, tmp_path / "m", steps=10, logger=lightning_logger(uri, run))
    # Lightning's logger set it in-process; processes started later must not inherit it.
    assert "MLFLOW_TRACKING_URI" not in os.environ
    got = client.get_run(run)
    assert got.info.status == "RUNNING"
    assert {
        "loss",
        "loss/value",
        "loss/policy",
        "loss/l2",
        "lr",
        "grad_norm",
        "samples_per_s",
    } <= set(got.data.metrics)
    assert [m.step for m in client.get_metric_history(run, "loss")] == [9]
    # A stage shorter than the logging interval logs every `steps` steps instead, so it
    # draws its point too: steps 10-13, logged where (step + 1) % 4 == 0.
    _stage(cfg, data, tmp_path / "m2", steps=4, init=tmp_path / "m" / "train.ckpt",
           logger=lightning_logger(uri, run))  # fmt: skip
    assert [m.step for m in client.get_metric_history(run, "loss")] == [9, 11]


def test_stage_reports_its_steps_from_where_it_starts(cfg, data: Path, tmp_path: Path) -> None:
    first, second = [], []
    a = _stage(cfg, data, tmp_path / "a", progress=lambda d, t: first.append((d, t)))
    _stage(
        cfg, data, tmp_path / "b", init=a.ckpt, steps=3, progress=lambda d, t: second.append((d, t))
    )
    assert first == [(k, 5) for k in range(1, 6)]
    assert second == [(k, 3) for k in range(1, 4)]  # a resumed run counts this stage's steps


def test_precision_is_chosen_per_machine_and_recorded(data: Path, tmp_path: Path) -> None:
    """training.bf16: auto takes bf16 where it is native (as inference does), records what it
    used, and a given precision overrides the config (reproduction passes the recorded one)."""
    from model.evaluator import native_bf16

    auto = load_config(None, [*OVERRIDES, "training.bf16=auto"])
    result = _stage(auto, data, tmp_path / "auto")
    assert result.bf16 is native_bf16("cpu")
    fp32 = _stage(load_config(None, [*OVERRIDES, "training.bf16=false"]), data, tmp_path / "f")
    assert fp32.bf16 is False
    again = _stage(auto, data, tmp_path / "again", bf16=False)
    assert again.bf16 is False and again.weights_sha256 == fp32.weights_sha256


def test_steps_sized_to_the_newest_rows_and_games_held_out(cfg, data: Path, tmp_path: Path) -> None:
    """samples_per_row: as many steps as draw each training row of the newest iteration about
    that often; holdout_games: its newest games are left out and measured after training."""
    result = _stage(cfg, data, tmp_path / "s", steps=500, samples_per_row=3.0, holdout_games=2)
    newest = 6 * 6  # iteration 1's 8 games of 6 positions, less the 2 held out
    assert result.steps == result.global_step == math.ceil(newest * 3.0 / 32)
    assert result.held_out_positions == 2 * 6
    assert result.positions == 8 * 6  # window_games 8: six of iteration 1, two of iteration 0
    vals = (result.val_loss, result.val_value_loss, result.val_policy_loss)
    assert all(v is not None and math.isfinite(v) for v in vals)
    assert result.val_loss == pytest.approx(
        result.val_value_loss + result.val_policy_loss + result.l2_loss, rel=1e-2
    )
    _, metadata = load_checkpoint(result.model)
    assert metadata["steps"] == result.steps and metadata["window"]["held_out_games"] == 2
    plain = _stage(cfg, data, tmp_path / "p")
    assert plain.val_loss is None and plain.held_out_positions is None


def test_frequency_weights_size_the_steps_by_the_newest_rows_weight(tmp_path: Path) -> None:
    """``training.row_weights: frequency``: rows of weight 0.1 count a tenth of a row when
    the steps are sized (``loss``: a whole one)."""
    from dataclasses import replace

    root = tmp_path / "weighted"
    for it in range(2):
        rec = synthetic_records(N, 8, 6, seed=it, iteration=it, prefix=f"i{it}-")
        light = np.arange(len(rec)) % 2 == 0  # half the rows at 0.1
        rec = replace(rec, weight=np.where(light, 0.1, 1.0).astype(np.float32))
        write_shard(root / f"iter-{it}" / "worker-00.parquet", rec)
    newest = 8 * 6
    for mode, rows in (("loss", newest), ("frequency", newest / 2 * 1.1)):
        cfg = load_config(None, [*OVERRIDES, f"training.row_weights={mode}"])
        result = _stage(cfg, root, tmp_path / mode, steps=500, samples_per_row=4.0)
        assert result.steps == math.ceil(rows * 4.0 / 32), mode


def test_the_train_command_sizes_steps_and_holds_games_out(
    data: Path, tmp_path: Path, monkeypatch
) -> None:
    """``tabula train`` trains as the pipeline's stage does: with ``training.samples_per_row``
    and ``training.holdout_games`` set, sized steps and held-out games; ``--steps`` given on
    the command line trains that many, the games still held out."""
    from typer.testing import CliRunner

    from cli import app
    from cli.common import QUIET_DEFAULTS

    for name, value in QUIET_DEFAULTS.items():  # what the command sets, restored after
        monkeypatch.setenv(name, os.environ.get(name, value))
    switches = ["training.samples_per_row=3.0", "training.holdout_games=2"]
    sets = [a for item in [*OVERRIDES, *switches] for a in ("--set", item)]

    def train(out: Path, *extra: str) -> dict:
        args = ["train", "--data", str(data), "--out", str(out), "--seed", "11", *extra, *sets]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "on held-out games" in result.stdout, result.stdout
        return load_checkpoint(out)[1]

    sized = train(tmp_path / "sized.pt")
    newest = 6 * 6  # as in the test above: iteration 1's 8 games of 6 positions, less 2
    assert sized["steps"] == math.ceil(newest * 3.0 / 32)
    assert sized["window"]["held_out_games"] == 2
    fixed = train(tmp_path / "fixed.pt", "--steps", "3")
    assert fixed["steps"] == 3 and fixed["window"]["held_out_games"] == 2
