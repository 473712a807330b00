"""`bench.fit`: a network's losses on the window it trained on and on the next iteration's games."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bench.fit import fit_at, points
from model.checkpoint import save_checkpoint
from model.datamodule import synthetic_records
from model.network import make_network
from model.shards import write_shard
from tabula.config import load_config
from tabula.features import NUM_PLANES
from tasks.run.layout import RunLayout

GAMES, MOVES = 6, 10


def test_points_spread_over_the_run_and_each_has_a_next() -> None:
    assert points(10, 4) == [1, 4, 6, 9]
    assert points(3, 8) == [1, 2]
    assert points(1, 8) == []


def _run(tmp_path: Path) -> tuple[RunLayout, torch.nn.Module]:
    """Iterations 1 and 2 of random games, iteration 3 a copy of iteration 2's shard, and
    iteration 2's network."""
    layout = RunLayout(tmp_path, "data", "r")
    for i in (1, 2):
        records = synthetic_records(5, GAMES, MOVES, seed=i, iteration=i, prefix=f"i{i}-")
        # a root value unlike z, so that a value target mixed with it would show
        records = replace(records, root_value=np.full(len(records), 0.25, dtype=np.float32))
        layout.worker(i, 0).mkdir(parents=True)
        write_shard(layout.worker(i, 0) / "shard.parquet", records)
    shutil.copytree(layout.selfplay(2), layout.selfplay(3))
    net = make_network(5, 1, 8, seed=3, value_hidden=16)
    layout.model_dir(2).mkdir(parents=True)
    save_checkpoint(layout.model(2), net, {"model_id": layout.model_id(2), "seed": 3,
                                          "global_step": 20, "parent": None})  # fmt: skip
    return layout, net


def test_the_window_is_the_trained_one_and_the_next_games_the_next_iteration(
    tmp_path: Path,
) -> None:
    layout, net = _run(tmp_path)
    overrides = ["rules.board_size=5", "network.blocks=1", "network.filters=8",
                 "network.value_hidden=16", "network.aux_heads=false",
                 "training.value_target_mix=0.5"]  # fmt: skip
    # The window of the last iteration only: iteration 2's games, and iteration 3 is a copy.
    one = load_config(None, [*overrides, "training.window_iterations=1"])
    r = fit_at(layout, one, 2, positions=10_000)
    assert r["iteration"] == 2 and r["global_step"] == 20
    assert r["window"]["games"] == r["next"]["games"] == GAMES
    assert r["window"]["positions"] == r["next"]["positions"] == GAMES * MOVES
    for term in ("value", "policy", "total"):
        assert abs(r["window"][term] - r["next"][term]) < 1e-6, term
    # The value is scored against z alone, not the mixed target: by hand.
    shard = synthetic_records(5, GAMES, MOVES, seed=2, iteration=2, prefix="i2-")
    planes = torch.from_numpy(shard.planes.reshape(-1, NUM_PLANES, 5, 5)).float()
    with torch.no_grad():
        _, value = net.eval()(planes)
    by_hand = float(((value - torch.from_numpy(shard.z)) ** 2).mean())
    assert abs(r["next"]["value"] - by_hand) < 1e-5
    # Two iterations in the window: both iterations' games, and now the losses differ.
    two = load_config(None, [*overrides, "training.window_iterations=2"])
    r = fit_at(layout, two, 2, positions=10_000)
    assert r["window"]["games"] == 2 * GAMES and r["next"]["games"] == GAMES
    assert abs(r["window"]["value"] - r["next"]["value"]) > 1e-4
    # Fewer positions than the window holds: a seeded draw of that many.
    drawn = fit_at(layout, two, 2, positions=7)
    assert drawn["window"]["positions"] == drawn["next"]["positions"] == 7
    assert drawn == fit_at(layout, two, 2, positions=7)
