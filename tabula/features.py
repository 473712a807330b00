"""The network's input planes and the 8 dihedral symmetries of the board.

Planes (Silver et al. 2017, Methods "Neural network architecture"): 17 binary planes of
N x N from the side to move's view, ``uint8[17, N, N]``:

- planes 0..7: the side to move's stones at times t, t-1, ..., t-7;
- planes 8..15: the opponent's stones at the same times;
- plane 16: all ones if black is to move, all zeros if white is.

With ``network.liberties`` (ours, after KataGo's liberty inputs: Wu 2019, "Accelerating
Self-Play Learning in Go", section 4.1), 6 planes follow, ``uint8[23, N, N]`` in all, each
derived from planes 0 and 8 (the position now), so nothing else records them:

- planes 17, 18, 19: the side to move's stones whose chain has 1, 2, or 3 and more liberties;
- planes 20, 21, 22: the opponent's, likewise.

A 3x3 convolution sees a liberty only next to a stone; a long chain's count would take a deep
tower to rebuild, and a chain in atari is what a weak player misses (`with_liberties`).

With ``network.ladders`` (ours, after KataGo's ladder inputs, the same section), 3 planes
follow those (or the 17, without the liberty planes), again derived from planes 0 and 8 by a
ladder search (`tabula.ladders`): the side to move's stones a ladder captures, the
opponent's, and the side to move's moves that start a ladder capturing an opponent's chain.
A ladder runs along a diagonal the width of the board, far beyond what a few 3x3
convolutions see. `Inputs` names which derived planes a network takes; `tabula.inputs.with_inputs`
adds them.

Times before the game start are empty boards (all-zero planes). The input is a stack of
recent flat boards ``int8[8, M]``, most recent first (``Game.recent_boards()``), plus the
colour to move (+1 black, -1 white).

Symmetries (the paper's d_i, used for augmentation and for evaluating a leaf under a random
transform). Transform ``k`` in 0..7 is ``k = 4*flip + rot``: first rotate by ``rot``
quarter turns counter-clockwise (``np.rot90`` on the last two axes [row, col]), then, if
``flip``, mirror left-right (``np.flip`` on the last axis). ``k = 0`` is the identity.
A policy vector of length M+1 is transformed on its first M entries viewed as [N, N];
the pass entry (index M) never moves.

- ``symmetry_permutations(N)[k]`` (int64[8, M+1]) is the gather index with
  ``apply_policy(k, p) == p[perm[k]]``, and for boards ``apply_planes(k, x).reshape(..., M)
  == x.reshape(..., M)[..., perm[k][:M]]``.
- ``inverse_symmetry(k)`` names the transform that undoes ``k``, so that
  ``apply_policy(inverse_symmetry(k), apply_policy(k, p)) == p`` (likewise for planes).
  Rotations invert to the opposite rotation; the four mirrored transforms are their own
  inverses.
- ``inverse_symmetry_permutations(N)[k] == symmetry_permutations(N)[inverse_symmetry(k)]``,
  the gather that maps a transformed policy back (what an evaluator applies to its output).
- ``transform_move(k, move, N)``: where a move lands on the transformed board.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

import numpy as np
from numba import njit

NUM_PLANES = 17
HISTORY = 8  # board positions per player in the input (t .. t-7)
NUM_SYMMETRIES = 8
LIBERTY_PLANES = 6  # 1, 2, >= 3 liberties, for each side
LADDER_PLANES = 3  # laddered stones of each side, moves that start a ladder (`tabula.ladders`)


class Inputs(NamedTuple):
    """Which planes derived from the position a network takes after the 17: the 6 liberty
    planes, then the 3 ladder planes (the module docstring)."""

    liberties: bool = False
    ladders: bool = False

    @property
    def planes(self) -> int:
        """How many planes the network takes in all."""
        return (NUM_PLANES + (LIBERTY_PLANES if self.liberties else 0)
                + (LADDER_PLANES if self.ladders else 0))  # fmt: skip


@njit(cache=True, nogil=True)
def fill_planes(recent: np.ndarray, color: int, out: np.ndarray) -> None:
    """Write the 17 planes for ``recent`` (int8[8, M], most recent first) and ``color`` to
    move into ``out`` (uint8[17, N, N])."""
    N = out.shape[1]
    for t in range(HISTORY):
        for r in range(N):
            for c in range(N):
                v = recent[t, r * N + c]
                out[t, r, c] = 1 if v == color else 0
                out[HISTORY + t, r, c] = 1 if v == -color else 0
    out[2 * HISTORY, :, :] = 1 if color > 0 else 0


@njit(cache=True, nogil=True)
def fill_planes_batch(recent: np.ndarray, colors: np.ndarray, out: np.ndarray) -> None:
    """Batched ``fill_planes``: recent int8[B, 8, M], colors int[B], out uint8[B, 17, N, N]."""
    for b in range(recent.shape[0]):
        fill_planes(recent[b], colors[b], out[b])


def planes(recent: np.ndarray, color: int) -> np.ndarray:
    """uint8[17, N, N] from recent boards int8[8, M] (numpy; same result as ``fill_planes``)."""
    recent = np.asarray(recent, dtype=np.int8)
    N = int(round(recent.shape[-1] ** 0.5))
    boards = recent.reshape(HISTORY, N, N)
    out = np.empty((NUM_PLANES, N, N), dtype=np.uint8)
    out[:HISTORY] = boards == color
    out[HISTORY : 2 * HISTORY] = boards == -color
    out[2 * HISTORY] = 1 if color > 0 else 0
    return out


@njit(cache=True, nogil=True)
def fill_liberty_planes(planes: np.ndarray, out: np.ndarray) -> None:
    """Write the 6 liberty planes of each position of ``planes`` (uint8[B, >= 9, N, N], planes
    0 and 8 its stones now) into ``out`` (uint8[B, 6, N, N]): the module docstring's planes 17
    to 22. One flood fill a chain; a chain without a liberty (no legal position has one) is
    left out."""
    B, N = planes.shape[0], planes.shape[2]
    M = N * N
    seen = np.zeros(M, np.int64)  # == the current (board, side) stamp: in a chain found
    counted = np.zeros(M, np.int64)  # == the current chain's stamp: a liberty it has
    stack = np.empty(M, np.int64)
    chain = np.empty(M, np.int64)
    board, found = 0, 0
    out[:] = 0
    for b in range(B):
        for side in range(2):
            plane = side * HISTORY
            board += 1
            for start in range(M):
                if planes[b, plane, start // N, start % N] == 0 or seen[start] == board:
                    continue
                found += 1
                seen[start] = board
                stack[0], top, size, libs = start, 1, 0, 0
                while top > 0:
                    top -= 1
                    p = stack[top]
                    chain[size] = p
                    size += 1
                    r, c = p // N, p % N
                    for k in range(4):
                        rr = r + (k == 1) - (k == 0)
                        cc = c + (k == 3) - (k == 2)
                        if rr < 0 or rr >= N or cc < 0 or cc >= N:
                            continue
                        q = rr * N + cc
                        if planes[b, plane, rr, cc]:
                            if seen[q] != board:
                                seen[q] = board
                                stack[top] = q
                                top += 1
                        elif planes[b, HISTORY - plane, rr, cc] == 0 and counted[q] != found:
                            counted[q] = found
                            libs += 1
                if libs == 0:
                    continue
                level = side * 3 + min(libs, 3) - 1
                for j in range(size):
                    out[b, level, chain[j] // N, chain[j] % N] = 1


def with_liberties(planes: np.ndarray) -> np.ndarray:
    """``planes`` (uint8, float32 or bool [B, 17, N, N]) with the 6 liberty planes after them:
    uint8[B, 23, N, N] (the module docstring)."""
    b, _, n, _ = planes.shape
    out = np.empty((b, NUM_PLANES + LIBERTY_PLANES, n, n), dtype=np.uint8)
    out[:, :NUM_PLANES] = planes  # (cast to uint8 once; the fill reads its planes 0 and 8)
    fill_liberty_planes(out, out[:, NUM_PLANES:])
    return out


def _check_k(k: int) -> None:
    if not 0 <= k < NUM_SYMMETRIES:
        raise ValueError(f"symmetry index must be in 0..7, got {k}")


def apply_planes(k: int, x: np.ndarray) -> np.ndarray:
    """Transform ``k`` applied to the last two axes [row, col] of ``x`` (a new array)."""
    _check_k(k)
    y = np.rot90(x, k % 4, axes=(-2, -1))
    if k >= 4:
        y = np.flip(y, axis=-1)
    return np.ascontiguousarray(y)


def apply_policy(k: int, p: np.ndarray) -> np.ndarray:
    """Transform ``k`` applied to policies ``p[..., M+1]`` (pass unchanged; a new array)."""
    M = p.shape[-1] - 1
    N = int(round(M**0.5))
    if N * N != M:
        raise ValueError(f"a policy has length N*N+1, got {p.shape[-1]}")
    return np.take(p, symmetry_permutations(N)[k], axis=-1)


def inverse_symmetry(k: int) -> int:
    """The transform that undoes ``k``."""
    _check_k(k)
    return k if k >= 4 else (4 - k) % 4


@cache
def symmetry_permutations(N: int) -> np.ndarray:
    """int64[8, M+1] gather indices: ``apply_policy(k, p) == p[perm[k]]`` (read-only)."""
    M = N * N
    idx = np.arange(M).reshape(N, N)
    perm = np.empty((NUM_SYMMETRIES, M + 1), dtype=np.int64)
    for k in range(NUM_SYMMETRIES):
        perm[k, :M] = apply_planes(k, idx).ravel()
        perm[k, M] = M
    perm.flags.writeable = False
    return perm


@cache
def inverse_symmetry_permutations(N: int) -> np.ndarray:
    """int64[8, M+1]: row k undoes transform k (``== symmetry_permutations(N)[inverse(k)]``)."""
    perm = symmetry_permutations(N)
    inv = np.stack([perm[inverse_symmetry(k)] for k in range(NUM_SYMMETRIES)])
    inv.flags.writeable = False
    return inv


def transform_move(k: int, move: int, N: int) -> int:
    """The flat index where ``move`` lands under transform ``k`` (pass stays pass)."""
    # transformed[i] = original[perm[i]], so the original point ``move`` lands where perm
    # equals it, i.e. at inverse_perm[move].
    return int(inverse_symmetry_permutations(N)[k][move])
