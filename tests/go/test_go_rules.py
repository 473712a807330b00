"""The rules of Go, one behaviour per test, on ASCII boards in GTP coordinates:
captures, suicide, ko and positional superko."""

from __future__ import annotations

import numpy as np

from tabula.go.board import play_move, rules_context
from tests.helpers.go import KO, SUPERKO, assert_board, assert_illegal, game_from_diagram, mv

# -- captures ------------------------------------------------------------------------


def test_single_stone_capture() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 . . X . .
        3 . X O . .
        2 . . X . .
        1 . . . . .
    """)
    g.play(mv(g, "D3"))
    assert_board(
        g,
        """
        5 . . . . .
        4 . . X . .
        3 . X . X .
        2 . . X . .
        1 . . . . .
    """,
    )


def test_multi_stone_capture() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 . X X . .
        3 X O O . .
        2 . X X . .
        1 . . . . .
    """)
    g.play(mv(g, "D3"))
    assert_board(
        g,
        """
        5 . . . . .
        4 . X X . .
        3 X . . X .
        2 . X X . .
        1 . . . . .
    """,
    )


def test_capture_on_the_edge() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 . . . . .
        3 . . . . .
        2 . . . . .
        1 . X O X .
    """)
    g.play(mv(g, "C2"))
    assert_board(
        g,
        """
        5 . . . . .
        4 . . . . .
        3 . . . . .
        2 . . X . .
        1 . X . X .
    """,
    )


def test_capture_in_the_corner() -> None:
    g = game_from_diagram("""
        5 . . . . O
        4 . . . . X
        3 . . . . .
        2 . . . . .
        1 O X . . .
    """)
    g.play(mv(g, "A2"))
    g.play(mv(g, "D5"), color=1)
    assert_board(
        g,
        """
        5 . . . X .
        4 . . . . X
        3 . . . . .
        2 X . . . .
        1 . X . . .
    """,
    )


def test_one_move_captures_two_groups() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 . . . . .
        3 . X . X .
        2 X O . O X
        1 . X . X .
    """)
    g.play(mv(g, "C2"))
    assert_board(
        g,
        """
        5 . . . . .
        4 . . . . .
        3 . X . X .
        2 X . X . X
        1 . X . X .
    """,
    )


def test_white_captures_too() -> None:
    g = game_from_diagram(
        """
        5 X O . . .
        4 . . . . .
        3 . . . . .
        2 . . . . .
        1 . . . . .
    """,
        to_play=-1,
    )
    g.play(mv(g, "A4"))
    assert_board(
        g,
        """
        5 . O . . .
        4 O . . . .
        3 . . . . .
        2 . . . . .
        1 . . . . .
    """,
    )


# -- suicide -------------------------------------------------------------------------


def test_single_stone_suicide_is_illegal() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 . . . . .
        3 . . O . .
        2 . O . O .
        1 . . O . .
    """)
    assert_illegal(g, "C2", "suicide")


def test_corner_suicide_is_illegal() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 . . . . .
        3 . . . . .
        2 O . . . .
        1 . O . . .
    """)
    assert_illegal(g, "A1", "suicide")


def test_multi_stone_suicide_is_illegal() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 O O O . .
        3 X X O . .
        2 . X O . .
        1 X X O . .
    """)
    assert_illegal(g, "A2", "suicide")
    g.play(mv(g, "A2"), color=-1)  # white may play there: it captures five stones
    assert_board(
        g,
        """
        5 . . . . .
        4 O O O . .
        3 . . O . .
        2 O . O . .
        1 . . O . .
    """,
    )


def test_capture_that_looks_like_suicide_is_legal() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 . . . . .
        3 . X O . .
        2 X O . O .
        1 . X O . .
    """)
    g.play(mv(g, "C2"))  # no empty neighbour, but it takes B2's last liberty
    assert_board(
        g,
        """
        5 . . . . .
        4 . . . . .
        3 . X O . .
        2 X . X O .
        1 . X O . .
    """,
    )


# -- ko and superko ------------------------------------------------------------------


def test_simple_ko_retake_is_refused_immediately() -> None:
    g = game_from_diagram(KO)
    g.play(mv(g, "C2"))
    assert_illegal(g, "B2", SUPERKO)


def test_ko_retake_is_allowed_after_an_exchange_elsewhere() -> None:
    g = game_from_diagram(KO)
    g.play(mv(g, "C2"))
    g.play(mv(g, "E5"))  # a ko threat...
    g.play(mv(g, "E4"))  # ...answered
    g.play(mv(g, "B2"))  # the position differs from any earlier one: legal
    assert g.board[3, 2] == 0


def test_triple_ko_cycle_is_refused_by_positional_superko() -> None:
    # Three kos, each a/b pair in the middle row of its band: black takes by playing the
    # right point (b), white by playing the left point (a). Start (white, black, white).
    g = game_from_diagram("""
        9 . X O . . . . . .
        8 X O . O . . . . .
        7 . X O . . . . . .
        6 . X O . . . . . .
        5 X . X O . . . . .
        4 . X O . . . . . .
        3 . X O . . . . . .
        2 X O . O . . . . .
        1 . X O . . . . . .
    """)
    for vertex in ["C8", "B5", "C2", "B8", "C5"]:  # each is a plain ko capture, all legal
        g.play(mv(g, vertex))
    # White retaking the bottom ko is not an immediate recapture (simple ko allows it), but
    # it would recreate the starting position of the cycle.
    assert g.is_legal(mv(g, "B2"), -1) is False
    assert_illegal(g, "B2", SUPERKO)


def test_send_two_return_one_is_refused_although_the_other_side_is_to_move() -> None:
    g = game_from_diagram("""
        5 . . . . .
        4 . . . . .
        3 . . . . .
        2 O O X . .
        1 . X . X .
    """)
    start = g.position_hash
    g.play(mv(g, "A1"))  # black sends two: A1-B1 now has one liberty, C1
    g.play(mv(g, "C1"))  # white captures two
    # Black retaking C1 at B1 returns one stone and recreates the start position, with white
    # to move instead of black: the hash ignores the side to move, so superko forbids it.
    assert_illegal(g, "B1", SUPERKO)
    ctx = rules_context(5)
    board = g.board.ravel().copy()
    h0 = np.uint64(g.position_hash)
    ok, h = play_move(board, mv(g, "B1"), 1, ctx.neighbors, ctx.zobrist, h0, board)
    assert ok and h == start  # legal but for superko: it is exactly the start position


def test_pass_is_always_legal_and_repeats_the_position() -> None:
    g = game_from_diagram(KO)
    g.play(mv(g, "C2"))
    h = g.position_hash
    assert g.legal_mask()[-1]
    g.play(g.size**2)
    assert g.position_hash == h and g.passes == 1 and g.to_play == 1
