"""Golden regressions: refactors of the search, the game loop or training must not change a bit.

Each test hashes what a seeded run produces and compares it with the hash recorded before the
code around it was reshaped. A difference means behaviour changed: find out why
before touching a constant here.

- self-play: 6 seeded 7x7 games with the network-free ``hashed`` evaluator (numpy only, so the
  hash is the same on every CPU): moves, pi, z, winners, scores, resignations;
- one search tree: every array of a 9x9 tree after a 64-simulation search, counters included;
- training: the checkpoint of a seeded 5-step training stage on synthetic shards. Float
  kernels differ between CPU instruction sets and vendors, so its hash is recorded per
  ``torch.backends.cpu.get_cpu_capability()`` and CPU vendor; on a CPU not listed the test
  skips and prints the hash to record.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

SELFPLAY_SHA256 = "05e63905f63e6badffbed02bfce57cc91cd7ff033d721a1a3590dc80140562a9"
TREE_SHA256 = "ef70d6847538da6ef61372d797330baddd676652387d066496e20ba0a9fe9378"
#: (torch's CPU capability, the CPU's vendor) -> weights_sha256 of the seeded training stage.
#: The vendor too: an AMD EPYC and an Intel Xeon, both AVX512, pick different float kernels.
TRAIN_SHA256: dict[tuple[str, str], str] = {
    ("AVX512", "AuthenticAMD"): "ff3705458681e16024f2bb319a6f1a7e45397a87b03a6687174a95af81f2e370",
    ("AVX512", "GenuineIntel"): "607e944e052fbcce79fdd85bf785d587f21e5174ed022a6a94846d4f18fc56a5",
}


def _cpu() -> tuple[str, str]:
    """The key of `TRAIN_SHA256` for this machine."""
    vendor = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    return torch.backends.cpu.get_cpu_capability(), vendor


#: The tree arrays hashed, as they were named when the hash was recorded.
TREE_ARRAYS = (
    "parent", "move", "state", "to_play", "passes", "move_number", "N", "W", "value", "hash",
    "board", "P", "child", "size", "done", "inflight", "target", "noise_pending", "sym_state",
    "rand_state", "history", "game_set",
)  # fmt: skip


def _digest(*arrays: np.ndarray | float | int | None) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a if a is not None else np.nan)).tobytes())
    return h.hexdigest()


def _hashed_evaluator():
    from tests.helpers.mcts import hashed

    return hashed


def test_seeded_selfplay_games_are_unchanged() -> None:
    from tabula.mcts import SearchParams
    from tabula.selfplay import SelfPlayParams, play_games

    params = SelfPlayParams(
        board_size=7,
        komi=7.5,
        search=SearchParams(
            algorithm="puct", simulations=24, leaves_per_game=4, dirichlet_alpha=0.2
        ),
        temperature_moves=6,
        v_resign=-0.8,
        resign_disabled_fraction=0.25,
        concurrent_games=3,
        batch_size=16,
    )
    games = list(play_games(_hashed_evaluator(), params, 6, np.random.default_rng(2017)))
    games.sort(key=lambda r: r.index)
    parts = []
    for r in games:
        parts += [r.moves, r.to_play, r.pi, r.z, r.root_values, r.best_child_values]
        parts += [r.winner, r.score, r.resigned, r.resign_disabled]
    assert _digest(*parts) == SELFPLAY_SHA256


def test_seeded_search_tree_is_unchanged() -> None:
    from tabula.go.game import Game
    from tabula.mcts import BatchedMCTS, SearchParams

    game = Game(9, komi=7.5)
    for move in (40, 30, 50, 31, 49, 81):
        game.play(move)
    params = SearchParams(algorithm="puct", simulations=64, leaves_per_game=4, dirichlet_alpha=0.1)
    mcts = BatchedMCTS(2, 9, 7.5, params)
    mcts.reset(0, np.random.default_rng(5), game)
    mcts.reset(1, np.random.default_rng(6))
    mcts.search([0, 1], _hashed_evaluator(), max_batch=8)
    arrays = [getattr(mcts.trees, name) for name in TREE_ARRAYS]
    digest = _digest(*arrays, mcts.simulations, mcts.evaluations)
    assert digest == TREE_SHA256


def test_seeded_training_checkpoint_is_unchanged(tmp_path: Path) -> None:
    from model.datamodule import synthetic_records
    from model.shards import write_shard
    from tabula.config import load_config
    from tabula.plan import RunState, next_iteration, train_spec
    from tasks.train import train_stage

    cfg = load_config(
        None,
        [
            "rules.board_size=5",
            "network.blocks=1",
            "network.filters=8",
            "network.value_hidden=16",
            "training.batch_size=16",
            "training.lr_boundaries=[3]",
            "training.lr_values=[0.05,0.005]",
            "training.deterministic=true",
            "training.bf16=false",  # as recorded (the default then; now "auto")
            "network.aux_heads=false",  # as recorded (the default then)
            "network.liberties=false",  # as recorded (the default then)
            "training.value_target_mix=0.0",
        ],
    )
    for it in range(2):
        rec = synthetic_records(5, 6, 5, seed=it, iteration=it, prefix=f"i{it}-")
        write_shard(tmp_path / "data" / f"iter-{it}" / "worker-00.parquet", rec)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        planned = next_iteration(cfg.training, RunState.first(cfg.pipeline.iterations))
        window = [str(tmp_path / "data")]
        spec = train_spec(cfg, window, seed=7, lr_boundaries=planned.lr_boundaries, steps=5)
        result = train_stage(cfg, spec, tmp_path / "out" / "model.pt", progress=False)
    finally:
        torch.set_num_threads(threads)
    cpu = _cpu()
    if cpu not in TRAIN_SHA256:
        pytest.skip(f"no golden hash for CPU {cpu}: {result.weights_sha256}")
    assert result.weights_sha256 == TRAIN_SHA256[cpu]
