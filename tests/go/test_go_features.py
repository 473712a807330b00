"""The 17 input planes, the 6 liberty planes and the 8 dihedral symmetries."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.features import (
    apply_planes,
    apply_policy,
    fill_planes,
    fill_planes_batch,
    inverse_symmetry,
    inverse_symmetry_permutations,
    planes,
    symmetry_permutations,
    transform_move,
    with_liberties,
)
from tabula.go import Game
from tests.helpers.go import random_game

SIZES = [5, 9, 19]


def test_start_position_planes() -> None:
    f = Game(9).features()
    assert f.shape == (17, 9, 9) and f.dtype == np.uint8
    assert f[:16].sum() == 0 and (f[16] == 1).all()


def test_planes_follow_the_side_to_move_and_history() -> None:
    g = Game(5)
    g.play(0)  # black A5
    g.play(24)  # white E1
    g.play(6)  # black B4
    f = g.features()  # white to move
    assert (f[16] == 0).all()
    own_now, opp_now = f[0].ravel(), f[8].ravel()
    assert np.flatnonzero(own_now).tolist() == [24]
    assert np.flatnonzero(opp_now).tolist() == [0, 6]
    assert np.flatnonzero(f[9].ravel()).tolist() == [0]  # black one move ago: A5 only
    assert np.flatnonzero(f[1].ravel()).tolist() == [24]  # white one move ago
    assert np.flatnonzero(f[2].ravel()).tolist() == []  # white two moves ago: not yet
    assert f[3:8].sum() == 0 and f[11:16].sum() == 0  # before the start: empty


def test_recent_boards_pad_with_zeros_and_put_the_latest_first() -> None:
    g = Game(5)
    g.play(3)
    r = g.recent_boards(4)
    assert r.shape == (4, 25) and r.dtype == np.int8
    assert r[0, 3] == 1 and r[1:].sum() == 0
    assert g.recent_boards(1).shape == (1, 25)


def test_kernel_numpy_and_batch_agree() -> None:
    rng = np.random.default_rng(0)
    B, N = 6, 7
    recent = rng.integers(-1, 2, size=(B, 8, N * N)).astype(np.int8)
    colors = np.array([1, -1, 1, -1, -1, 1], dtype=np.int64)
    batch = np.empty((B, 17, N, N), dtype=np.uint8)
    fill_planes_batch(recent, colors, batch)
    for b in range(B):
        one = np.empty((17, N, N), dtype=np.uint8)
        fill_planes(recent[b], int(colors[b]), one)
        assert (one == planes(recent[b], int(colors[b]))).all()
        assert (one == batch[b]).all()


@pytest.mark.parametrize("N", SIZES)
def test_symmetry_index_contract(N: int) -> None:
    x = np.arange(N * N).reshape(N, N)
    perm = symmetry_permutations(N)
    assert perm.shape == (8, N * N + 1) and perm.dtype == np.int64
    assert (perm[0] == np.arange(N * N + 1)).all()
    assert (perm[:, -1] == N * N).all()
    for k in range(8):
        rot, flip = k % 4, k // 4
        expected = np.rot90(x, rot)
        if flip:
            expected = np.flip(expected, axis=-1)
        assert (apply_planes(k, x) == expected).all()
        assert (perm[k, :-1] == expected.ravel()).all()
    assert len({tuple(p) for p in perm}) == 8


@pytest.mark.parametrize("N", SIZES)
def test_inverses_undo_each_transform(N: int) -> None:
    rng = np.random.default_rng(N)
    p = rng.random((3, N * N + 1))
    x = rng.random((2, 17, N, N))
    inv = inverse_symmetry_permutations(N)
    for k in range(8):
        assert (apply_policy(inverse_symmetry(k), apply_policy(k, p)) == p).all()
        assert (apply_planes(inverse_symmetry(k), apply_planes(k, x)) == x).all()
        assert (apply_policy(k, p)[..., inv[k]] == p).all()
        assert apply_policy(k, p)[..., -1].tolist() == p[..., -1].tolist()


@pytest.mark.parametrize("N", SIZES)
def test_planes_and_policies_transform_alike(N: int) -> None:
    rng = np.random.default_rng(N)
    x = rng.random((4, N, N))
    for k in range(8):
        flat = apply_planes(k, x).reshape(4, N * N)
        assert (flat == x.reshape(4, N * N)[:, symmetry_permutations(N)[k, :-1]]).all()
        for move in rng.integers(0, N * N + 1, size=10):
            one_hot = np.zeros(N * N + 1)
            one_hot[move] = 1
            assert apply_policy(k, one_hot)[transform_move(k, int(move), N)] == 1


@pytest.mark.parametrize("N", [5, 9])
def test_features_of_a_transformed_game_are_the_transformed_features(N: int) -> None:
    g = random_game(N, np.random.default_rng(N))
    for k in range(8):
        t = Game(N)
        for color, move in g.history:
            t.play(transform_move(k, move, N), color)
        assert (t.features() == apply_planes(k, g.features())).all()


def test_bad_symmetry_index_raises() -> None:
    with pytest.raises(ValueError, match="0..7"):
        inverse_symmetry(8)


def _chain_liberties(own: np.ndarray, opp: np.ndarray) -> np.ndarray:
    """The 6 liberty planes by a plain flood fill over sets (the reference)."""
    N = own.shape[0]
    out = np.zeros((6, N, N), np.uint8)
    for side, (mine, theirs) in enumerate(((own, opp), (opp, own))):
        seen: set[tuple[int, int]] = set()
        for start in zip(*np.nonzero(mine), strict=True):
            if start in seen:
                continue
            chain, liberties, todo = [], set(), [start]
            seen.add(start)
            while todo:
                r, c = todo.pop()
                chain.append((r, c))
                for q in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                    if not (0 <= q[0] < N and 0 <= q[1] < N):
                        continue
                    if mine[q] and q not in seen:
                        seen.add(q)
                        todo.append(q)
                    elif not mine[q] and not theirs[q]:
                        liberties.add(q)
            for point in chain:
                out[(side * 3 + min(len(liberties), 3) - 1, *point)] = 1
    return out


@pytest.mark.parametrize("N", SIZES)
def test_liberty_planes_match_a_flood_fill_through_random_games(N: int) -> None:
    rng = np.random.default_rng(100 + N)
    positions = []
    for _ in range(4 if N < 19 else 1):
        game, replay = random_game(N, rng), Game(N)
        for color, move in game.history:
            replay.play(move, color)
            positions.append(replay.features())
    stack = np.stack(positions)
    got = with_liberties(stack)
    assert got.shape == (len(stack), 23, N, N) and (got[:, :17] == stack).all()
    for f, libs in zip(stack, got[:, 17:], strict=True):
        assert (libs == _chain_liberties(f[0], f[8])).all()
        assert libs.sum() == f[0].sum() + f[8].sum()  # every stone in exactly one plane
    assert got[:, [17, 20]].any() and got[:, [19, 22]].any()  # ataris and safe chains both seen
    for k in range(8):  # derived from the position, so they turn with it
        assert (with_liberties(apply_planes(k, stack)) == apply_planes(k, got)).all()


def test_liberty_planes_of_a_small_position() -> None:
    g = Game(5)
    for move in (0, 1, 12, 24):  # black A5, white B5 (A5 in atari), black C3, white E1
        g.play(move)
    libs = with_liberties(g.features()[None])[0, 17:]  # black to move
    own, opp = libs[:3].reshape(3, 25), libs[3:].reshape(3, 25)
    assert np.flatnonzero(own[0]).tolist() == [0]  # A5: one liberty left
    assert np.flatnonzero(own[2]).tolist() == [12]  # C3: four
    assert np.flatnonzero(opp[1]).tolist() == [1, 24]  # B5 and E1: two each
    assert with_liberties(np.zeros((2, 17, 5, 5), np.float32))[:, 17:].sum() == 0
