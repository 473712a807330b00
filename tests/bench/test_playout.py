"""The benchmarks' incremental engine (``bench/playout.py``) against ``Game`` and a recompute;
its kernels compile on first use, once per machine (numba's on-disk cache)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from bench.playout import (
    new_state,
    random_game,
    random_games,
    random_games_stateless,
    random_move,
    state_legal_mask,
    state_play,
    state_reset,
)
from tabula.go import Game
from tabula.go.board import rules_context
from tabula.go.hashset import hashset_contains, hashset_count
from tests.helpers.go import ref_group, ref_neighbors
from tests.helpers.numba import check_the_cache_serves_a_second_process, compiled_at_import


def _rng(seed: int) -> np.ndarray:
    return np.array([seed * 2 + 1], dtype=np.uint64)


def check_groups(st, N: int) -> None:
    """Group bookkeeping equals a recompute from the board: members, pseudo-liberties,
    hashes, and the empty list."""
    board = [int(v) for v in st.board]
    zob = rules_context(N).zobrist
    empties = set(np.flatnonzero(st.board == 0).tolist())
    assert set(st.empties[: st.meta[0]].tolist()) == empties
    assert all(st.empties[st.epos[p]] == p for p in empties)
    for p in np.flatnonzero(st.board):
        stones, libs = ref_group(board, int(p), N)
        root = int(st.gid[p])
        assert int(st.gid[root]) == root and root in stones
        ring, s = [], root
        while True:
            ring.append(s)
            s = int(st.nxt[s])
            if s == root:
                break
        assert sorted(ring) == sorted(stones) and st.gsize[root] == len(stones)
        pairs = [q for s in stones for q in ref_neighbors(s, N) if board[q] == 0]
        assert st.plib[root] == len(pairs)
        assert st.lsum[root] == sum(pairs) and st.lsq[root] == sum(q * q for q in pairs)
        in_atari = st.plib[root] * st.lsq[root] == st.lsum[root] ** 2
        assert in_atari == (len(libs) == 1)
        expected = 0
        for s in stones:
            expected ^= int(zob[0 if board[s] > 0 else 1, s])
        assert int(st.ghash[root]) == expected


@pytest.mark.parametrize("N,games", [(5, 300), (9, 30), (19, 3)])
def test_random_games_replay_legally_in_game(N: int, games: int) -> None:
    ctx = rules_context(N)
    st = new_state(N)
    rng = _rng(N)
    moves = np.empty(2 * N * N, dtype=np.int32)
    for _ in range(games):
        n = random_game(st, ctx.neighbors, ctx.zobrist, rng, moves)
        g = Game(N)
        for m in moves[:n]:
            g.play(int(m))  # raises if the engine played an illegal move
        assert g.is_over() and g.move_number == n
        assert (g.board.ravel() == st.board).all()
        assert g.position_hash == int(st.hsh[0])
        table = g.hash_set()
        assert hashset_count(st.seen) == hashset_count(table)
        assert all(hashset_contains(st.seen, v) for v in table[table != 0])


@pytest.mark.parametrize("N,games", [(5, 150), (9, 15), (19, 2)])
def test_incremental_mask_and_groups_match_recompute(N: int, games: int) -> None:
    ctx = rules_context(N)
    nbr, zob = ctx.neighbors, ctx.zobrist
    st = new_state(N)
    rng = np.random.default_rng(N)
    mask = np.empty(N * N + 1, dtype=np.bool_)
    for _ in range(games):
        state_reset(st, nbr)
        g = Game(N)
        while not g.is_over():
            state_legal_mask(st, g.to_play, nbr, zob, mask)
            expected = g.legal_mask()
            assert (mask == expected).all()
            legal = np.flatnonzero(expected)
            move = int(legal[rng.integers(len(legal))])
            state_play(st, move, g.to_play, nbr, zob)
            g.play(move)
            assert (g.board.ravel() == st.board).all()
            if g.move_number % 7 == 0:
                check_groups(st, N)
        check_groups(st, N)


def test_random_move_is_uniform_over_legal_moves() -> None:
    ctx = rules_context(5)
    nbr, zob = ctx.neighbors, ctx.zobrist
    st = new_state(5)
    state_reset(st, nbr)
    # White stones around C3 make it suicide for black; B2 and D4 are occupied.
    for p, c in [(7, -1), (11, -1), (13, -1), (17, -1), (6, 1), (18, 1)]:
        state_play(st, p, c, nbr, zob)
    mask = np.empty(26, dtype=np.bool_)
    n_legal = state_legal_mask(st, 1, nbr, zob, mask)
    assert not mask[12] and n_legal == 26 - 6 - 1
    rng = _rng(7)
    draws = 40_000
    counts = np.bincount([random_move(st, 1, nbr, zob, rng) for _ in range(draws)], minlength=26)
    assert (counts[~mask] == 0).all()
    expected = draws / n_legal
    # each count is ~Binomial(draws, 1/19): sd ~ 43; 6 sd bounds never fail by chance
    assert np.abs(counts[mask] - expected).max() < 6 * np.sqrt(expected)


@pytest.mark.parametrize("N", [5, 9])
def test_stateless_and_incremental_benchmark_loops_play_full_games(N: int) -> None:
    ctx = rules_context(N)
    total = random_games(new_state(N), ctx.neighbors, ctx.zobrist, 3, 20)
    assert 20 * 2 <= total <= 20 * 2 * N * N
    total = random_games_stateless(ctx.neighbors, ctx.zobrist, 3, 20)
    assert 20 * 2 <= total <= 20 * 2 * N * N


# -- compilation: nothing at import, numba's on-disk cache serves a second process -----------

_PLAYOUTS = textwrap.dedent("""
    from tabula.go.board import rules_context
    from bench.playout import new_state, random_games, random_games_stateless
    ctx = rules_context(9)
    random_games(new_state(9), ctx.neighbors, ctx.zobrist, 1, 2)
    random_games_stateless(ctx.neighbors, ctx.zobrist, 1, 2)
""")


def test_importing_compiles_nothing() -> None:
    n_kernels, n_compiled = compiled_at_import(["bench.playout"])
    assert n_kernels >= 10 and n_compiled == 0


@pytest.mark.slow
def test_a_second_process_loads_the_playouts_from_the_cache(tmp_path: Path) -> None:
    check_the_cache_serves_a_second_process(["bench.playout"], _PLAYOUTS, tmp_path, kernels=2)
