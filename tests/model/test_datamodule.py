"""The training data path: window selection, validation, seeded sampling, augmentation."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model.datamodule import (
    DataWindowError,
    PositionWindow,
    ShardDataModule,
    WindowSampler,
    bytes_per_position,
    load_window,
    synthetic_records,
)
from model.shards import ShardError, pack_planes, read_shard, write_shard
from tabula.features import Inputs, apply_planes, apply_policy, transform_move
from tabula.inputs import with_inputs


def _shards(
    root: Path, iterations: int = 3, workers: int = 2, games: int = 4, moves: int = 5, N: int = 5
) -> list[Path]:
    paths = []
    for it in range(iterations):
        for w in range(workers):
            rec = synthetic_records(
                N, games, moves, seed=10 * it + w, iteration=it, prefix=f"i{it}w{w}-"
            )
            paths.append(write_shard(root / f"iter-{it}" / f"worker-{w}.parquet", rec))
    return paths


def _window(records, N: int) -> PositionWindow:
    return PositionWindow(
        board_size=N,
        packed=pack_planes(records.planes),
        pi=records.pi,
        z=records.z,
        shards=(),
        used=(),
        games=0,
        iterations=(),
    )


@settings(max_examples=30, deadline=None)
@given(N=st.sampled_from([5, 7, 9, 13, 19]), seed=st.integers(0, 2**31 - 1))
def test_batch_applies_the_same_symmetry_to_planes_and_pi(N: int, seed: int) -> None:
    rec = synthetic_records(N, games=2, moves=4, seed=seed)
    window = _window(rec, N)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(window), 16)
    syms = rng.integers(0, 8, 16)
    planes, pi, z = window.batch(rows, syms)
    for b, (r, k) in enumerate(zip(rows, syms, strict=True)):
        np.testing.assert_array_equal(planes[b].numpy(), apply_planes(int(k), rec.planes[r]))
        np.testing.assert_array_equal(pi[b].numpy(), apply_policy(int(k), rec.pi[r]))
        assert z[b].item() == rec.z[r]


@pytest.mark.parametrize("k", range(8))
def test_a_stone_and_its_move_probability_move_together(k: int) -> None:
    """A position whose only stone sits on the only move with probability: transformed, the
    stone and the probability mass still share one point (where transform_move sends it)."""
    N, move = 7, 3 * 7 + 5  # an asymmetric point
    rec = synthetic_records(N, 1, 1, seed=0)
    planes = np.zeros_like(rec.planes)
    planes[0, 0].flat[move] = 1
    planes[0, 16] = 1  # black to move (synthetic row 0 is black's)
    pi = np.zeros_like(rec.pi)
    pi[0, move] = 1.0
    window = _window(type(rec)(**{**rec.__dict__, "planes": planes, "pi": pi}), N)
    got_planes, got_pi, _ = window.batch(np.array([0]), np.array([k]))
    stone = int(np.flatnonzero(got_planes[0, 0].numpy().ravel())[0])
    assert stone == int(torch.argmax(got_pi[0])) == transform_move(k, move, N)
    assert got_planes[0, 16].all() and got_pi[0, N * N] == 0


def test_without_augmentation_rows_come_back_unchanged() -> None:
    rec = synthetic_records(9, 2, 3, seed=1)
    planes, pi, z = _window(rec, 9).batch(np.array([4, 0, 4]))
    assert planes.dtype == torch.uint8 and planes.shape == (3, 17, 9, 9)
    np.testing.assert_array_equal(planes.numpy(), rec.planes[[4, 0, 4]])
    np.testing.assert_array_equal(pi.numpy(), rec.pi[[4, 0, 4]])


def test_sampler_is_seeded_uniform_and_draws_every_symmetry() -> None:
    a = list(WindowSampler(50, 200, 20, seed=7))
    b = list(WindowSampler(50, 200, 20, seed=7))
    c = list(WindowSampler(50, 200, 20, seed=8))
    assert len(a) == 20
    assert all(
        np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )
    assert not np.array_equal(a[0][0], c[0][0])
    rows = np.concatenate([x[0] for x in a])
    syms = np.concatenate([x[1] for x in a])
    counts = np.bincount(rows, minlength=50)
    assert counts.min() > 0.6 * counts.mean() and counts.max() < 1.4 * counts.mean()
    assert set(syms.tolist()) == set(range(8))
    assert all(x[1] is None for x in WindowSampler(5, 4, 3, seed=0, augment=False))


def test_window_keeps_the_most_recent_iterations_then_games(tmp_path: Path) -> None:
    _shards(tmp_path)  # 3 iterations x 2 workers x 4 games x 5 positions
    every = load_window([tmp_path], 5)
    assert (len(every), every.games, every.iterations) == (120, 24, (0, 1, 2))
    last_two = load_window([tmp_path], 5, window_iterations=2)
    assert (last_two.games, last_two.iterations) == (16, (1, 2))
    recent = load_window([tmp_path], 5, window_games=10)
    assert (recent.games, len(recent), recent.iterations) == (10, 50, (1, 2))
    # The 10 most recent: iteration 2's eight games and the last two of worker 1, iteration 1.
    assert [p.parent.name + "/" + p.name for p in recent.used] == [
        "iter-1/worker-1.parquet",
        "iter-2/worker-0.parquet",
        "iter-2/worker-1.parquet",
    ]


def test_window_is_trimmed_to_the_memory_bound_oldest_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _shards(tmp_path)
    with caplog.at_level(logging.WARNING, logger="model.datamodule"):
        window = load_window([tmp_path], 5, max_bytes=37 * bytes_per_position(5))
    assert (window.games, len(window), window.dropped_games) == (7, 35, 17)
    assert window.iterations == (2,) and "trimmed" in caplog.text


def test_window_from_files_equals_window_from_folder(tmp_path: Path) -> None:
    files = _shards(tmp_path)
    a, b = load_window(files, 5), load_window([tmp_path], 5)
    assert np.array_equal(a.packed, b.packed) and np.array_equal(a.pi, b.pi)


def test_missing_path_and_empty_folder_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(DataWindowError, match="nope"):
        load_window([tmp_path / "nope"], 5)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataWindowError, match="no \\*.parquet shards"):
        load_window([tmp_path / "empty"], 5)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "wrong_size"])
def test_a_bad_shard_anywhere_in_the_list_fails_the_window_naming_it(
    tmp_path: Path, damage: str
) -> None:
    files = _shards(tmp_path)
    bad = files[1]  # an old shard: outside a small window, still validated
    if damage == "truncate":
        bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    elif damage == "garbage":
        data = bytearray(bad.read_bytes())
        data[200:400] = bytes(200)
        bad.write_bytes(bytes(data))
    else:
        write_shard(bad, synthetic_records(7, 2, 2, seed=0))
    with pytest.raises(ShardError) as err:  # before any DataModule exists
        load_window([tmp_path], 5, window_games=2)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def test_datamodule_yields_steps_batches_same_for_any_worker_count(tmp_path: Path) -> None:
    _shards(tmp_path, N=9)
    batches = {}
    for workers in (0, 1):
        window = load_window([tmp_path], 9)
        dm = ShardDataModule(window, batch_size=32, steps=6, seed=3, num_workers=workers)
        batches[workers] = list(dm.train_dataloader())
    assert len(batches[0]) == 6
    planes, pi, z = batches[0][0]
    assert planes.shape == (32, 17, 9, 9) and pi.shape == (32, 82) and z.shape == (32,)
    for x, y in zip(batches[0], batches[1], strict=True):
        assert all(torch.equal(u, v) for u, v in zip(x, y, strict=True))


def test_value_target_mix_and_the_policy_target_mask(tmp_path: Path) -> None:
    """lambda mixes the root value into z; rows without a full search come with a mask."""
    from dataclasses import replace

    rng = np.random.default_rng(7)
    records = synthetic_records(5, games=4, moves=6, seed=7)
    full = rng.random(len(records)) < 0.5
    root = rng.uniform(-1, 1, len(records)).astype(np.float32)
    write_shard(tmp_path / "a.parquet", replace(records, full_search=full, root_value=root))
    plain = load_window([tmp_path], 5)
    assert (plain.z == records.z).all() and (plain.full == full).all()
    mixed = load_window([tmp_path], 5, value_target_mix=0.25)
    np.testing.assert_allclose(mixed.z, 0.75 * records.z + 0.25 * root, rtol=1e-6)
    rows = np.arange(8)
    *_, mask = mixed.batch(rows)
    assert (mask.numpy() == full[rows]).all()
    write_shard(tmp_path / "a.parquet", records)  # every row a full search: no mask
    assert load_window([tmp_path], 5).full is None and len(plain.batch(rows)) == 4
    assert len(load_window([tmp_path], 5).batch(rows)) == 3


@settings(max_examples=20, deadline=None)
@given(N=st.sampled_from([5, 9, 19]), seed=st.integers(0, 2**31 - 1))
def test_ownership_moves_with_the_board_under_every_symmetry(N: int, seed: int) -> None:
    """With auxiliary targets, each row's ownership is transformed as its planes: here the
    owner of each point is the side to move's stone plane, before and after."""
    from dataclasses import replace

    rec = synthetic_records(N, games=2, moves=4, seed=seed)
    own = rec.planes[:, 0].reshape(len(rec), N * N).astype(np.int8)
    rec = replace(rec, ownership=own, score=np.arange(len(rec), dtype=np.float32),
                  scored=np.arange(len(rec)) % 3 > 0)  # fmt: skip
    window = replace(_window(rec, N), ownership=rec.ownership, score=rec.score, scored=rec.scored)
    rng = np.random.default_rng(seed)
    rows, syms = rng.integers(0, len(window), 16), rng.integers(0, 8, 16)
    planes, pi, z, full, owner, score, scored = window.batch(rows, syms)
    assert full.all() and owner.dtype == torch.int8
    np.testing.assert_array_equal(owner.numpy(), planes[:, 0].reshape(16, N * N).numpy())
    assert (score.numpy() == rows).all() and (scored.numpy() == (rows % 3 > 0)).all()


def test_auxiliary_targets_load_only_when_asked(tmp_path: Path) -> None:
    from dataclasses import replace

    records = synthetic_records(5, games=4, moves=6, seed=3)
    rng = np.random.default_rng(3)
    own = rng.integers(-1, 2, (len(records), 25)).astype(np.int8)
    ones = np.ones(len(records), np.float32)
    aux = replace(records, ownership=own, score=ones, scored=ones > 0)
    write_shard(tmp_path / "a.parquet", aux)
    assert load_window([tmp_path], 5).ownership is None
    window = load_window([tmp_path], 5, aux=True)
    assert window.ownership is not None and (window.ownership == own).all()
    assert len(window.batch(np.arange(4))) == 7
    assert bytes_per_position(5, aux=True) == bytes_per_position(5) + 25 + 5


def test_held_out_games_are_the_newest_and_never_in_the_window(tmp_path: Path) -> None:
    _shards(tmp_path)  # 3 iterations x 2 workers x 4 games x 5 positions
    window = load_window([tmp_path], 5, window_games=10, holdout_games=3)
    held = window.held_out
    assert held is not None and (held.games, len(held), held.iterations) == (3, 15, (2,))
    # The newest three: the last three games of worker 1's shard, iteration 2.
    newest = read_shard(tmp_path / "iter-2" / "worker-1.parquet")
    assert np.array_equal(held.pi, newest.pi[5:])
    assert held.used == (tmp_path / "iter-2" / "worker-1.parquet",)
    # The window is the ten newest of the rest: none of the held-out rows, all five games
    # of iteration 2 left (25 of its positions), then iteration 1's newest five.
    assert (window.games, len(window), window.latest) == (10, 50, 25)
    rows = {row.tobytes() for row in window.pi}
    assert not any(row.tobytes() in rows for row in held.pi)
    assert load_window([tmp_path], 5, window_games=10).held_out is None


@pytest.mark.parametrize("inputs", [Inputs(liberties=True), Inputs(True, True)])
def test_derived_planes_follow_the_17_in_every_batch_the_held_out_ones_too(
    tmp_path: Path, inputs: Inputs
) -> None:
    _shards(tmp_path)
    plain = load_window([tmp_path], 5, window_games=10, holdout_games=3)
    window = plain.with_inputs(inputs)
    rows, syms = np.arange(12), np.arange(12) % 8
    for got, base in ((window, plain), (window.held_out, plain.held_out)):
        assert got is not None and base is not None
        planes, *rest = got.batch(rows, syms)
        expected, *same = base.batch(rows, syms)
        assert planes.shape == (12, inputs.planes, 5, 5)
        assert torch.equal(planes, torch.from_numpy(with_inputs(expected.numpy(), inputs)))
        assert all(torch.equal(a, b) for a, b in zip(rest, same, strict=True))


def test_row_weights_come_last_in_a_batch_only_when_some_row_has_one(tmp_path: Path) -> None:
    """Rows of schema v4 carry their weight: the window holds it and each batch ends with it
    (after the policy-target mask, all True here); a window whose rows all weigh 1 has none."""
    from dataclasses import replace

    records = synthetic_records(5, games=4, moves=6, seed=5)
    weight = np.where(np.arange(len(records)) % 3 == 0, 0.1, 1.0).astype(np.float32)
    write_shard(tmp_path / "a.parquet", replace(records, weight=weight))
    window = load_window([tmp_path], 5)
    assert window.weight is not None and (window.weight == weight).all()
    rows = np.arange(6)
    planes, pi, z, full, w = window.batch(rows)
    assert full.all() and (w.numpy() == weight[rows]).all()
    aux = load_window([tmp_path], 5, aux=True).batch(rows)
    assert len(aux) == 8 and (aux[-1].numpy() == weight[rows]).all()
    write_shard(tmp_path / "a.parquet", records)
    assert (
        load_window([tmp_path], 5).weight is None
        and len(load_window([tmp_path], 5).batch(rows)) == 3
    )


def test_frequency_weights_set_how_often_a_row_is_drawn_and_weigh_1_in_the_batch(
    tmp_path: Path,
) -> None:
    """KataGo's frequency weights: a row of weight 0.1 is drawn a tenth as often as one of
    weight 1 (never at 0), one of 2.5 (a surprising row) two and a half times as often, the
    batches then carry no weights, and the newest rows' total weight is what sizes the steps."""
    from dataclasses import replace

    records = synthetic_records(5, games=4, moves=6, seed=5)
    weight = np.choose(np.arange(len(records)) % 3, [0.1, 1.0, 2.5]).astype(np.float32)
    write_shard(tmp_path / "a.parquet", replace(records, weight=weight))
    window = load_window([tmp_path], 5)
    assert window.latest == len(records)
    assert window.latest_weight == pytest.approx(float(weight.astype(np.float64).sum()))

    drawable = weight.copy()
    drawable[1] = 0.0
    draws = WindowSampler(len(weight), 500, 40, 3, frequency=drawable)
    drawn = np.concatenate([rows for rows, _ in draws])
    counts = np.bincount(drawn, minlength=len(weight))
    assert counts[1] == 0 and counts.sum() == 20_000
    light, heavy = counts[drawable == np.float32(0.1)].mean(), counts[drawable == 1.0].mean()
    assert 0.07 < light / heavy < 0.14  # about 0.1 over 20,000 draws
    assert 2.2 < counts[drawable == 2.5].mean() / heavy < 2.8
    assert (np.concatenate([rows for rows, _ in draws]) == drawn).all()  # seeded

    dm = ShardDataModule(window, batch_size=16, steps=3, seed=1, frequency_weights=True)
    batches = list(dm.train_dataloader())
    assert len(batches) == 3 and all(len(b) == 3 for b in batches)  # no weights (nor mask)
    plain = ShardDataModule(window, batch_size=16, steps=3, seed=1)
    assert all(len(b) == 5 for b in plain.train_dataloader())  # weights scale the losses


def test_without_weights_the_newest_rows_weigh_what_they_count(tmp_path: Path) -> None:
    _shards(tmp_path)
    window = load_window([tmp_path], 5)
    assert window.weight is None and window.latest_weight == window.latest > 0
