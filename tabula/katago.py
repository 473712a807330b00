"""KataGo's JSON analysis engine (``tabula analysis``): the protocol KaTrain and review
scripts speak, one JSON query a line in, one JSON answer a line per analysed turn out.

A query (KataGo's docs/Analysis_Engine.md; the fields tabula reads)::

    {"id": "q1", "moves": [["B", "E5"], ["W", "C3"]], "initialStones": [["B", "D4"]],
     "initialPlayer": "B", "rules": "tromp-taylor", "komi": 7.5, "boardXSize": 9,
     "boardYSize": 9, "analyzeTurns": [0, 1, 2], "maxVisits": 100,
     "includeOwnership": true, "includePolicy": true}

``id``, ``moves``, ``rules``, ``boardXSize`` and ``boardYSize`` are required. Turn 0 is the
position after the initial stones, turn t the one after ``moves[t-1]``; ``analyzeTurns``
defaults to the last turn. The side to move at turn t is the colour of ``moves[t]``, else the
opposite of the last move's, else ``initialPlayer`` (default black). Vertices are GTP's
(``"D4"``, ``"pass"``; `tabula.go.coords`). tabula plays one rule set, Tromp-Taylor area
scoring with positional superko: other ``rules`` are read as it, with a warning.
``overrideSettings`` may set ``reportAnalysisWinratesAs``; the search settings KataGo lets a
query override (and its other optional fields: ``priority``, ``avoidMoves``, ...) are ignored
with a warning.

An answer per turn::

    {"id": "q1", "isDuringSearch": false, "turnNumber": 2,
     "moveInfos": [{"move": "D5", "visits": 61, "winrate": 0.54, "scoreLead": 1.8,
                    "scoreMean": 1.8, "prior": 0.21, "order": 0, "pv": ["D5", "E4"]}, ...],
     "rootInfo": {"winrate": 0.53, "scoreLead": 1.6, "visits": 100, "currentPlayer": "W"},
     "ownership": [... N*N values in [-1, 1], row by row from the top left (A9) ...],
     "policy": [... N*N + 1 values, pass last, -1 for illegal moves ...]}

``winrate`` in [0, 1], ``scoreLead`` (the score head's expected final margin, komi included,
averaged over the search; ``scoreMean`` repeats it) and ``ownership`` are from the side that
``reportAnalysisWinratesAs`` names: BLACK (the engine's default, as KataGo's analysis config
and KaTrain's), WHITE or SIDETOMOVE. ``prior`` and ``policy`` are the network's (``policy``
renormalised over the legal moves, as KataGo's network masks the others). A network without
the ownership and score heads answers without ``scoreLead``, ``scoreMean`` and ``ownership``
(a query asking for ownership gets a warning). A finished game (two passes) has no moves to
analyse: its root is its Tromp-Taylor result, at 0 visits.

Bad input never stops the engine: a line that is not a JSON object gets ``{"error": ...}``,
a bad field ``{"error": ..., "field": ..., "id": ...}`` (the query is not analysed), an
ignored one ``{"warning": ..., "field": ..., "id": ...}`` (it is). The actions
``query_version``, ``clear_cache`` and ``terminate`` are echoed as KataGo does (queries are
answered in order, so there is nothing to terminate).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

import numpy as np

from tabula.go import coords
from tabula.go.game import Game, IllegalMoveError
from tabula.mcts.analysis import Analysis, MoveInfo

#: ``reportAnalysisWinratesAs``: the sides the answers' values can be reported from.
REPORT_AS = ("BLACK", "WHITE", "SIDETOMOVE")
#: Rules that score as tabula does (area scoring; superko differences aside).
AREA_RULES = ("tromp-taylor", "chinese", "chinese-ogs", "chinese-kgs", "aga", "new-zealand")
#: The KataGo release whose analysis protocol this speaks (``query_version``).
KATAGO_VERSION = "1.15.0"
_COLOURS = {"B": 1, "W": -1}
_READ = {
    "id", "action", "moves", "initialStones", "initialPlayer", "rules", "komi", "boardXSize",
    "boardYSize", "analyzeTurns", "maxVisits", "includeOwnership", "includePolicy",
    "overrideSettings", "terminateId", "turnNumbers",
}  # fmt: skip
_IGNORED = "is not supported by tabula and was ignored"


class QueryError(Exception):
    """A query field that stops the query: ``field`` names it (None: the whole line)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Analyst(Protocol):
    """What the engine analyses with (`tabula.players.MctsPlayer`)."""

    def analysis(self, game: Game, color: int) -> Analysis:
        """A search of `game` with `color` to move (`tabula.mcts.analysis.Analysis`)."""
        ...

    def network_view(self, game: Game, color: int) -> tuple[np.ndarray, float]:
        """The network's priors float[M+1] (unmasked) and value for `game`, `color` to move."""
        ...


@dataclass(frozen=True)
class Query:
    """A parsed analysis query.

    id: the query's; size: N; komi; stones: the initial stones ((colour, flat move), colour
    +1 black / -1 white); moves: the moves, the same way; initial_player: who moves at turn 0
    when no move says (+1/-1); turns: the turns to analyse, in the query's order; visits: the
    root visits of each search; ownership, policy: include them; report_as: one of
    `REPORT_AS`.
    """

    id: str
    size: int
    komi: float
    stones: tuple[tuple[int, int], ...]
    moves: tuple[tuple[int, int], ...]
    initial_player: int
    turns: tuple[int, ...]
    visits: int
    ownership: bool = False
    policy: bool = False
    report_as: str = "BLACK"


@dataclass(frozen=True)
class Defaults:
    """What a query that does not say gets: ``size`` (also the only size the network plays),
    ``komi``, ``visits`` (maxVisits) and ``report_as``; ``aux``: whether the network has the
    ownership and score heads."""

    size: int
    komi: float
    visits: int
    report_as: str = "BLACK"
    aux: bool = True


def _bool(raw: dict, name: str) -> bool:
    value = raw.get(name, False)
    if not isinstance(value, bool):
        raise QueryError(f"{name} must be a boolean", name)
    return value


def _int(raw: dict, name: str, default: int | None = None) -> int:
    value = raw.get(name, default)
    if value is None:
        raise QueryError(f"{name} is required", name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueryError(f"{name} must be an integer", name)
    return value


def _player(value: Any, field: str) -> int:
    if not isinstance(value, str) or value.upper() not in _COLOURS:
        raise QueryError(f"{value!r} is not a player (B or W)", field)
    return _COLOURS[value.upper()]


def _placements(raw: dict, name: str, size: int) -> tuple[tuple[int, int], ...]:
    """``[[player, vertex], ...]`` as (colour, flat move)."""
    value = raw.get(name, [])
    if not isinstance(value, list):
        raise QueryError(f"{name} must be a list of [player, vertex] pairs", name)
    placed = []
    for i, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
            raise QueryError(f"{name}[{i}] must be a [player, vertex] pair", name)
        try:
            move = coords.from_gtp(pair[1], size)
        except ValueError:
            message = f"{name}[{i}]: {pair[1]!r} is not a vertex of the board"
            raise QueryError(message, name) from None
        placed.append((_player(pair[0], name), move))
    return tuple(placed)


def _komi(raw: dict, default: float) -> float:
    komi = raw.get("komi", default)
    if isinstance(komi, bool) or not isinstance(komi, int | float) or not math.isfinite(komi):
        raise QueryError("komi must be a number", "komi")
    if not -150 <= komi <= 150 or komi * 2 != int(komi * 2):
        raise QueryError("komi must be an integer or half-integer in [-150, 150]", "komi")
    return float(komi)


def _size(raw: dict, size: int) -> int:
    x, y = _int(raw, "boardXSize"), _int(raw, "boardYSize")
    if x != y:
        raise QueryError(f"the board must be square (got {x}x{y})", "boardYSize")
    if x != size:
        raise QueryError(f"this network plays {size}x{size} only (got {x}x{x})", "boardXSize")
    return x


def _turns(raw: dict, moves: int) -> tuple[int, ...]:
    value = raw.get("analyzeTurns", [moves])
    if not isinstance(value, list) or any(type(t) is not int for t in value):
        raise QueryError("analyzeTurns must be a list of integers", "analyzeTurns")
    bad = [t for t in value if not 0 <= t <= moves]
    if bad:
        raise QueryError(f"turn {bad[0]} is not in 0..{moves}", "analyzeTurns")
    return tuple(value)


def _report_as(raw: dict, default: str, warnings: list[dict]) -> str:
    """``overrideSettings.reportAnalysisWinratesAs`` (the other settings: warnings)."""
    settings = raw.get("overrideSettings", {})
    if not isinstance(settings, dict):
        raise QueryError("overrideSettings must be an object", "overrideSettings")
    for key in settings:
        if key != "reportAnalysisWinratesAs":
            warnings.append({"warning": f"{key} {_IGNORED}", "field": "overrideSettings"})
    value = settings.get("reportAnalysisWinratesAs", default)
    if not isinstance(value, str) or value.upper() not in REPORT_AS:
        raise QueryError(f"reportAnalysisWinratesAs must be one of {REPORT_AS}", "overrideSettings")
    return value.upper()


def _rules_warning(raw: dict) -> dict | None:
    if "rules" not in raw:
        raise QueryError("rules is required", "rules")
    rules = raw["rules"]
    if isinstance(rules, str) and rules.lower() in AREA_RULES:
        return None
    if not isinstance(rules, str | dict):
        raise QueryError("rules must be a string or an object", "rules")
    shown = rules if isinstance(rules, str) else json.dumps(rules, sort_keys=True)
    return {"warning": f"tabula plays Tromp-Taylor rules only: {shown} read as tromp-taylor",
            "field": "rules"}  # fmt: skip


def parse_query(raw: dict, defaults: Defaults) -> tuple[Query, list[dict]]:
    """The `Query` of a decoded query line, and its warnings (each ``{"warning", "field"}``);
    QueryError for a field that stops it."""
    warnings = [{"warning": f"{key} {_IGNORED}", "field": key} for key in raw if key not in _READ]
    size = _size(raw, defaults.size)
    komi = _komi(raw, defaults.komi)
    if "moves" not in raw:
        raise QueryError("moves is required", "moves")
    moves = _placements(raw, "moves", size)
    stones = _placements(raw, "initialStones", size)
    initial = _player(raw.get("initialPlayer", "B"), "initialPlayer")
    visits = _int(raw, "maxVisits", defaults.visits)
    if visits < 1:
        raise QueryError("maxVisits must be at least 1", "maxVisits")
    rules = _rules_warning(raw)
    warnings += [rules] if rules else []
    report_as = _report_as(raw, defaults.report_as, warnings)
    query = Query(
        str(raw["id"]), size, komi, stones, moves, initial, _turns(raw, len(moves)), visits,
        _bool(raw, "includeOwnership"), _bool(raw, "includePolicy"), report_as,
    )  # fmt: skip
    return query, warnings


def positions(query: Query) -> dict[int, Game]:
    """The game at each turn the query analyses, its side to move set; QueryError (field
    ``initialStones`` or ``moves``) for a stone or move the rules refuse."""
    game = Game(size=query.size, komi=query.komi)
    for i, (colour, move) in enumerate(query.stones):
        _place(game, colour, move, f"initialStones[{i}]", "initialStones", query.size)
    wanted = set(query.turns)
    found: dict[int, Game] = {}
    for turn in range(len(query.moves) + 1):
        if turn in wanted:
            found[turn] = _to_move(game.copy(), query, turn)
        if turn < len(query.moves):
            colour, move = query.moves[turn]
            _place(game, colour, move, f"moves[{turn}]", "moves", query.size)
    return found


def _place(game: Game, colour: int, move: int, where: str, field: str, size: int) -> None:
    name = "B" if colour == 1 else "W"
    illegal = QueryError(f"{where}: illegal move {name} {coords.to_gtp(move, size)}", field)
    if game.is_over() or not game.is_legal(move, colour):
        raise illegal
    try:
        game.play(move, colour)
    except IllegalMoveError:
        raise illegal from None


def _to_move(game: Game, query: Query, turn: int) -> Game:
    """``game`` (turn ``turn``) with its side to move as the module docstring says."""
    if turn < len(query.moves):
        game.to_play = query.moves[turn][0]
    elif query.moves:
        game.to_play = -query.moves[-1][0]
    else:
        game.to_play = query.initial_player
    return game


def _sign(report_as: str, to_play: int) -> int:
    """+1 when values from the side to move are reported as they are, else -1."""
    return 1 if report_as == "SIDETOMOVE" else to_play * (1 if report_as == "BLACK" else -1)


def _move_info(info: MoveInfo, order: int, sign: int, size: int) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "move": coords.to_gtp(info.move, size),
        "visits": info.visits,
        "winrate": _winrate(sign * info.value),
    }
    if info.score is not None:
        entry["scoreLead"] = entry["scoreMean"] = round(sign * info.score, 6)
    entry |= {"prior": round(info.prior, 6), "order": order,
              "pv": [coords.to_gtp(m, size) for m in info.pv]}  # fmt: skip
    return entry


def _winrate(value: float) -> float:
    return round((1.0 + max(-1.0, min(1.0, value))) / 2.0, 6)


def answer(query: Query, turn: int, game: Game, analyst: Analyst) -> dict[str, Any]:
    """The answer for one turn: search ``game`` to ``query.visits`` root visits."""
    analysis = analyst.analysis(game.copy(), game.to_play)
    analysis.search_to(query.visits)
    sign = _sign(query.report_as, game.to_play)
    moves = [] if game.is_over() else analysis.moves()
    root: dict[str, Any] = {"winrate": _winrate(sign * analysis.value())}
    score = analysis.score()
    if score is not None:
        root["scoreLead"] = round(sign * score, 6)
    root |= {"visits": 0 if game.is_over() else analysis.visits,
             "currentPlayer": "B" if game.to_play == 1 else "W"}  # fmt: skip
    out: dict[str, Any] = {"id": query.id, "isDuringSearch": False, "turnNumber": turn,
                           "moveInfos": [_move_info(m, i, sign, query.size)
                                         for i, m in enumerate(moves)],
                           "rootInfo": root}  # fmt: skip
    ownership = analysis.ownership() if query.ownership else None
    if ownership is not None:
        out["ownership"] = [round(float(v), 6) for v in sign * ownership]
    if query.policy:
        priors, _ = analyst.network_view(game.copy(), game.to_play)
        legal = np.asarray(game.legal_mask(), dtype=bool)
        priors = np.where(legal, priors, 0.0) / max(float(priors[legal].sum()), 1e-12)
        pairs = zip(priors, legal, strict=True)
        out["policy"] = [round(float(p), 6) if ok else -1 for p, ok in pairs]
    return out


def action_answer(raw: dict) -> dict[str, Any]:
    """The echo of an action query (``query_version`` adds the version); QueryError for an
    unknown action."""
    action = raw["action"]
    if action == "query_version":
        return raw | {"version": KATAGO_VERSION, "git_hash": "<omitted>"}
    if action in ("clear_cache", "terminate"):
        return dict(raw)
    raise QueryError(f"unknown action {action!r}", "action")


def respond(line: str, defaults: Defaults, analyst: Analyst) -> Iterator[dict[str, Any]]:
    """The answers to one input line, in order: warnings and errors, then one answer per
    analysed turn (nothing for a blank line)."""
    if not line.strip():
        return
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError) as error:  # (nesting deeper than Python's stack)
        yield {"error": f"could not parse json: {str(error) or type(error).__name__}"}
        return
    if not isinstance(raw, dict):
        yield {"error": "a query must be a JSON object"}
        return
    if not isinstance(raw.get("id"), str):
        yield {"error": "a query must have a string id", "field": "id"}
        return
    ident = {"id": raw["id"]}
    try:
        if "action" in raw:
            yield action_answer(raw)
            return
        query, warnings = parse_query(raw, defaults)
        games = positions(query)
    except QueryError as error:
        yield {"error": str(error), **({"field": error.field} if error.field else {}), **ident}
        return
    yield from (warning | ident for warning in warnings)
    if query.ownership and not defaults.aux:
        yield {
            "warning": "this network has no ownership head: no ownership reported",
            "field": "includeOwnership",
            **ident,
        }
    for turn in query.turns:
        yield answer(query, turn, games[turn], analyst)


def serve(inp: TextIO, out: TextIO, defaults: Defaults, analyst: Analyst) -> None:
    """Answer every line of ``inp`` on ``out``, one JSON object a line, flushed as written,
    until the end of input; undecodable input bytes are replaced (the line then fails to
    parse, or names a bad vertex), never raised."""
    reconfigure = getattr(inp, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="replace")
    for line in inp:
        for reply in respond(line, defaults, analyst):
            out.write(json.dumps(reply, separators=(",", ":")) + "\n")
            out.flush()
