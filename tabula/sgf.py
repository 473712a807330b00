"""SGF (FF[4]) game records through the `sgfmill` library: bytes in, bytes out, no files.

Moves are ``(colour, move)`` pairs as in `Game.history`: colour +1 black / -1 white, move a
flat index ``row*N + col`` (row 0 at the top) or ``M = N*N`` for pass. Passes are written as
``B[]``/``W[]``; on reading, ``tt`` is also a pass on boards up to 19x19 (FF[3] habit).

Comments are keyed by move number: key k >= 1 is the comment on the node of the k-th move,
key 0 the comment on the root node (before any move).

Results use the SGF RE syntax: ``B+3.5``, ``W+0.5``, ``B+R`` (resignation), ``0`` (draw),
``Void`` (no result); an arena game (`tabula.arena`) also ``B+F``/``W+F`` (a win by forfeit),
with the reason of a game that did not end by score as the root comment (`match_record`).

`game_to_sgf` writes an `SgfGame` record and `read_sgf` reads one back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from sgfmill import sgf  # type: ignore[import-untyped]

from tabula.arena import EndReason, GameOutcome
from tabula.errors import TabulaError
from tabula.go import coords
from tabula.go.coords import MAX_SIZE, MIN_SIZE
from tabula.go.game import Game, IllegalMoveError

_COLOUR_PROP = {1: "B", -1: "W"}
_PROP_COLOUR = {"b": 1, "w": -1}


class SgfError(TabulaError, ValueError):
    """A record that cannot be read or replayed; the message is one line naming the problem."""


@dataclass(frozen=True)
class SgfGame:
    """One game record as read from SGF (the main line only).

    size: N (5..19). komi: added to White (SGF default 0 when KM is absent).
    moves: ((colour, move), ...) in order; colour +1/-1, move flat 0..M-1 or M = N*N for pass.
    black, white: player names ("" when absent). result: the RE text, or None when absent.
    comments: {move number: text}; 0 is the root node (see the module docstring).
    """

    size: int
    komi: float
    moves: tuple[tuple[int, int], ...]
    black: str = ""
    white: str = ""
    result: str | None = None
    comments: Mapping[int, str] = field(default_factory=dict)


def result_string(score: float | None, winner: int | None, resigned: bool = False) -> str:
    """The SGF RE value: ``B+3.5``, ``W+R``, ``0`` for a draw, ``Void`` for no result.

    score: Tromp-Taylor ``black area - white area - komi`` (positive: Black wins), or None
    when unknown (resignation, abandoned game). winner: +1 black, -1 white, 0 draw, None for
    no result. A score must agree with the winner; a resignation needs a winner.
    """
    if winner not in (1, -1, 0, None):
        raise ValueError(f"winner must be +1, -1, 0 or None, not {winner!r}")
    if resigned:
        if winner not in (1, -1):
            raise ValueError("a resignation needs a winner (+1 or -1)")
        return f"{_COLOUR_PROP[winner]}+R"
    if winner is None:
        return "Void"
    if score is None:
        return "0" if winner == 0 else f"{_COLOUR_PROP[winner]}+"
    if not math.isfinite(score) or (score > 0) - (score < 0) != winner:
        raise ValueError(f"score {score} disagrees with winner {winner}")
    if winner == 0:
        return "0"
    return f"{_COLOUR_PROP[winner]}+{abs(score):g}"


def game_to_sgf(
    game: SgfGame, rules: str = "Tromp-Taylor", extra: Mapping[str, str] | None = None
) -> bytes:
    """One game as SGF bytes (UTF-8): root SZ, KM, RU, PB, PW, RE (if a result), then the
    moves and the comments; `read_sgf` reads the record back.

    rules: the RU text. extra: more root properties, {identifier: text} (e.g. {"DT": "2024-01-01"}).
    Raises SgfError for a size outside 5..19, a bad colour or move, or a bad identifier.
    Legality is not checked here (`replay` does that).
    """
    size = game.size
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise SgfError(f"board size {size} is not supported (5..19)")
    record = sgf.Sgf_game(size=size)
    root = record.get_root()
    try:
        root.set("KM", float(game.komi))
        root.set("RU", rules)
        root.set("PB", game.black)
        root.set("PW", game.white)
        if game.result is not None:
            root.set("RE", game.result)
        for ident, value in (extra or {}).items():
            root.set(ident, value)
    except ValueError as error:
        raise SgfError(f"cannot write root property: {error}") from None
    node = root
    for number, (colour, move) in enumerate(game.moves, start=1):
        if colour not in _COLOUR_PROP or not 0 <= move <= size * size:
            raise SgfError(f"move {number}: bad (colour, move) {(colour, move)}")
        node = node.new_child()
        node.set_raw(_COLOUR_PROP[colour], coords.to_sgf(int(move), size).encode("ascii"))
    nodes = record.get_main_sequence()
    for number, text in game.comments.items():
        if not 0 <= number < len(nodes):
            raise SgfError(f"comment for move {number}, but the game has {len(game.moves)} moves")
        nodes[number].set("C", text)
    return record.serialise()


def sgf_result(outcome: GameOutcome) -> str:
    """The SGF RE value of an arena game (forfeits as "B+F"/"W+F", aborts as "Void")."""
    if outcome.winner is None:
        return "Void"
    if outcome.end is EndReason.RESIGN:
        return result_string(None, outcome.winner, resigned=True)
    if outcome.end is EndReason.FORFEIT and outcome.winner != 0:
        return f"{_COLOUR_PROP[outcome.winner]}+F"
    return result_string(outcome.score, outcome.winner)


def match_record(outcome: GameOutcome) -> SgfGame:
    """An arena game as an SGF record: its players, moves and result (`sgf_result`), and for
    a game that did not end by score the reason (`GameOutcome.reason`) as the root comment."""
    comments = {} if outcome.end is EndReason.SCORE else {0: outcome.reason}
    return SgfGame(
        outcome.size,
        outcome.komi,
        outcome.moves,
        outcome.black,
        outcome.white,
        sgf_result(outcome),
        comments,
    )


def read_sgf(data: bytes) -> SgfGame:
    """Parse SGF bytes (the first game, main line). Raises SgfError with one line."""
    try:
        record = sgf.Sgf_game.from_bytes(data)
    except (ValueError, LookupError) as error:
        raise SgfError(f"not a readable SGF game: {_one_line(error)}") from None
    size = record.get_size()
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise SgfError(f"board size {size} is not supported (5..19)")
    root = record.get_root()
    try:
        komi = float(record.get_komi())
        black = record.get_player_name("b") or ""
        white = record.get_player_name("w") or ""
        result = root.get("RE") if root.has_property("RE") else None
    except ValueError as error:
        raise SgfError(f"bad root property: {_one_line(error)}") from None
    moves: list[tuple[int, int]] = []
    comments: dict[int, str] = {}
    for node in record.get_main_sequence():
        if node.has_setup_stones():
            raise SgfError(f"setup stones (AB/AW/AE) after move {len(moves)} are not supported")
        colour, raw = node.get_raw_move()
        if colour is not None:
            try:
                moves.append((_PROP_COLOUR[colour], coords.from_sgf(raw.decode("latin-1"), size)))
            except ValueError as error:
                raise SgfError(f"move {len(moves) + 1}: {error}") from None
        if node.has_property("C"):
            text = node.get("C")
            key = len(moves)
            comments[key] = f"{comments[key]}\n\n{text}" if key in comments else text
    return SgfGame(size, komi, tuple(moves), black, white, result, comments)


def replay(record: SgfGame) -> Game:
    """Play the record's moves through the rules; SgfError names the first illegal move."""
    game = Game(size=record.size, komi=record.komi)
    for number, (colour, move) in enumerate(record.moves, start=1):
        name = "black" if colour == 1 else "white"
        vertex = coords.to_gtp(move, record.size)
        if not game.is_legal(move, colour):
            raise SgfError(f"illegal move {number}: {name} {vertex}")
        try:
            game.play(move, colour)
        except IllegalMoveError:
            raise SgfError(f"illegal move {number}: {name} {vertex}") from None
    return game


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__
