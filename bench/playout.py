"""Incremental Go state for fast sequential play: the random playouts of ``bench/engine.py``.

Not part of the package: tabula's search uses the stateless kernels of ``tabula.go.board``;
this engine serves the engine benchmark (tabula against OpenSpiel) and its tests.

``tabula.go.board`` recomputes groups per call, which suits a search that jumps between positions.
A game played forward move by move can instead keep its groups up to date, so each move is
decided in O(1). ``PlayState`` holds, per group (indexed by a root stone):

- a circular list of its stones (``nxt``) and its size, to merge and capture in O(size);
- its pseudo-liberties: ``plib`` counts (empty point, adjacent stone) pairs, ``lsum`` and
  ``lsq`` sum the point index and its square over those pairs. A group is in atari (exactly
  one distinct liberty) iff ``plib * lsq == lsum**2`` (Cauchy-Schwarz holds with equality
  only when all the summed indices are equal), and has no liberty iff ``plib == 0``;
- the XOR of its stones' Zobrist keys (``ghash``), so the hash after a capture is O(1).

Plus the list of empty points (``empties[:n_empty]`` with positions ``epos``) to draw moves
from, the board hash, and the game's superko hash set. Same conventions as ``tabula.go.board``
(flat ``int8[M]`` board, +1 black, -1 white, pass = ``M``, same Zobrist keys and hashes).

Kernels (all ``@njit(cache=True, nogil=True)``; ``nbr``/``zob`` from ``rules_context(N)``):

- ``state_reset(st, nbr)``: the empty board, its hash in the set.
- ``state_is_legal(st, p, color, nbr, zob) -> bool``: full legality (superko included) of
  the point ``p`` (0..M-1) for ``color``.
- ``state_play(st, move, color, nbr, zob)``: plays a move already known legal (or pass).
- ``state_legal_mask(st, color, nbr, zob, out: bool[M+1]) -> int``: O(M) mask, pass True.
- ``random_move(st, color, nbr, zob, rng: uint64[1]) -> int``: a move uniform among the
  legal moves of ``color`` including pass (rejection sampling over the empty points).
- ``random_game(st, nbr, zob, rng: uint64[1], moves_out: int32[K]) -> int``: one game to
  the end (two passes in a row or 2*N*N moves), each move uniform among the legal moves
  including pass; writes the first K moves and returns the game's length.
- ``random_games(st, nbr, zob, seed, n_games) -> int``: total moves over ``n_games`` games.
- ``random_games_stateless(nbr, zob, seed, n_games) -> int``: the same games played with
  ``board.legal_mask`` and ``board.play_move`` (the MCTS path), for comparison.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from tabula.go.board import EMPTY_HASH, _key, legal_mask, play_move
from tabula.go.hashset import hashset_contains, hashset_insert, hashset_new, hashset_new_njit


class PlayState(NamedTuple):
    """Mutable arrays of one game in progress (see the module docstring). Build with
    ``new_state(N)``; every field is indexed by point (group fields by the group's root)."""

    board: np.ndarray  # int8[M]
    gid: np.ndarray  # int32[M]: root stone of the group of each stone
    nxt: np.ndarray  # int32[M]: next stone in the same group (circular)
    gsize: np.ndarray  # int32[M]
    plib: np.ndarray  # int32[M]: pseudo-liberty count
    lsum: np.ndarray  # int64[M]: sum of pseudo-liberty indices
    lsq: np.ndarray  # int64[M]: sum of squared pseudo-liberty indices
    ghash: np.ndarray  # uint64[M]: XOR of the group's stone keys
    empties: np.ndarray  # int32[M]: empties[:n_empty] are the empty points, any order
    epos: np.ndarray  # int32[M]: index of each empty point in ``empties``
    meta: np.ndarray  # int64[1]: n_empty
    hsh: np.ndarray  # uint64[1]: board hash
    seen: np.ndarray  # uint64[K]: hash set of every position so far (hashset.py)


def new_state(N: int) -> PlayState:
    """Arrays for one N x N game (call ``state_reset`` before playing)."""
    M = N * N
    i32 = np.int32
    return PlayState(
        np.zeros(M, np.int8), np.zeros(M, i32), np.zeros(M, i32), np.zeros(M, i32),
        np.zeros(M, i32), np.zeros(M, np.int64), np.zeros(M, np.int64),
        np.zeros(M, np.uint64), np.zeros(M, i32), np.zeros(M, i32), np.zeros(1, np.int64),
        np.zeros(1, np.uint64), hashset_new(2 * M + 1),
    )  # fmt: skip


@njit(cache=True, nogil=True)
def state_reset(st, nbr) -> None:
    """Empty board; the set holds only the empty position."""
    M = st.board.shape[0]
    st.board[:] = 0
    for p in range(M):
        st.empties[p] = p
        st.epos[p] = p
    st.meta[0] = M
    st.hsh[0] = EMPTY_HASH
    st.seen[:] = 0
    hashset_insert(st.seen, EMPTY_HASH)


@njit(cache=True, nogil=True, inline="always")
def _in_atari(st, g) -> bool:
    return st.plib[g] * st.lsq[g] == st.lsum[g] * st.lsum[g]


@njit(cache=True, nogil=True)
def state_is_legal(st, p, color, nbr, zob) -> bool:
    """Full legality of stone ``color`` at ``p`` (0..M-1): empty, not suicide, no superko."""
    board = st.board
    if board[p] != 0:
        return False
    ok = False
    cap = np.uint64(0)
    c0, c1, c2 = -1, -1, -1
    for k in range(4):
        q = nbr[p, k]
        if q < 0:
            continue
        v = board[q]
        if v == 0:
            ok = True
            continue
        g = st.gid[q]
        if v == color:
            if not _in_atari(st, g):
                ok = True  # p is one of its liberties, and it has another
        elif _in_atari(st, g) and g != c0 and g != c1 and g != c2:
            ok = True  # its only liberty is p: captured
            cap ^= st.ghash[g]
            if c0 < 0:
                c0 = g
            elif c1 < 0:
                c1 = g
            else:
                c2 = g
    if not ok:
        return False
    return not hashset_contains(st.seen, st.hsh[0] ^ _key(zob, color, p) ^ cap)


@njit(cache=True, nogil=True, inline="always")
def _add_lib(st, g, p) -> None:
    st.plib[g] += 1
    st.lsum[g] += p
    st.lsq[g] += p * p


@njit(cache=True, nogil=True, inline="always")
def _remove_lib(st, g, p) -> None:
    st.plib[g] -= 1
    st.lsum[g] -= p
    st.lsq[g] -= p * p


@njit(cache=True, nogil=True)
def _merge(st, a, b) -> int:
    """Merge groups with roots a and b (a != b); returns the surviving root."""
    if st.gsize[a] < st.gsize[b]:
        a, b = b, a
    s = b
    while True:  # relabel the smaller group
        st.gid[s] = a
        s = st.nxt[s]
        if s == b:
            break
    st.nxt[a], st.nxt[b] = st.nxt[b], st.nxt[a]  # splice the two circular lists
    st.gsize[a] += st.gsize[b]
    st.plib[a] += st.plib[b]
    st.lsum[a] += st.lsum[b]
    st.lsq[a] += st.lsq[b]
    st.ghash[a] ^= st.ghash[b]
    return a


@njit(cache=True, nogil=True)
def _capture(st, g, nbr, zob) -> None:
    """Remove the group with root g; its neighbours gain the freed points as liberties."""
    color = st.board[g]
    s = g
    while True:
        st.board[s] = 0
        st.hsh[0] ^= _key(zob, color, s)
        n = st.meta[0]
        st.empties[n] = s
        st.epos[s] = n
        st.meta[0] = n + 1
        for k in range(4):
            t = nbr[s, k]
            # Stones of g not yet removed still carry gid g; every other stone is an enemy.
            if t >= 0 and st.board[t] != 0 and st.gid[t] != g:
                _add_lib(st, st.gid[t], s)
        s = st.nxt[s]
        if s == g:
            break


@njit(cache=True, nogil=True)
def state_play(st, move, color, nbr, zob) -> None:
    """Play ``move`` for ``color``; the caller guarantees it is legal. Pass changes nothing
    (the position, already in the set, repeats)."""
    M = st.board.shape[0]
    if move == M:
        return
    p = move
    last = st.meta[0] - 1  # take p out of the empty list: move the last entry into its slot
    moved = st.empties[last]
    st.empties[st.epos[p]] = moved
    st.epos[moved] = st.epos[p]
    st.meta[0] = last
    key = _key(zob, color, p)
    st.board[p] = color
    st.hsh[0] ^= key
    st.gid[p] = p
    st.nxt[p] = p
    st.gsize[p] = 1
    st.plib[p] = 0
    st.lsum[p] = 0
    st.lsq[p] = 0
    st.ghash[p] = key
    for k in range(4):
        q = nbr[p, k]
        if q < 0:
            continue
        if st.board[q] == 0:
            _add_lib(st, p, q)
        else:
            _remove_lib(st, st.gid[q], p)
    for k in range(4):
        q = nbr[p, k]
        if q >= 0 and st.board[q] == color and st.gid[q] != st.gid[p]:
            _merge(st, st.gid[q], st.gid[p])
    for k in range(4):
        q = nbr[p, k]
        if q >= 0 and st.board[q] == -color and st.plib[st.gid[q]] == 0:
            _capture(st, st.gid[q], nbr, zob)
    hashset_insert(st.seen, st.hsh[0])


@njit(cache=True, nogil=True)
def state_legal_mask(st, color, nbr, zob, out) -> int:
    """Legal moves of ``color`` into ``out`` (bool[M+1], pass True); returns their count."""
    M = st.board.shape[0]
    count = 1
    for p in range(M):
        out[p] = st.board[p] == 0 and state_is_legal(st, p, color, nbr, zob)
        count += out[p]
    out[M] = True
    return count


@njit(cache=True, nogil=True, inline="always")
def _rand_below(rng, n) -> int:
    """Uniform integer in [0, n) from an xorshift64* generator held in rng[0]."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    r = (x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(32)
    return int((r * np.uint64(n)) >> np.uint64(32))


@njit(cache=True, nogil=True)
def random_move(st, color, nbr, zob, rng) -> int:
    """A move uniform among ``color``'s legal moves, pass included, without the full mask.

    Draws among the untried empty points plus pass; an illegal draw is swapped past the
    untried range and the draw repeats. Every legal move (and pass) is equally likely to be
    the first legal draw, so the result is uniform. Reorders ``empties`` (keeping ``epos``)."""
    M = st.board.shape[0]
    k = st.meta[0]
    while True:
        r = _rand_below(rng, k + 1)
        if r == k:
            return M  # pass
        p = st.empties[r]
        if state_is_legal(st, p, color, nbr, zob):
            return p
        other = st.empties[k - 1]
        st.empties[r], st.empties[k - 1] = other, p
        st.epos[other], st.epos[p] = r, k - 1
        k -= 1


@njit(cache=True, nogil=True)
def random_game(st, nbr, zob, rng, moves_out) -> int:
    """One uniformly random game from the empty board to the end (see the module
    docstring); writes the first ``len(moves_out)`` moves and returns the game's length."""
    M = st.board.shape[0]
    state_reset(st, nbr)
    color, passes, n = 1, 0, 0
    while passes < 2 and n < 2 * M:  # game end: two passes, or 2*N*N moves (PAPER_NOTES)
        move = random_move(st, color, nbr, zob, rng)
        state_play(st, move, color, nbr, zob)
        passes = passes + 1 if move == M else 0
        if n < moves_out.shape[0]:
            moves_out[n] = move
        n += 1
        color = -color
    return n


@njit(cache=True, nogil=True)
def random_games(st, nbr, zob, seed, n_games) -> int:
    """Total moves of ``n_games`` random games (benchmark loop)."""
    rng = np.full(1, np.uint64(seed) * np.uint64(2) + np.uint64(1), dtype=np.uint64)
    moves = np.empty(0, dtype=np.int32)
    total = 0
    for _ in range(n_games):
        total += random_game(st, nbr, zob, rng, moves)
    return total


@njit(cache=True, nogil=True)
def random_games_stateless(nbr, zob, seed, n_games) -> int:
    """Like ``random_games`` but each move computes ``board.legal_mask`` and plays with
    ``board.play_move`` in place: the per-move cost the tree search pays."""
    M = nbr.shape[0]
    rng = np.full(1, np.uint64(seed) * np.uint64(2) + np.uint64(1), dtype=np.uint64)
    board = np.zeros(M, dtype=np.int8)
    seen = hashset_new_njit(2 * M + 1)
    path = np.zeros(0, dtype=np.uint64)
    mask = np.zeros(M + 1, dtype=np.bool_)
    total = 0
    for _ in range(n_games):
        board[:] = 0
        seen[:] = 0
        h = EMPTY_HASH
        hashset_insert(seen, h)
        color, passes, n = 1, 0, 0
        while passes < 2 and n < 2 * M:
            count = legal_mask(board, color, nbr, zob, h, seen, path, 0, mask)
            r = _rand_below(rng, count)
            move = M
            for p in range(M):
                if mask[p]:
                    if r == 0:
                        move = p
                        break
                    r -= 1
            ok, h = play_move(board, move, color, nbr, zob, h, board)
            hashset_insert(seen, h)
            passes = passes + 1 if move == M else 0
            n += 1
            color = -color
        total += n
    return total


__all__ = [
    "PlayState",
    "new_state",
    "random_game",
    "random_games",
    "random_games_stateless",
    "state_is_legal",
    "state_legal_mask",
    "state_play",
    "state_reset",
]
