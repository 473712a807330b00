"""The self-play worker end to end with a tiny real network: shards, SGFs, determinism."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from model.checkpoint import CheckpointError, save_checkpoint
from model.network import make_network
from model.shards import read_shard, read_shard_info, validate_shard
from tabula.config import load_config
from tabula.go.game import Game
from tabula.plan import WorkerSpec
from tabula.resign import ResignTrace, calibrate_samples
from tabula.sgf import read_sgf, replay
from tasks.selfplay import WorkerProgress, run_worker

OVERRIDES = [
    "rules.board_size=5",
    "rules.komi=0.5",
    "network.blocks=1",
    "network.filters=8",
    "network.value_hidden=16",
    "search.simulations=8",
    "search.leaves_per_game=2",
    "selfplay.concurrent_games=3",
    "selfplay.sgf_sample=2",
    "selfplay.resign_disabled_fraction=0.5",
    "selfplay.v_resign=-0.2",
    "selfplay.record_fast_rows=true",  # every position a row, fast searches' too
    "pipeline.device=cpu",
]

# Tiny batches on a busy 2-core machine: a second OpenMP thread only adds waiting.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, OVERRIDES)


def _spec(
    cfg, model: str | Path, games: int, seed: int, iteration: int = 0, worker: int = 0
) -> WorkerSpec:
    """A worker's spec outside a run: ``model`` plays, resigning as ``cfg`` says."""
    return WorkerSpec(iteration, worker, str(model), games, seed, "", cfg.selfplay.v_resign)


@pytest.fixture(scope="module")
def first_run(cfg, tmp_path_factory):
    out = tmp_path_factory.mktemp("a")
    seen: list[WorkerProgress] = []
    result = run_worker(cfg, _spec(cfg, "random", 5, 11, 2, 1), out, seen.append)
    return out, result, seen


def test_same_seed_gives_identical_bytes(cfg, first_run, tmp_path: Path) -> None:
    out, result, _ = first_run
    again = run_worker(cfg, _spec(cfg, "random", 5, 11, 2, 1), tmp_path)
    assert [p.name for p in again.shards] == [p.name for p in result.shards]
    for a, b in zip(result.shards + result.sgfs, again.shards + again.sgfs, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    other = run_worker(cfg, _spec(cfg, "random", 5, 12, 2, 1), tmp_path / "other")
    assert other.shards[0].read_bytes() != result.shards[0].read_bytes()


def test_shards_hold_every_position(cfg, first_run) -> None:
    out, result, seen = first_run
    assert result.games == 5 and len(seen) == 5 and seen[-1].games == 5
    assert [p.parent for p in result.shards] == [out] and not list(out.glob(".*tmp"))
    validate_shard(result.shards[0], expect_board_size=5)
    rows = read_shard(result.shards[0], expect_board_size=5)
    assert len(rows.z) == result.positions > 0
    assert set(rows.iteration) == {2} and set(rows.model_id) == {result.model_id}
    assert len(set(rows.game_id)) == 5 and set(np.unique(rows.z)) <= {-1.0, 0.0, 1.0}
    np.testing.assert_allclose(rows.pi.sum(1), 1, rtol=1e-5)
    # Replay each game (the move at row i is the mover's new stone in row i + 1, or a pass):
    # every row's planes are that position's features, its pi is over legal moves only.
    for gid in np.unique(rows.game_id):
        idx = np.flatnonzero(rows.game_id == gid)
        assert (rows.move_number[idx] == np.arange(len(idx))).all()
        assert len(set(rows.resign_disabled[idx])) == 1
        game = Game(5, 0.5)
        for i in idx:
            assert (rows.planes[i] == game.features()).all()
            assert rows.to_play[i] == game.to_play
            assert (rows.pi[i][~game.legal_mask()] == 0).all()
            if i != idx[-1]:
                game.play(move_between(rows.planes[i], rows.planes[i + 1]))


def move_between(before: np.ndarray, after: np.ndarray) -> int:
    """The move from the position of ``before`` to that of ``after`` (17-plane stacks)."""
    mover_before, mover_after = before[0].ravel(), after[8].ravel()
    new = np.flatnonzero((mover_after == 1) & (mover_before == 0))
    assert len(new) <= 1
    return int(new[0]) if len(new) else mover_before.size


def test_sgf_sample_replays(cfg, first_run) -> None:
    _, result, _ = first_run
    assert sorted(p.name for p in result.sgfs) == ["i0002-w01-g000000.sgf", "i0002-w01-g000001.sgf"]
    for path in result.sgfs:
        record = read_sgf(path.read_bytes())
        game = replay(record)
        assert record.size == 5 and record.komi == 0.5
        if record.result.endswith("+R"):
            assert not game.is_over()
        else:
            assert game.is_over()
            expected = "0" if game.score() == 0 else f"{'B' if game.score() > 0 else 'W'}+"
            assert record.result.startswith(expected)


def test_resign_samples_feed_calibration(first_run) -> None:
    _, result, _ = first_run
    data = result.to_dict()
    assert data["resign_disabled_games"] == len(data["resign_samples"])
    traces = [ResignTrace.from_dict(s) for s in data["resign_samples"]]
    assert data["false_positives"] == sum(t.false_positive(-0.2) for t in traces)
    v, rate = calibrate_samples(data["resign_samples"], data["v_resign"], min_games=1)
    if traces:
        assert -1 <= v <= 1 and 0 <= rate <= 1
    assert isinstance(data["shards"][0], str) and data["evaluations_per_s"] > 0


def test_checkpoint_model_and_small_shards(cfg, tmp_path: Path) -> None:
    net = make_network(5, 1, 8, seed=3, value_hidden=16)
    ckpt = save_checkpoint(tmp_path / "m.pt", net, {"model_id": "run/iter-0007"})
    spec = _spec(cfg, ckpt, 3, 0)
    result = run_worker(cfg, spec, tmp_path / "out", rows_per_shard=1, overlap=True)
    assert len(result.shards) == 3 and result.model_id == "run/iter-0007"
    assert sum(len(read_shard(p).z) for p in result.shards) == result.positions


def test_fast_rows_left_unrecorded_keep_the_full_searches_only(tmp_path: Path) -> None:
    """With ``selfplay.record_fast_rows`` off (KataGo), the shards hold the full searches'
    positions only, each with its move number in the game and the planes of that position;
    the same seed with the fast rows recorded holds those rows and the others."""
    caps = [*OVERRIDES, "selfplay.full_search_fraction=0.5"]
    every_cfg = load_config(None, caps)
    full_cfg = load_config(None, [*caps, "selfplay.record_fast_rows=false"])
    every = run_worker(every_cfg, _spec(every_cfg, "random", 4, 5), tmp_path / "a")
    full = run_worker(full_cfg, _spec(full_cfg, "random", 4, 5), tmp_path / "b")
    all_rows = read_shard(every.shards[0], expect_board_size=5)
    rows = read_shard(full.shards[0], expect_board_size=5)
    assert full.positions == every.positions == len(all_rows.z)  # the same games were played
    assert rows.full_search.all() and 0 < len(rows.z) < len(all_rows.z)
    assert len(rows.z) == all_rows.full_search.sum()
    kept = all_rows.full_search
    for column in ("planes", "pi", "z", "to_play", "game_id", "move_number", "root_value"):
        np.testing.assert_array_equal(getattr(rows, column), getattr(all_rows, column)[kept])
    gaps = [np.diff(rows.move_number[rows.game_id == g]) for g in np.unique(rows.game_id)]
    assert any((d > 1).any() for d in gaps)  # fast moves between full ones were left out


def test_bad_model_and_bad_games(cfg, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="missing.pt"):
        run_worker(cfg, _spec(cfg, tmp_path / "missing.pt", 1, 0), tmp_path)
    with pytest.raises(ValueError, match="games"):
        run_worker(cfg, _spec(cfg, "random", 0, 0), tmp_path)


def test_decided_rows_are_kept_at_their_weight(tmp_path: Path) -> None:
    """selfplay.decided_row_weight (KataGo's reducedVisitsWeight): a decided game's positions,
    searched fast, are written as rows weighing that much, their pi a policy target, while
    the playout caps' other fast positions stay out; the shards are schema v4."""
    caps = [*OVERRIDES, "selfplay.full_search_fraction=0.5", "selfplay.record_fast_rows=false",
            "selfplay.decided_threshold=0.05", "selfplay.decided_lookback=2"]  # fmt: skip
    plain_cfg = load_config(None, caps)
    cfg = load_config(None, [*caps, "selfplay.decided_row_weight=0.1"])
    plain = run_worker(plain_cfg, _spec(plain_cfg, "random", 4, 5), tmp_path / "a")
    kept = run_worker(cfg, _spec(cfg, "random", 4, 5), tmp_path / "b")
    old, rows = read_shard(plain.shards[0]), read_shard(kept.shards[0])
    assert kept.positions == plain.positions  # the same games: only what is written differs
    assert (old.weight == 1.0).all() and read_shard_info(plain.shards[0]).schema_version == 3
    assert read_shard_info(kept.shards[0]).schema_version == 4
    decided = rows.weight < 1.0
    assert decided.any() and np.allclose(rows.weight[decided], 0.1)
    assert rows.full_search.all()  # full searches and decided rows: every pi a target
    assert len(rows.z) == len(old.z) + decided.sum()  # the decided rows were dropped before


def test_surprising_rows_weigh_more_and_a_games_rows_as_many(tmp_path: Path) -> None:
    """selfplay.policy_surprise_weight (KataGo's policy surprise weighting): the same games and
    rows as without it, written in schema v4 with weights that spread each game's full rows'
    total by surprise, half of it evenly: at least 0.5 each, and as many in all as rows."""
    caps = [*OVERRIDES, "selfplay.full_search_fraction=0.5", "selfplay.record_fast_rows=false"]
    plain_cfg = load_config(None, caps)
    cfg = load_config(None, [*caps, "selfplay.policy_surprise_weight=0.5"])
    plain = run_worker(plain_cfg, _spec(plain_cfg, "random", 4, 5), tmp_path / "a")
    weighted = run_worker(cfg, _spec(cfg, "random", 4, 5), tmp_path / "b")
    old, rows = read_shard(plain.shards[0]), read_shard(weighted.shards[0])
    assert read_shard_info(weighted.shards[0]).schema_version == 4
    for column in ("pi", "z", "game_id", "move_number"):
        np.testing.assert_array_equal(getattr(rows, column), getattr(old, column))
    assert (rows.weight >= 0.5 - 1e-6).all() and (rows.weight > 1.0).any()
    for game in np.unique(rows.game_id):
        mine = rows.weight[rows.game_id == game]
        assert mine.sum() == pytest.approx(len(mine), rel=1e-5)
