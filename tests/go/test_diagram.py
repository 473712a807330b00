"""`tabula.diagram`: a game's final position as an SVG picture."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tabula.diagram import final_position, game_svg
from tabula.go.coords import from_gtp
from tabula.sgf import SgfError, SgfGame, game_to_sgf, read_sgf

SVG = "{http://www.w3.org/2000/svg}"


def _game(*moves: str, size: int = 9, result: str | None = "B+R") -> SgfGame:
    colours = [1 if k % 2 == 0 else -1 for k in range(len(moves))]
    flat = tuple((c, from_gtp(m, size)) for c, m in zip(colours, moves, strict=True))
    return SgfGame(size, 7.5, flat, "net-3", "gnugo-l1", result)


# White A1 is captured at move 4 (black A2, B1); black fills A1 at move 7.
CAPTURE = ("E5", "A1", "A2", "pass", "B1", "pass", "A1", "pass", "pass")


def test_stones_carry_the_number_of_the_move_that_placed_them() -> None:
    position = final_position(_game(*CAPTURE))
    rows, cols = position.board.nonzero()
    numbered = {
        (int(r), int(c)): int(position.numbers[r, c]) for r, c in zip(rows, cols, strict=True)
    }
    assert numbered == {(4, 4): 1, (7, 0): 3, (8, 1): 5, (8, 0): 7}  # rows from the top
    assert position.last == (8, 0)
    assert position.moves == 9
    assert position.board.sum() == 4  # four black stones, the white one captured


def test_the_svg_shows_each_stone_once_with_its_number_and_the_caption() -> None:
    svg = game_svg(_game(*CAPTURE), title="iteration 3, anchor game")
    root = ET.fromstring(svg)
    circles = root.findall(f"{SVG}circle")
    stones = [c for c in circles if c.get("fill") in ("black", "white")]
    rings = [c for c in circles if c.get("fill") == "none"]
    assert len(stones) == 4 and len(rings) == 1
    texts = root.findall(f"{SVG}text")
    on_stones = sorted(int(t.text or "") for t in texts if t.get("fill") in ("black", "white"))
    assert on_stones == [1, 3, 5, 7]
    caption = [t.text for t in texts if t.get("class") == "caption"]
    assert caption == [
        "iteration 3, anchor game: result B+R after 9 moves",
        "Black: net-3",
        "White: gnugo-l1",
        "area score B+73.5 at komi 7.5",
    ]
    # black owns the whole board by area: every empty point has a black square
    squares = root.findall(f"{SVG}rect")[1:]
    assert len(squares) == 81 - 4 and {s.get("fill") for s in squares} == {"black"}


def test_a_game_read_back_from_sgf_draws_the_same() -> None:
    game = _game(*CAPTURE)
    assert game_svg(read_sgf(game_to_sgf(game))) == game_svg(game)


def test_an_illegal_record_is_named() -> None:
    with pytest.raises(SgfError, match="illegal move 2"):
        game_svg(_game("E5", "E5"))
