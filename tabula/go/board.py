"""Stateless Go rules as numba kernels over flat boards: the engine the batched MCTS calls.

A position is a flat ``int8[M]`` board (``M = N*N``, index ``row*N + col``, row 0 on top;
+1 black, -1 white, 0 empty) plus its Zobrist hash. Every kernel below is ``@njit(cache=True,
nogil=True)``, takes only arrays and scalars, and may be called from other ``@njit`` code or
from Python. Nothing is compiled at import; the first call compiles (or loads numba's cache).

Per-size tables come from ``rules_context(N)`` (a cached Python function, arrays read-only):

- ``ctx.neighbors``: ``int32[M, 4]``, the up/down/left/right neighbours of each point,
  padded with -1 at the edges.
- ``ctx.zobrist``: ``uint64[2, M]``; row 0 = black stone keys, row 1 = white stone keys,
  generated from a FIXED seed per size, so hashes are identical across processes.

Hashes are board-only (positional superko: the side to move is NOT hashed):
``hash(board) = EMPTY_HASH ^ XOR(zobrist[0 if colour > 0 else 1, p] for stones p)``.
``EMPTY_HASH`` is a nonzero constant, so 0 never names a position (0 marks an empty
slot in the hash sets of ``hashset.py``).

Kernels (``nbr = ctx.neighbors``, ``zob = ctx.zobrist``, ``h`` = hash of ``board``):

``board_hash(board: int8[M], zob: uint64[2, M]) -> uint64``
    The hash from scratch, O(M).

``play_move(board: int8[M], move: int, color: int, nbr, zob, h: uint64, out: int8[M])
-> tuple[bool, uint64]``
    Plays ``move`` (0..M-1, or M = pass) for ``color`` (+1/-1) from ``board`` into ``out``
    (``out`` may be ``board`` itself for in place). Returns ``(ok, new_hash)`` where ``ok``
    is legality WITHOUT superko: False if the move is off the board, the point is occupied,
    or the move is suicide. When ``ok`` is False, ``out`` holds ``board`` unchanged and the
    returned hash is ``h``. Captures are removed. Pass copies the board and returns ``h``.
    Cost: O(size of the groups touched).

``move_status(board, move: int, color: int, nbr, zob, h, game_set: uint64[K],
path: uint64[P], n_path: int) -> int``
    Full legality of one move, with a reason: ``LEGAL`` (0), ``OCCUPIED`` (1), ``SUICIDE``
    (2), ``SUPERKO`` (3), ``OFF_BOARD`` (4). Superko: the resulting board's hash is in
    ``game_set`` or in ``path[:n_path]``. Pass is always ``LEGAL``.

``play_checked(board, move, color, nbr, zob, h, game_set, path, n_path, out: int8[M])
-> tuple[int, uint64]``
    ``move_status`` and ``play_move`` in one call: returns ``(status, new_hash)`` and, when
    the status is ``LEGAL``, the new board in ``out`` (which must not be ``board``; on any
    other status ``out`` is unspecified and the hash returned is ``h``).

``legal_mask(board, color: int, nbr, zob, h, game_set: uint64[K], path: uint64[P],
n_path: int, out: bool[M+1]) -> int``
    Writes the legal moves of ``color`` into ``out`` (``out[M]``, pass, is always True)
    and returns how many are True. ``game_set`` is the real game's hash set (every
    position so far, see ``hashset.py``); ``path[:n_path]`` are the extra positions of a
    search path below the real game (a plain array, scanned linearly). O(M): groups,
    exact liberty counts and per-group Zobrist XORs are computed once per call, then
    each candidate is decided in O(1) plus one hash-set probe.

``area_score(board: int8[M], nbr) -> int``
    Tromp-Taylor area: (black stones + empty points reaching only black) minus the same
    for white. The caller subtracts komi.

``fills_own_eye(board, p: int, color: int, nbr) -> bool``
    Whether every on-board neighbour of point ``p`` is ``color``: playing the empty ``p``
    would fill a single-point eye of ``color`` (the edge counts as ``color``, diagonals are
    not looked at). The one own-eye rule: the search's move pruning and the random player's
    ``own_eyes`` (below) both use it.

``own_eyes(board: int8[N, N], color: int) -> bool[N, N]`` (Python)
    The empty points that are single-point eyes of ``color``.

The superko sets are ``hashset.py``'s (``hashset_new(n) -> uint64[K]`` in Python or
``hashset_new_njit(n)`` in numba; ``hashset_insert(table, h: uint64) -> bool`` (True if
new), ``hashset_contains(table, h) -> bool``, ``hashset_remove(table, h) -> bool``). Pass
hashes as ``np.uint64``: a Python int above 2**63 cannot be typed by numba.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

import numpy as np
from numba import njit

from tabula.go.coords import check_size
from tabula.go.hashset import hashset_contains

LEGAL, OCCUPIED, SUICIDE, SUPERKO, OFF_BOARD = 0, 1, 2, 3, 4
REASONS = ("legal", "occupied", "suicide", "superko (repeats an earlier position)", "off the board")

EMPTY_HASH = np.uint64(0x6A09E667F3BCC909)  # any fixed nonzero value (sqrt(2) bits, SHA-512 IV)
_ZOBRIST_SEED = 0x7AB01A  # fixed: hashes must agree across processes and runs


class RulesContext(NamedTuple):
    """Per-size tables for the kernels. Arrays are read-only and shared by every caller."""

    N: int
    M: int
    neighbors: np.ndarray  # int32[M, 4], -1 padded
    zobrist: np.ndarray  # uint64[2, M], row 0 black, row 1 white


def _splitmix64(state: int, n: int) -> np.ndarray:
    """n values of SplitMix64 from ``state``: plain integer arithmetic, so the keys depend
    on nothing but the seed (not on numpy's generator streams)."""
    mask = (1 << 64) - 1
    out = np.empty(n, dtype=np.uint64)
    for k in range(n):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out[k] = z ^ (z >> 31)
    return out


@cache
def rules_context(N: int) -> RulesContext:
    """The neighbour table and Zobrist keys for an N x N board (N in 5..19), cached."""
    check_size(N)
    M = N * N
    nbr = np.full((M, 4), -1, dtype=np.int32)
    for i in range(M):
        r, c = divmod(i, N)
        for k, (rr, cc) in enumerate(((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))):
            if 0 <= rr < N and 0 <= cc < N:
                nbr[i, k] = rr * N + cc
    zob = _splitmix64(_ZOBRIST_SEED * 1000 + N, 2 * M).reshape(2, M)
    nbr.flags.writeable = False
    zob.flags.writeable = False
    return RulesContext(N, M, nbr, zob)


@njit(cache=True, nogil=True, inline="always")
def _key(zob: np.ndarray, color: int, p: int) -> np.uint64:
    return zob[0 if color > 0 else 1, p]


@njit(cache=True, nogil=True)
def board_hash(board: np.ndarray, zob: np.ndarray) -> np.uint64:
    """Zobrist hash of ``board`` from scratch (see the module docstring)."""
    h = EMPTY_HASH
    for p in range(board.shape[0]):
        if board[p] != 0:
            h ^= _key(zob, board[p], p)
    return h


@njit(cache=True, nogil=True)
def _group_without_liberty(board, nbr, start, mark, stamp, stack) -> int:
    """Flood the group at ``start``: -1 as soon as a liberty is seen, else its stone count
    (the stones are then ``stack[:n]``). ``mark == stamp`` flags visited points."""
    color = board[start]
    stack[0] = start
    mark[start] = stamp
    n, top = 1, 0
    while top < n:
        p = stack[top]
        top += 1
        for k in range(4):
            q = nbr[p, k]
            if q < 0 or mark[q] == stamp:
                continue
            v = board[q]
            if v == 0:
                return -1
            if v == color:
                mark[q] = stamp
                stack[n] = q
                n += 1
    return n


@njit(cache=True, nogil=True)
def play_move(board, move, color, nbr, zob, h, out):
    """See the module docstring. Returns (legal without superko, hash of ``out``)."""
    M = board.shape[0]
    h = np.uint64(h)
    if move < 0 or move > M or (move < M and board[move] != 0):
        if out.ctypes.data != board.ctypes.data:
            out[:] = board
        return False, h
    if out.ctypes.data != board.ctypes.data:
        out[:] = board
    if move == M:
        return True, h
    out[move] = color
    h ^= _key(zob, color, move)
    mark = np.zeros(M, dtype=np.int32)
    stack = np.empty(M, dtype=np.int32)
    captured = False
    for k in range(4):
        q = nbr[move, k]
        if q < 0 or out[q] != -color:
            continue  # empty, friendly, or already captured through another neighbour
        n = _group_without_liberty(out, nbr, q, mark, k + 1, stack)
        if n > 0:
            captured = True
            for j in range(n):
                out[stack[j]] = 0
                h ^= _key(zob, -color, stack[j])
    if not captured and _group_without_liberty(out, nbr, move, mark, 5, stack) > 0:
        out[move] = 0  # suicide: nothing was captured, so removing the stone restores board
        return False, h ^ _key(zob, color, move)
    return True, h


@njit(cache=True, nogil=True)
def _label_groups(board, nbr, zob, gid, glibs, ghash, stack) -> int:
    """Label every stone with its group (``gid``; -1 on empty points), and fill each group's
    exact liberty count ``glibs[g]`` and Zobrist XOR ``ghash[g]``. Returns the group count."""
    M = board.shape[0]
    gid[:] = -1
    ng = 0
    for s in range(M):
        if board[s] == 0 or gid[s] >= 0:
            continue
        color = board[s]
        gh = np.uint64(0)
        gid[s] = ng
        stack[0] = s
        n, top = 1, 0
        while top < n:
            p = stack[top]
            top += 1
            gh ^= _key(zob, color, p)
            for k in range(4):
                q = nbr[p, k]
                if q >= 0 and board[q] == color and gid[q] < 0:
                    gid[q] = ng
                    stack[n] = q
                    n += 1
        ghash[ng] = gh
        glibs[ng] = 0
        ng += 1
    # Each (empty point, adjacent group) pair is one liberty: count distinct groups per point.
    for p in range(M):
        if board[p] != 0:
            continue
        g0, g1, g2 = -1, -1, -1
        for k in range(4):
            q = nbr[p, k]
            if q < 0 or board[q] == 0:
                continue
            g = gid[q]
            if g == g0 or g == g1 or g == g2:
                continue
            glibs[g] += 1
            if g0 < 0:
                g0 = g
            elif g1 < 0:
                g1 = g
            else:
                g2 = g
    return ng


@njit(cache=True, nogil=True)
def _in_path(path, n_path, h) -> bool:
    for j in range(n_path):
        if path[j] == h:
            return True
    return False


@njit(cache=True, nogil=True)
def legal_mask(board, color, nbr, zob, h, game_set, path, n_path, out) -> int:
    """See the module docstring. ``out``: bool[M+1]; returns the number of legal moves."""
    M = board.shape[0]
    h = np.uint64(h)
    gid = np.empty(M, dtype=np.int32)
    glibs = np.empty(M, dtype=np.int32)
    ghash = np.empty(M, dtype=np.uint64)
    stack = np.empty(M, dtype=np.int32)
    _label_groups(board, nbr, zob, gid, glibs, ghash, stack)
    count = 1
    for p in range(M):
        out[p] = False
        if board[p] != 0:
            continue
        ok = False
        cap = np.uint64(0)
        c0, c1, c2 = -1, -1, -1  # captured groups seen so far (at most 4 neighbours)
        for k in range(4):
            q = nbr[p, k]
            if q < 0:
                continue
            v = board[q]
            if v == 0:
                ok = True
                continue
            g = gid[q]
            if v == color:
                if glibs[g] > 1:
                    ok = True  # joins a group that keeps another liberty
            elif glibs[g] == 1 and g != c0 and g != c1 and g != c2:
                ok = True  # captures: the new stone gets that liberty
                cap ^= ghash[g]
                if c0 < 0:
                    c0 = g
                elif c1 < 0:
                    c1 = g
                else:
                    c2 = g
        if not ok:
            continue
        nh = h ^ _key(zob, color, p) ^ cap
        if hashset_contains(game_set, nh) or _in_path(path, n_path, nh):
            continue
        out[p] = True
        count += 1
    out[M] = True
    return count


@njit(cache=True, nogil=True)
def play_checked(board, move, color, nbr, zob, h, game_set, path, n_path, out):
    """See the module docstring: (status, hash of ``out``); ``out`` must not be ``board``."""
    M = board.shape[0]
    h = np.uint64(h)
    if move < 0 or move > M:
        return OFF_BOARD, h
    if move < M and board[move] != 0:
        return OCCUPIED, h
    ok, nh = play_move(board, move, color, nbr, zob, h, out)
    if not ok:
        return SUICIDE, h
    if move < M and (hashset_contains(game_set, nh) or _in_path(path, n_path, nh)):
        return SUPERKO, h
    return LEGAL, nh


@njit(cache=True, nogil=True)
def move_status(board, move, color, nbr, zob, h, game_set, path, n_path) -> int:
    """See the module docstring: LEGAL, OCCUPIED, SUICIDE, SUPERKO or OFF_BOARD."""
    scratch = np.empty(board.shape[0], dtype=np.int8)
    return play_checked(board, move, color, nbr, zob, h, game_set, path, n_path, scratch)[0]


@njit(cache=True, nogil=True)
def flood_region(board, s, nbr, seen, stack, stop) -> tuple[int, bool, bool]:
    """Flood the empty region of empty point ``s``: its points are marked in ``seen`` and
    listed in ``stack[:n]``. Returns (n, whether it reaches a black stone, a white one); the
    flood stops at the first stone of colour ``stop`` (0: never, and the region is whole)."""
    seen[s] = True
    stack[0] = s
    n, top = 1, 0
    reach_black, reach_white = False, False
    while top < n:
        p = stack[top]
        top += 1
        for k in range(4):
            q = nbr[p, k]
            if q < 0:
                continue
            v = board[q]
            if v != 0 and v == stop:
                return n, reach_black or v > 0, reach_white or v < 0
            if v > 0:
                reach_black = True
            elif v < 0:
                reach_white = True
            elif not seen[q]:
                seen[q] = True
                stack[n] = q
                n += 1
    return n, reach_black, reach_white


@njit(cache=True, nogil=True)
def area_ownership(board, nbr) -> np.ndarray:
    """int8[M]: who owns each point under Tromp-Taylor area scoring: +1 black (a black stone,
    or an empty point whose region reaches black alone), -1 white, 0 neither (dame). Its sum
    is ``area_score``; the auxiliary ownership target of KataGo (Wu 2019), from a finished game."""
    M = board.shape[0]
    owner = np.zeros(M, dtype=np.int8)
    seen = np.zeros(M, dtype=np.bool_)
    stack = np.empty(M, dtype=np.int32)
    for s in range(M):
        if board[s] != 0:
            owner[s] = board[s]
            continue
        if seen[s]:
            continue
        # One empty region scores for a colour only if it reaches that colour alone.
        n, reach_black, reach_white = flood_region(board, s, nbr, seen, stack, 0)
        colour = (
            1 if reach_black and not reach_white else -1 if reach_white and not reach_black else 0
        )
        for j in range(n):
            owner[stack[j]] = colour
    return owner


@njit(cache=True, nogil=True)
def area_score(board, nbr) -> int:
    """Tromp-Taylor area score, black minus white, before komi (see the module docstring): the
    sum of ``area_ownership``."""
    return int(np.sum(area_ownership(board, nbr).astype(np.int64)))


@njit(cache=True, nogil=True)
def fills_own_eye(board, p, color, nbr) -> bool:
    """Every on-board neighbour of ``p`` is ``color`` (see the module docstring)."""
    for k in range(4):
        q = nbr[p, k]
        if q >= 0 and board[q] != color:
            return False
    return True


@njit(cache=True, nogil=True)
def _own_eye_points(board, color, nbr, out) -> None:
    for p in range(board.shape[0]):
        out[p] = board[p] == 0 and fills_own_eye(board, p, color, nbr)


def own_eyes(board: np.ndarray, color: int) -> np.ndarray:
    """Single-point eyes of ``color``: empty points whose on-board neighbours are all ``color``.

    board: int8[N, N] (+1 black, -1 white, 0 empty). Returns bool[N, N]. The board edge
    counts as ``color``, so a corner needs two stones. Diagonals are not looked at.
    """
    N = board.shape[0]
    flat = np.ascontiguousarray(board, dtype=np.int8).reshape(N * N)
    out = np.empty(N * N, dtype=np.bool_)
    _own_eye_points(flat, int(color), rules_context(N).neighbors, out)
    return out.reshape(N, N)
