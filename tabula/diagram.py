"""A game as a picture: the final position of an `SgfGame` drawn as a standalone SVG.

The drawing is the one Go books print for a whole game on one diagram: every stone still on
the board carries the number of the move that placed it (a stone captured and later replaced
shows the later number), the last move is ringed, and the empty points that Tromp-Taylor
scoring gives a side carry a small square of its colour, so the picture shows who owned what.
A caption gives the result as recorded, the number of moves, the players and the area score by
our rules. Pure text out, no drawing library: MLflow shows an SVG artifact as an image, and a
browser opens the file as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import numpy as np

from tabula.go.coords import GTP_COLUMNS
from tabula.sgf import SgfGame, replay

CELL = 32  # pixels between two lines
MARGIN = 30  # room for the coordinates around the grid
CAPTION = 62  # room for the caption's four lines below the board


@dataclass(frozen=True)
class FinalPosition:
    """The end of a game. board: int8[N, N] (+1 black, -1 white, 0 empty, row 0 on top);
    numbers: int[N, N], the move number of the stone on each point (0 where empty);
    owner: int8[N, N], Tromp-Taylor's owner of each point; last: (row, col) of the last stone
    placed or None; moves: the moves played, passes included; score: black area - white area
    - komi."""

    board: np.ndarray
    numbers: np.ndarray
    owner: np.ndarray
    last: tuple[int, int] | None
    moves: int
    score: float


def final_position(record: SgfGame) -> FinalPosition:
    """Replay ``record`` (`tabula.sgf.replay`: SgfError names an illegal move) and number the
    stones that are left by the move that placed them."""
    game = replay(record)
    n = record.size
    numbers = np.zeros(n * n, dtype=np.int64)
    last = None
    for number, (_, move) in enumerate(record.moves, start=1):
        if move < n * n:
            numbers[move], last = number, divmod(move, n)
    board = game.board
    numbers = numbers.reshape(n, n) * (board != 0)  # a captured stone's number goes with it
    owner = game.ownership().reshape(n, n)
    return FinalPosition(board, numbers, owner, last, len(record.moves), game.score())


def game_svg(record: SgfGame, title: str = "") -> str:
    """The SVG document of ``record``'s final position (see the module docstring)."""
    position = final_position(record)
    n = record.size
    side = 2 * MARGIN + (n - 1) * CELL
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{side}" height="{side + CAPTION}" '
        f'viewBox="0 0 {side} {side + CAPTION}" font-family="sans-serif">',
        f'<rect width="{side}" height="{side + CAPTION}" fill="#dcb35c"/>',
        *_grid(n),
        *_territory(position),
        *_stones(position),
        *_caption(record, position, title, side),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _xy(row: int, col: int) -> tuple[int, int]:
    return MARGIN + col * CELL, MARGIN + row * CELL


def _grid(n: int) -> list[str]:
    low, high = MARGIN, MARGIN + (n - 1) * CELL
    lines = []
    for k in range(n):
        at = MARGIN + k * CELL
        lines.append(f'<line x1="{low}" y1="{at}" x2="{high}" y2="{at}" stroke="black"/>')
        lines.append(f'<line x1="{at}" y1="{low}" x2="{at}" y2="{high}" stroke="black"/>')
        label = 'font-size="12" text-anchor="middle" dominant-baseline="central"'
        lines.append(f'<text x="{at}" y="{low - 18}" {label}>{GTP_COLUMNS[k]}</text>')
        lines.append(f'<text x="{low - 18}" y="{at}" {label}>{n - k}</text>')
    return lines


def _territory(position: FinalPosition) -> list[str]:
    marks = []
    for row, col in zip(*np.nonzero((position.board == 0) & (position.owner != 0)), strict=True):
        x, y = _xy(int(row), int(col))
        fill = "black" if position.owner[row, col] > 0 else "white"
        marks.append(f'<rect x="{x - 5}" y="{y - 5}" width="10" height="10" fill="{fill}"/>')
    return marks


def _stones(position: FinalPosition) -> list[str]:
    stones = []
    for row, col in zip(*np.nonzero(position.board), strict=True):
        x, y = _xy(int(row), int(col))
        black = position.board[row, col] > 0
        stone, ink = ("black", "white") if black else ("white", "black")
        number = int(position.numbers[row, col])
        size = 14 if number < 100 else 11
        stones.append(
            f'<circle cx="{x}" cy="{y}" r="{CELL // 2 - 1}" fill="{stone}" stroke="black"/>'
            f'<text x="{x}" y="{y}" font-size="{size}" fill="{ink}" text-anchor="middle" '
            f'dominant-baseline="central">{number}</text>'
        )
        if position.last == (row, col):
            stones.append(
                f'<circle cx="{x}" cy="{y}" r="{CELL // 2 + 2}" fill="none" stroke="red" '
                'stroke-width="2"/>'
            )
    return stones


def _caption(record: SgfGame, position: FinalPosition, title: str, side: int) -> list[str]:
    score = position.score
    area = f"B+{score:g}" if score > 0 else f"W+{-score:g}" if score < 0 else "0"
    first = f"{title}: " if title else ""
    lines = (
        f"{first}result {record.result or '?'} after {position.moves} moves",
        f"Black: {record.black or '?'}",
        f"White: {record.white or '?'}",
        f"area score {area} at komi {record.komi:g}",
    )
    return [
        f'<text class="caption" x="8" y="{side + 2 + 15 * k}" font-size="12">{escape(text)}</text>'
        for k, text in enumerate(lines)
    ]
