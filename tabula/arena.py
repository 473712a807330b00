"""Matches between two players: many games at once, colours alternating, every move checked.

The arena is the referee. It owns one `Game` per game in progress, asks each player for moves
in batches (one call per player per round, covering every game where that player is to move),
checks every answer against our rules, and ends each game with an `EndReason` and, for
forfeits and aborts, a one-line detail. Its record text (`GameOutcome.reason`, the results
store's ``reason`` column and the SGF comment) is the reason, then ": WHY" for those two:

========================  =============================================================
record text               meaning (winner)
========================  =============================================================
``score``                 two passes in a row or the 2·N² move limit; Tromp-Taylor area
                          score with komi (winner by sign of ``score``, 0 = jigo)
``resign``                a player answered `RESIGN` (the opponent wins)
``forfeit: WHY``          a player broke the game: an illegal move ("illegal move E5"),
                          a crash, a timeout, garbage (the opponent wins)
``abort: WHY``            no one is clearly at fault (e.g. an engine refused a move that is
                          legal by our rules); no result (winner None)
========================  =============================================================

Colours alternate: game i has the first player as Black when i is even (`Schedule.alternate`).
Move choice is each player's business; the paper's evaluation games use tau -> 0 and no
Dirichlet noise, and its random dihedral transform per leaf is what keeps two deterministic
network players from repeating one game; `GameOutcome.duplicate_of` reports the games that
repeated an earlier game's move sequence exactly.

Outcomes are yielded in game order (game 0, 1, 2, ...) even when a later game finishes first,
so a sequential test fed from the stream (the SPRT of `tabula.gating`) never sees short games
before long ones (a bias towards whichever player wins quickly). Closing the generator ends the
games in progress without a result.

Pure: players do their own I/O (a GTP engine runs as a subprocess in `tasks.engines`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, Protocol

import numpy as np

from tabula.errors import TabulaError
from tabula.go import coords
from tabula.go.coords import RESIGN
from tabula.go.game import Game
from tabula.openings import Opening, opening_for_game


class ArenaError(TabulaError):
    """A match that cannot be set up (no games, a player against itself, ...)."""


class EndReason(StrEnum):
    """How a game ended (table in the module docstring); the value is the record's first word."""

    SCORE = "score"
    RESIGN = "resign"
    FORFEIT = "forfeit"
    ABORT = "abort"


class FailureKind(StrEnum):
    """What a player's failure does to its game: FORFEIT (the player loses), ABORT (no result)."""

    FORFEIT = "forfeit"
    ABORT = "abort"


@dataclass(frozen=True)
class Failure:
    """A player could not answer for one game: it forfeits, or the game is aborted.

    reason: one line, e.g. "engine crashed (exit code -9)".
    """

    kind: FailureKind
    reason: str

    def __post_init__(self) -> None:
        if self.kind not in tuple(FailureKind):
            raise ArenaError(f"a failure is 'forfeit' or 'abort', got {self.kind!r}")
        object.__setattr__(self, "kind", FailureKind(self.kind))  # "forfeit" -> the member


class MoveRequest(NamedTuple):
    """One game that needs a move: the player's slot id, the live game, the colour to play.

    game is the referee's game: read it, never mutate it (copy it first if needed).
    """

    slot: int
    game: Game
    color: int


class ArenaPlayer(Protocol):
    """A player that can hold several games at once, identified by slot numbers.

    A slot is reused by later games once its game has ended (`end_game`). Per-game state
    (a search tree, an engine process) lives with the slot.
    """

    name: str
    max_concurrent: int | None  # most games at once (None: no limit of its own)

    def start_game(self, slot: int, game: Game, color: int) -> Failure | None:
        """A new empty game in `slot`, this player plays `color`."""
        ...

    def genmoves(self, requests: Sequence[MoveRequest]) -> list[int | Failure]:
        """One answer per request: a flat move (pass = N*N), `RESIGN`, or a Failure."""
        ...

    def observe(self, slot: int, color: int, move: int) -> Failure | None:
        """`move` by `color` was played in `slot` (own moves too); a Failure ends the game."""
        ...

    def end_game(self, slot: int) -> None:
        """The game in `slot` is over (for any reason); the slot may be reused."""
        ...


@dataclass(frozen=True)
class GameOutcome:
    """One finished (or aborted) game of a match.

    index: game number in the match (0-based); first_color: the colour the match's first
    player (the candidate in gating) had: +1 when index is even if colours alternate.
    winner: +1 Black, -1 White, 0 jigo, None for an aborted game (no result).
    end: how the game ended; detail: why, for FORFEIT and ABORT (else "").
    score: Tromp-Taylor ``black area - white area - komi`` when end is SCORE, else None.
    moves: ((colour, flat move), ...) as played (pass = N*N); an illegal move is not in it.
    duplicate_of: index of the earliest earlier game with the same move sequence, or None.
    """

    index: int
    black: str
    white: str
    size: int
    komi: float
    first_color: int
    winner: int | None
    end: EndReason
    detail: str
    score: float | None
    moves: tuple[tuple[int, int], ...]
    duplicate_of: int | None = None

    @property
    def reason(self) -> str:
        """The record text: "score", "resign", "forfeit: WHY" or "abort: WHY"."""
        if self.end in (EndReason.FORFEIT, EndReason.ABORT):
            return f"{self.end}: {self.detail}"
        return str(self.end)

    @property
    def first_result(self) -> float | None:
        """The first player's points: 1 win, 0.5 jigo, 0 loss, None when aborted."""
        if self.winner is None:
            return None
        return 0.5 if self.winner == 0 else float(self.winner == self.first_color)

    @property
    def aborted(self) -> bool:
        return self.winner is None


@dataclass
class _Live:
    """A game in progress: its slot, players by colour, and the verdict once known."""

    index: int
    slot: int
    game: Game
    players: dict[int, ArenaPlayer]
    first_color: int
    winner: int | None = None
    end: EndReason = EndReason.SCORE
    detail: str = ""
    score: float | None = None
    done: bool = False
    moves: list[tuple[int, int]] = field(default_factory=list)

    def finish(
        self, winner: int | None, end: EndReason, score: float | None = None, detail: str = ""
    ) -> None:
        self.winner, self.end, self.score, self.detail, self.done = winner, end, score, detail, True

    def fail(self, color: int, failure: Failure) -> None:
        """`color`'s player failed: it forfeits (the opponent wins) or the game is void."""
        if failure.kind is FailureKind.FORFEIT:
            self.finish(-color, EndReason.FORFEIT, detail=failure.reason)
        else:
            self.finish(None, EndReason.ABORT, detail=failure.reason)


def move_name(move: object, size: int) -> str:
    """A move for messages: the GTP vertex ("E5", "pass", "resign") or its repr if invalid."""
    if isinstance(move, int | np.integer) and 0 <= int(move) <= size * size:
        return coords.to_gtp(int(move), size)
    if isinstance(move, int | np.integer) and int(move) == RESIGN:
        return "resign"
    return repr(move)


def apply_answer(live: _Live, color: int, answer: int | Failure) -> None:
    """Referee one answer of `color`'s player: fail, resign, refuse or play it."""
    game = live.game
    if isinstance(answer, Failure):
        live.fail(color, answer)
        return
    valid = isinstance(answer, int | np.integer) and not isinstance(answer, bool)
    if valid and int(answer) == RESIGN:
        live.finish(-color, EndReason.RESIGN)
        return
    M = game.size * game.size
    if not valid or not 0 <= int(answer) <= M or not game.is_legal(int(answer), color):
        illegal = f"illegal move {move_name(answer, game.size)}"
        live.fail(color, Failure(FailureKind.FORFEIT, illegal))
        return
    move = int(answer)
    game.play(move, color)
    live.moves.append((color, move))
    for observer_color in (color, -color):
        failure = live.players[observer_color].observe(live.slot, color, move)
        if failure is not None:
            live.fail(observer_color, failure)
            return
    if game.is_over():
        score = float(game.score())
        live.finish(int(np.sign(score)), EndReason.SCORE, score)


def _round(first: ArenaPlayer, second: ArenaPlayer, live: Sequence[_Live]) -> None:
    """Each player answers, in one batch, every game where it is to move."""
    for player in (first, second):
        waiting = [g for g in live if not g.done and g.players[g.game.to_play] is player]
        if not waiting:
            continue
        answers = player.genmoves([MoveRequest(g.slot, g.game, g.game.to_play) for g in waiting])
        if len(answers) != len(waiting):
            raise ArenaError(
                f"player {player.name!r} answered {len(answers)} of {len(waiting)} requests"
            )
        for g, answer in zip(waiting, answers, strict=True):
            apply_answer(g, g.game.to_play, answer)


def _concurrency(first: ArenaPlayer, second: ArenaPlayer, games: int, limit: int | None) -> int:
    caps = [c for c in (limit, first.max_concurrent, second.max_concurrent) if c is not None]
    return max(1, min([games, *caps]))


@dataclass(frozen=True)
class Schedule:
    """Which games one `play_match` call plays, on what board, and how many at once.

    games: how many (>= 1), numbered start, start + 1, ...; the first player is Black in
    even-numbered games and White in odd ones (always Black if not ``alternate``).
    size, komi: the board (N) and the komi of every game.
    concurrent: the most games at once (None: no limit of the match's own; each player's
    ``max_concurrent`` caps it too).
    openings: game i starts after the moves of ``opening_for_game(openings, i)``
    (`tabula.openings`: games 2k and 2k+1 share one, colours swapped), which are part of its
    record; None starts every game from the empty board.
    """

    games: int
    size: int
    komi: float
    start: int = 0
    concurrent: int | None = None
    alternate: bool = True
    openings: Sequence[Opening] | None = None

    def first_color(self, index: int) -> int:
        """The first player's colour in game ``index``: +1 Black, -1 White."""
        return 1 if (index % 2 == 0 or not self.alternate) else -1


def play_match(
    first: ArenaPlayer,
    second: ArenaPlayer,
    schedule: Schedule,
    seen: dict[tuple[int, ...], int] | None = None,
) -> Generator[GameOutcome, None, None]:
    """Play the scheduled games between two players; yields each outcome in game order.

    A finished game's slot takes the next game (at most ``schedule.concurrent`` at once).
    seen: move sequences of earlier games -> their index, shared by the calls of one match
    (for `GameOutcome.duplicate_of`).
    Raises ArenaError for bad arguments.
    """
    if schedule.games < 1:
        raise ArenaError(f"a match needs at least 1 game, got {schedule.games}")
    if first is second:
        raise ArenaError(f"player {first.name!r} cannot play itself: make two player objects")
    width = _concurrency(first, second, schedule.games, schedule.concurrent)
    live: list[_Live] = []
    free = list(range(width - 1, -1, -1))
    finished: dict[int, _Live] = {}
    seen = {} if seen is None else seen
    end = schedule.start + schedule.games
    next_index = next_yield = schedule.start
    try:
        while next_yield < end:
            while free and next_index < end:
                live.append(_start(next_index, free.pop(), (first, second), schedule))
                next_index += 1
            _round(first, second, live)
            for g in [g for g in live if g.done]:
                live.remove(g)
                _end(g)
                free.append(g.slot)
                finished[g.index] = g
            while next_yield in finished:
                yield _outcome(finished.pop(next_yield), seen)
                next_yield += 1
    finally:
        for g in live:  # closed early (e.g. the gate decided): leave nothing open
            _end(g)


def _start(
    index: int, slot: int, pair: tuple[ArenaPlayer, ArenaPlayer], schedule: Schedule
) -> _Live:
    first_color = schedule.first_color(index)
    opening = opening_for_game(schedule.openings, index) if schedule.openings else ()
    game = Game(size=schedule.size, komi=schedule.komi)
    players = {first_color: pair[0], -first_color: pair[1]}
    live = _Live(index=index, slot=slot, game=game, players=players, first_color=first_color)
    for move in opening:
        live.moves.append((game.to_play, move))
        game.play(move)
    for color in (1, -1):
        failure = players[color].start_game(slot, game, color)
        if failure is not None and not live.done:
            live.fail(color, failure)
    return live


def _end(live: _Live) -> None:
    for color in (1, -1):
        live.players[color].end_game(live.slot)


def _outcome(live: _Live, seen: dict[tuple[int, ...], int]) -> GameOutcome:
    sequence = tuple(move for _, move in live.moves)
    duplicate_of = seen.setdefault(sequence, live.index)
    return GameOutcome(
        index=live.index,
        black=live.players[1].name,
        white=live.players[-1].name,
        size=live.game.size,
        komi=live.game.komi,
        first_color=live.first_color,
        winner=live.winner,
        end=live.end,
        detail=live.detail,
        score=live.score,
        moves=tuple(live.moves),
        duplicate_of=None if duplicate_of == live.index else duplicate_of,
    )


@dataclass(frozen=True)
class MatchSummary:
    """A match from the first player's side (draws count half in `score`).

    games: games played, aborted ones included; aborts: games without a result.
    forfeits: games ended by a forfeit (either side). duplicates: games that repeated an
    earlier game's move sequence. score: (wins + draws / 2) / games with a result (0 if none).
    scored: games that ended by score; mean_margin: their mean Tromp-Taylor margin with komi
    from the first player's side (points ahead; None when no game was scored). It moves long
    before the first win does (docs/strength.md, "The anchors"); resigned and forfeited games
    have no final score and are not in it.
    """

    first: str
    second: str
    games: int
    wins: int
    losses: int
    draws: int
    aborts: int
    forfeits: int
    resignations: int
    wins_as_black: int
    wins_as_white: int
    duplicates: int
    mean_moves: float
    scored: int = 0  # defaults: summaries recorded before the margin was kept still load
    mean_margin: float | None = None

    @property
    def score(self) -> float:
        decided = self.wins + self.losses + self.draws
        return (self.wins + 0.5 * self.draws) / decided if decided else 0.0


def summarize(outcomes: Sequence[GameOutcome], first: str, second: str) -> MatchSummary:
    """Totals over a match's outcomes from the first player's side."""
    results = [o.first_result for o in outcomes]
    margins = [o.score * o.first_color for o in outcomes if o.score is not None]
    return MatchSummary(
        first=first,
        second=second,
        games=len(outcomes),
        wins=sum(r == 1.0 for r in results),
        losses=sum(r == 0.0 for r in results),
        draws=sum(r == 0.5 for r in results),
        aborts=sum(r is None for r in results),
        forfeits=sum(o.end is EndReason.FORFEIT for o in outcomes),
        resignations=sum(o.end is EndReason.RESIGN for o in outcomes),
        wins_as_black=sum(o.first_result == 1.0 and o.first_color == 1 for o in outcomes),
        wins_as_white=sum(o.first_result == 1.0 and o.first_color == -1 for o in outcomes),
        duplicates=sum(o.duplicate_of is not None for o in outcomes),
        mean_moves=float(np.mean([len(o.moves) for o in outcomes])) if outcomes else 0.0,
        scored=len(margins),
        mean_margin=float(np.mean(margins)) if margins else None,
    )
