"""Passes, the end of the game, Tromp-Taylor scoring, and the edges of the Game API."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.go import Game, IllegalMoveError
from tests.helpers.go import KO, assert_illegal, game_from_diagram, mv

# -- passes and the end of the game --------------------------------------------------


def test_two_passes_end_the_game() -> None:
    g = Game(5)
    g.play(25)
    assert not g.is_over() and g.passes == 1
    g.play(12)
    assert g.passes == 0
    g.play(25)
    assert not g.is_over()
    g.play(25)
    assert g.is_over() and g.passes == 2


def test_game_ends_after_two_n_squared_moves() -> None:
    rng = np.random.default_rng(5)
    g = Game(5)
    for n in range(50):  # 2 * 5 * 5
        assert not g.is_over(), f"over after {n} moves"
        moves = np.flatnonzero(g.legal_mask()[:-1])
        g.play(int(moves[rng.integers(len(moves))]) if len(moves) else 25)
        assert g.passes < 2, "this seed should avoid two passes in a row"
    assert g.move_number == 50 and g.is_over()


def test_play_after_the_end_is_not_refused() -> None:
    g = Game(5)
    g.play(25)
    g.play(25)
    g.play(12)
    assert g.move_number == 3 and not g.is_over()


# -- scoring -------------------------------------------------------------------------

SPLIT = """
    5 . X . O .
    4 X X . O O
    3 X X . O O
    2 X X . O O
    1 . X . O .
"""


def test_empty_board_score_is_minus_komi() -> None:
    g = Game(9, komi=7.5)
    assert g.score() == -7.5 and g.winner() == -1


def test_dame_count_for_nobody_and_jigo() -> None:
    g = game_from_diagram(SPLIT, komi=0.0)
    # black 8 stones + 2 eyes, white the same; column C touches both colours: dame.
    assert g.score() == 0.0 and g.winner() == 0


def test_komi_decides_the_winner() -> None:
    assert game_from_diagram(SPLIT, komi=0.5).winner() == -1
    assert game_from_diagram(SPLIT, komi=-0.5).winner() == 1
    assert game_from_diagram(SPLIT, komi=7.5).score() == -7.5


SEKI = """
    5 . X X X X
    4 X X X X .
    3 O O O O O
    2 O O O O O
    1 O O O O .
"""


def test_seki_is_legal_to_leave_and_its_shared_liberty_counts_for_nobody() -> None:
    g = game_from_diagram(SEKI, komi=0.0)
    # Both groups have two liberties: their own eye and the shared E4. Playing into the
    # other's eye is suicide; filling E4 is legal self-atari.
    assert_illegal(g, "E1", "suicide", color=1)
    assert_illegal(g, "A5", "suicide", color=-1)
    assert g.is_legal(mv(g, "E4"), 1) and g.is_legal(mv(g, "E4"), -1)
    # black 8 stones + eye A5 = 9; white 14 stones + eye E1 = 15; E4 is shared.
    assert g.score() == -6.0 and g.winner() == -1


def test_stones_count_and_single_colour_regions_count() -> None:
    g = game_from_diagram(
        """
        5 . . X . .
        4 . . X . .
        3 . . X . .
        2 . . X . .
        1 . . X . .
    """,
        komi=0.0,
    )
    assert g.score() == 25.0


# -- API edges -----------------------------------------------------------------------


@pytest.mark.parametrize("size", [4, 20, 0, -9])
def test_bad_board_size_raises_value_error(size: int) -> None:
    with pytest.raises(ValueError, match="5..19"):
        Game(size)


@pytest.mark.parametrize("move", [-1, 26, 1000])
def test_off_board_moves_raise(move: int) -> None:
    g = Game(5)
    assert not g.is_legal(move)
    with pytest.raises(IllegalMoveError, match="off the board") as info:
        g.play(move)
    assert info.value.reason == "off the board"


def test_occupied_point_raises() -> None:
    g = Game(5)
    g.play(12)
    assert_illegal(g, "C3", "occupied")


def test_same_colour_may_play_twice_and_to_play_follows() -> None:
    g = Game(5)
    g.play(0, 1)
    g.play(1, 1)
    assert g.to_play == -1 and g.history == [(1, 0), (1, 1)]
    g.play(2, -1)
    assert g.to_play == 1


def test_bad_colour_raises_value_error() -> None:
    with pytest.raises(ValueError, match="colour"):
        Game(5).play(0, 2)


def test_undo_on_a_fresh_game_raises_index_error() -> None:
    with pytest.raises(IndexError):
        Game(5).undo()


def test_undo_restores_a_capture() -> None:
    g = game_from_diagram(KO)
    before = g.board
    g.play(mv(g, "C2"))
    g.undo()
    assert (g.board == before).all() and g.to_play == 1
    g.play(mv(g, "C2"))  # and the same capture is legal again
