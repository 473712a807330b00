"""The ladder planes: textbook ladders read by hand, and a slow recursive reader through random
games (`tabula.ladders`)."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.features import LADDER_PLANES, NUM_PLANES, Inputs, apply_planes, with_liberties
from tabula.go import Game
from tabula.inputs import with_inputs
from tabula.ladders import LADDER_DEPTH, LADDER_NODES, fill_ladder_planes
from tests.helpers.go import parse_diagram, random_game, ref_neighbors, ref_play

# The defender's chain at E5 has 2 liberties, E4 and F5; black's D5, E6 and F4 make each atari
# chase it along a diagonal to the edge.
LADDER = """
    9 . . . . . . . . .
    8 . . . . . . . . .
    7 . . . . . . . . .
    6 . . . . X . . . .
    5 . . . X O . . . .
    4 . . . . . X . . .
    3 . . . . . . . . .
    2 . . . . . . . . .
    1 . . . . . . . . .
"""


def _planes(diagram: str, to_move: int) -> np.ndarray:
    """uint8[1, 17, N, N] of the diagram's position, ``to_move`` (+1 black, -1 white) to play."""
    board = parse_diagram(diagram)
    n = int(round(len(board) ** 0.5))
    out = np.zeros((1, NUM_PLANES, n, n), np.uint8)
    out[0, 0] = (board == to_move).reshape(n, n)
    out[0, 8] = (board == -to_move).reshape(n, n)
    return out


def _ladders(diagram: str, to_move: int = 1) -> list[list[str]]:
    """The three planes as lists of GTP vertices (row 0 is the top row, as in the diagram)."""
    planes = _planes(diagram, to_move)
    n = planes.shape[2]
    out = np.zeros((1, LADDER_PLANES, n, n), np.uint8)
    fill_ladder_planes(planes, out)
    letters = "ABCDEFGHJKLMNOPQRST"
    return [[f"{letters[c]}{n - r}" for r, c in np.argwhere(plane)] for plane in out[0]]


def _with(diagram: str, vertex: str, color: str) -> str:
    """The diagram with a stone added at ``vertex``."""
    lines = [line for line in diagram.strip("\n").splitlines()]
    n = len(lines)
    row, col = n - int(vertex[1:]), "ABCDEFGHJ".index(vertex[0])
    tokens = lines[row].split()
    tokens[1 + col] = color
    lines[row] = "    " + " ".join(tokens)
    return "\n".join(lines)


def test_a_ladder_captures_with_either_atari_on_an_empty_board() -> None:
    laddered, _, moves = _ladders(LADDER, to_move=1)  # black, the attacker, to move
    assert _ladders(LADDER, to_move=1)[1] == ["E5"]
    assert laddered == [] and sorted(moves) == ["E4", "F5"]
    own, theirs, moves = _ladders(LADDER, to_move=-1)  # white to move: its own stone
    assert own == ["E5"] and theirs == [] and moves == []


def test_a_ladder_breaker_on_one_path_leaves_the_other_atari() -> None:
    # An atari at F5 drives white down and left, one at E4 up and right: a white stone at H8
    # meets the second chase, so only F5 captures.
    broken = _with(LADDER, "H8", "O")
    assert _ladders(broken)[1:] == [["E5"], ["F5"]]
    both = _with(broken, "B2", "O")  # and one that meets the first
    assert _ladders(both) == [[], [], []]


def test_a_chain_in_atari_is_read_with_its_owner_to_move() -> None:
    corner = """
        5 O X . . .
        4 . . . . .
        3 . . . . .
        2 . . . . .
        1 . . . . .
    """
    # A5 runs down the edge or along the diagonal; either way black keeps it in atari.
    assert _ladders(corner, to_move=1)[1] == ["A5"]
    assert _ladders(corner, to_move=-1)[0] == ["A5"]
    friend = _with(corner.replace("        ", "    "), "B4", "O")  # extending at A4 connects
    assert _ladders(friend, to_move=1)[1] == []


def test_a_stone_with_room_on_both_sides_is_not_laddered() -> None:
    open_stone = """
        5 . . . . .
        4 . . X . .
        3 . X O . .
        2 . . . . .
        1 . . . . .
    """
    assert _ladders(open_stone) == [[], [], []]  # either atari leaves it three liberties


# -- a slow reader: recursive, sets and tuples, the kernel's order of moves -----------------


class _Spent(Exception):
    """The reference read more positions than the kernel may."""


def _bfs(board: tuple[int, ...], start: int, n: int) -> tuple[list[int], list[int]]:
    """(stones, liberties) of the chain at ``start`` in the order the kernel finds them."""
    color, stones, libs, seen = board[start], [start], [], {start}
    i = 0
    while i < len(stones):
        for q in ref_neighbors(stones[i], n):
            if q in seen:
                continue
            seen.add(q)
            if board[q] == color:
                stones.append(q)
            elif board[q] == 0:
                libs.append(q)
        i += 1
    return stones, libs


def _empty_around(board: tuple[int, ...], p: int, n: int) -> int:
    return sum(board[q] == 0 for q in ref_neighbors(p, n))


def _defences(board: tuple[int, ...], target: int, n: int) -> list[int]:
    stones, libs = _bfs(board, target, n)
    moves: list[int] = []
    read: set[int] = set()
    for s in stones:
        for q in ref_neighbors(s, n):
            if board[q] != -board[target] or q in read:
                continue
            chain, chain_libs = _bfs(board, q, n)
            read |= set(chain)
            if len(chain_libs) == 1 and chain_libs[0] not in moves and len(moves) < 5:
                moves.append(chain_libs[0])
    return moves + libs[:1] if len(libs) == 1 else moves


def _ataris(board: tuple[int, ...], target: int, n: int) -> list[int]:
    libs = _bfs(board, target, n)[1]
    if len(libs) != 2:
        return []
    a, b = libs
    return [b, a] if _empty_around(board, b, n) > _empty_around(board, a, n) else [a, b]


def _reads_captured(board: tuple[int, ...], target: int, defender: bool, n: int) -> bool:
    nodes = [1]

    def node(board: tuple[int, ...], defends: bool, line: list[tuple[int, ...]]) -> bool:
        color = board[target]
        for move in _defences(board, target, n) if defends else _ataris(board, target, n):
            after = ref_play(board, move, color if defends else -color, n)
            if after is None or after[target] != color or after in line:
                continue
            libs = len(_bfs(after, target, n)[1])
            if defends and libs >= 3:
                return False
            if (defends and libs <= 1) or (not defends and libs != 1):
                continue
            if len(line) == LADDER_DEPTH:  # too deep: escaped
                if defends:
                    return False
                continue
            nodes[0] += 1
            if nodes[0] > LADDER_NODES:
                raise _Spent
            child = node(after, not defends, [*line, after])
            if defends and not child:
                return False
            if not defends and child:
                return True
        return defends

    try:
        return node(board, defender, [board])
    except _Spent:
        return False


def _reference_planes(board: tuple[int, ...], n: int) -> np.ndarray:
    """The three planes from the slow reader (``board``: +1 the side to move's)."""
    out = np.zeros((LADDER_PLANES, n, n), np.uint8)
    done: set[int] = set()
    for start in range(n * n):
        if board[start] == 0 or start in done:
            continue
        stones, libs = _bfs(board, start, n)
        done |= set(stones)
        if len(libs) == 1:
            laddered = _reads_captured(board, start, True, n)
        elif len(libs) != 2:
            continue
        elif board[start] > 0:
            laddered = _reads_captured(board, start, False, n)
        else:
            laddered = False
            for move in libs:
                after = ref_play(board, move, 1, n)
                if after is None or after[start] == 0 or len(_bfs(after, start, n)[1]) != 1:
                    continue
                if _reads_captured(after, start, True, n):
                    laddered = True
                    out[2, move // n, move % n] = 1
        if laddered:
            for s in stones:
                out[0 if board[start] > 0 else 1, s // n, s % n] = 1
    return out


@pytest.mark.parametrize("n", [7, 9])
def test_the_planes_match_a_slow_reader_through_random_games(n: int) -> None:
    rng = np.random.default_rng(7 + n)
    positions = []
    for _ in range(6):
        game, replay = random_game(n, rng, allow_pass=False), Game(n)
        for color, move in game.history:
            replay.play(move, color)
            positions.append(replay.features())
    stack = np.stack(positions)
    got = np.zeros((len(stack), LADDER_PLANES, n, n), np.uint8)
    fill_ladder_planes(stack, got)
    for planes, ladders in zip(stack, got, strict=True):
        board = tuple(int(v) for v in (planes[0].astype(np.int8) - planes[8]).ravel())
        assert (ladders == _reference_planes(board, n)).all()
    assert got[:, 0].any() and got[:, 1].any() and got[:, 2].any()  # every plane exercised
    for k in (1, 4, 6):  # read from the position, so they turn with it (where no read ran out)
        turned = np.zeros_like(got)
        fill_ladder_planes(apply_planes(k, stack), turned)
        assert (turned == apply_planes(k, got)).mean() > 0.999


def test_inputs_put_the_ladder_planes_after_the_liberty_planes() -> None:
    rng = np.random.default_rng(3)
    game, replay = random_game(9, rng, allow_pass=False), Game(9)
    positions = []
    for color, move in game.history:
        replay.play(move, color)
        positions.append(replay.features())
    stack = np.stack(positions)
    ladders = np.zeros((len(stack), LADDER_PLANES, 9, 9), np.uint8)
    fill_ladder_planes(stack, ladders)
    both = with_inputs(stack, Inputs(liberties=True, ladders=True))
    assert both.shape == (len(stack), Inputs(True, True).planes, 9, 9) == (len(stack), 26, 9, 9)
    assert (both[:, :23] == with_liberties(stack)).all() and (both[:, 23:] == ladders).all()
    only = with_inputs(stack, Inputs(ladders=True))
    assert only.shape[1] == 20 and (only[:, :17] == stack).all() and (only[:, 17:] == ladders).all()
    assert with_inputs(stack, Inputs()) is not None and with_inputs(stack, Inputs()).shape[1] == 17
