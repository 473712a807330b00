"""Test helpers: ASCII diagrams in GTP coordinates, and a slow, obvious reference Go.

Diagram format (row numbers on the left as in GTP, optional column letters line)::

       A B C D E
     5 . . . . .
     4 . X O . .
     3 . . . . .
     2 . . . . .
     1 . . . . .

``X`` black, ``O`` white, ``.`` (or ``+``) empty. The reference rules below are written for
clarity with Python sets, independent of the numba kernels, so the kernels can be checked
against them ("recompute from scratch").
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from tabula.go import Game, IllegalMoveError
from tabula.go.board import board_hash, rules_context
from tabula.go.coords import from_gtp

SUPERKO = "superko (repeats an earlier position)"

# A ko: black C2 captures B2; white retaking at B2 at once would repeat the position.
KO = """
    5 . . . . .
    4 . . . . .
    3 . X O . .
    2 X O . O .
    1 . X O . .
"""

_CELLS = {"X": 1, "O": -1, ".": 0, "+": 0}


def parse_diagram(text: str) -> np.ndarray:
    """Flat int8[M] board from a diagram (see the module docstring)."""
    rows = []
    for line in text.strip("\n").splitlines():
        tokens = line.split()
        if not tokens or tokens[0] == "A":
            continue  # blank line or the column-letter header
        if tokens[0].isdigit():
            tokens = tokens[1:]
        cells = "".join(tokens)
        rows.append([_CELLS[ch] for ch in cells])
    N = len(rows)
    if any(len(r) != N for r in rows):
        raise ValueError(f"diagram is not square: {[len(r) for r in rows]}")
    return np.array(rows, dtype=np.int8).ravel()


def game_from_diagram(text: str, to_play: int = 1, komi: float = 7.5) -> Game:
    """A Game whose board is the diagram. The stones are played one by one with explicit
    colours (as a GTP controller would set up a position); no placement order can capture,
    since every group of a valid diagram has a liberty. Setup positions join the history."""
    board = parse_diagram(text)
    N = int(round(len(board) ** 0.5))
    g = Game(N, komi=komi)
    for p in np.flatnonzero(board):
        g.play(int(p), int(board[p]))
    g.to_play = to_play
    assert (g.board.ravel() == board).all()
    return g


def mv(g: Game, vertex: str) -> int:
    """Flat index of a GTP vertex on g's board."""
    return from_gtp(vertex, g.size)


# -- reference rules (sets, no numba) --------------------------------------------------


@cache
def _neighbor_lists(N: int) -> list[list[int]]:
    out = []
    for p in range(N * N):
        r, c = divmod(p, N)
        steps = ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
        out.append([rr * N + cc for rr, cc in steps if 0 <= rr < N and 0 <= cc < N])
    return out


def ref_neighbors(p: int, N: int) -> list[int]:
    return _neighbor_lists(N)[p]


def ref_group(board: list[int], p: int, N: int) -> tuple[set[int], set[int]]:
    """(stones, liberties) of the group at p."""
    color = board[p]
    stones, libs, todo = {p}, set(), [p]
    while todo:
        s = todo.pop()
        for q in ref_neighbors(s, N):
            if board[q] == 0:
                libs.add(q)
            elif board[q] == color and q not in stones:
                stones.add(q)
                todo.append(q)
    return stones, libs


def ref_play(board: tuple[int, ...], move: int, color: int, N: int) -> tuple[int, ...] | None:
    """The board after the move, or None if occupied or suicide (superko not checked)."""
    if move == N * N:
        return board
    if board[move] != 0:
        return None
    b = list(board)
    b[move] = color
    for q in ref_neighbors(move, N):
        if b[q] == -color:
            stones, libs = ref_group(b, q, N)
            if not libs:
                for s in stones:
                    b[s] = 0
    if not ref_group(b, move, N)[1]:
        return None
    return tuple(b)


def ref_area(board: tuple[int, ...] | list[int], N: int) -> int:
    """Tromp-Taylor area, black minus white: the sum of each point's owner."""
    return sum(ref_ownership(board, N))


def ref_ownership(board: tuple[int, ...] | list[int], N: int) -> list[int]:
    """Each point's Tromp-Taylor owner: its stone's colour, or the one colour its empty
    region reaches (0 when it reaches both or none), by flooding each empty region."""
    owner, seen = list(board), set()
    for p, v in enumerate(board):
        if v == 0 and p not in seen:
            region, reach, todo = {p}, set(), [p]
            while todo:
                s = todo.pop()
                for q in ref_neighbors(s, N):
                    if board[q] == 0 and q not in region:
                        region.add(q)
                        todo.append(q)
                    elif board[q]:
                        reach.add(board[q])
            seen |= region
            colour = next(iter(reach)) if len(reach) == 1 else 0
            for q in region:
                owner[q] = colour
    return owner


def ref_hash(board: tuple[int, ...] | list[int] | np.ndarray, N: int) -> int:
    """Zobrist hash from scratch with the context's keys (numpy, not the kernels)."""
    zob = rules_context(N).zobrist
    b = np.asarray(board)
    h = np.uint64(0x6A09E667F3BCC909)  # board.EMPTY_HASH, restated: the contract fixes it
    h ^= np.bitwise_xor.reduce(zob[0][b > 0], initial=np.uint64(0))
    h ^= np.bitwise_xor.reduce(zob[1][b < 0], initial=np.uint64(0))
    return int(h)


def random_game(N: int, rng: np.random.Generator, allow_pass: bool = True) -> Game:
    """A game to the end, each move uniform among the legal moves (pass only when forced
    if ``allow_pass`` is False)."""
    g = Game(N)
    M = N * N
    while not g.is_over():
        moves = np.flatnonzero(g.legal_mask())
        if not allow_pass and len(moves) > 1:
            moves = moves[moves != M]
        g.play(int(moves[rng.integers(len(moves))]))
    return g


# -- assertions on a Game -------------------------------------------------------------


def assert_board(g: Game, diagram: str) -> None:
    expected = parse_diagram(diagram)
    assert (g.board.ravel() == expected).all(), f"\n{g.board}"
    assert g.position_hash == ref_hash(expected, g.size)
    assert g.position_hash == int(board_hash(expected, rules_context(g.size).zobrist))


def assert_illegal(g: Game, vertex: str, reason: str, color: int | None = None) -> None:
    before = (g.board, g.position_hash, g.to_play, g.move_number, g.hash_set().copy())
    assert not g.is_legal(mv(g, vertex), color)
    if color is None or color == g.to_play:
        assert not g.legal_mask()[mv(g, vertex)]
    with pytest.raises(IllegalMoveError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        g.play(mv(g, vertex), color)
    after = (g.board, g.position_hash, g.to_play, g.move_number, g.hash_set())
    assert (before[0] == after[0]).all() and before[1:4] == after[1:4]
    assert (before[4] == after[4]).all()
