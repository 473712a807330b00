"""RandomPlayer: uniform over legal moves that do not fill its own single-point eyes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tabula.go.game import Game
from tabula.players import RandomPlayer, own_eyes


def board_from(rows: list[str]) -> np.ndarray:
    """ASCII rows (top row first): X black, O white, . empty."""
    return np.array([[{"X": 1, "O": -1, ".": 0}[c] for c in row] for row in rows], np.int8)


def game_from(rows: list[str], to_play: int = 1) -> Game:
    """Set up a position by playing the stones (colours explicit), then fix the side to move."""
    game = Game(size=len(rows), komi=7.5)
    board = board_from(rows)
    for colour in (1, -1):
        for move in np.flatnonzero(board.reshape(-1) == colour):
            game.play(int(move), colour)
    if game.to_play != to_play:
        game.play(game.size**2, -to_play)  # a pass hands the move over
    assert np.array_equal(game.board, board)
    return game


def test_own_eyes_counts_the_edge_as_own_colour() -> None:
    board = board_from([
        ".X.O.",
        "X.XO.",
        ".X...",
        "OOO..",
        ".O.O.",
    ])  # fmt: skip
    assert np.argwhere(own_eyes(board, 1)).tolist() == [[0, 0], [1, 1]]  # A5, B4
    assert np.argwhere(own_eyes(board, -1)).tolist() == [[4, 0], [4, 2]]  # A1, C1
    assert not own_eyes(board, 1)[0, 2]  # C5 touches white D5


def test_never_fills_its_own_eye_and_passes_when_nothing_else_is_left() -> None:
    rows = [
        ".X.X.",
        "XXXXX",
        "XXXXX",
        "XXXXX",
        "XXXXX",
    ]  # fmt: skip
    game = game_from(rows, to_play=1)
    player = RandomPlayer(0)
    assert {player.genmove(game, 1) for _ in range(50)} == {25}
    # White may play into black's eyes only where that is not suicide: nowhere here.
    assert {player.genmove(game, -1) for _ in range(50)} == {25}


def test_moves_are_legal_for_either_colour_over_random_games() -> None:
    rng = np.random.default_rng(7)
    for seed in range(30):
        size = int(rng.choice([5, 7, 9]))
        game = Game(size=size, komi=7.5)
        player = RandomPlayer(seed)
        for _ in range(int(rng.integers(0, 3 * size * size))):
            colour = game.to_play if rng.random() < 0.9 else -game.to_play
            move = player.genmove(game, colour)
            assert game.is_legal(move, colour)
            if move < size * size:
                assert not own_eyes(game.board, colour).reshape(-1)[move]
            game.play(move, colour)


def test_uniform_over_the_allowed_moves() -> None:
    game = game_from([".....", ".X...", "...O.", ".....", "....."], to_play=1)
    player = RandomPlayer(11)
    counts = Counter(player.genmove(game, 1) for _ in range(4600))
    assert set(counts) == set(range(25)) - {6, 13}
    assert min(counts.values()) > 130 and max(counts.values()) < 270  # mean 200


def test_same_seed_same_moves() -> None:
    def moves(seed: int) -> list[int]:
        game, player = Game(size=9, komi=7.5), RandomPlayer(seed)
        for _ in range(40):
            game.play(player.genmove(game, game.to_play))
        return [move for _, move in game.history]

    assert moves(5) == moves(5)
    assert moves(5) != moves(6)


@pytest.mark.parametrize("size", [5, 9])
def test_random_games_end_by_two_passes(size: int) -> None:
    ended_by_passes = 0
    for seed in range(10):
        game, player = Game(size=size, komi=7.5), RandomPlayer(seed)
        while not game.is_over():
            game.play(player.genmove(game, game.to_play))
        moves = [move for _, move in game.history]
        ended_by_passes += moves[-2:] == [size * size] * 2
    assert ended_by_passes >= 8
