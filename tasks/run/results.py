"""The results store: every rated game of every match, and the Elo table fitted over them.

Layout: a directory with one JSON-lines file per match, ``<match_id>.jsonl``, one game per line.
Each file is only ever replaced whole (`model.files`: a hidden temporary name in the same
directory, fsynced, then renamed), so a crash leaves either the old or the new file and never a
half-written table. Appending to a match rewrites its file; one writer per match.

Row columns (``COLUMNS``):
    match_id   str, letters, digits, ".", "_", "-" (it names the file)
    game       int >= 0 or None: the game's index in its match; a row appended with the same
               (match_id, game) replaces the stored one, so a retried match does not count twice
    black, white  player names (e.g. "random", "gnugo", "iter-0003")
    winner     +1 black won, -1 white won, 0 draw (jigo), None: aborted, no result
    reason     "score", "resign", "forfeit: illegal move", "abort: timeout", ...
    score      float or None: Tromp–Taylor score, black minus white minus komi
    moves      int or None: moves played
    sgf        str or None: path of the game record
    timestamp  ISO 8601 UTC; filled in at append time when missing
    iteration  int or None: the pipeline iteration that played the match

Forfeits and aborts: a forfeit is a result, the opponent of the player who forfeited wins, and
the arena stores it with that winner; it is rated like any other game. An abort (timeout,
crash: ``winner`` None, reason starting "abort") is stored for the record but left out of the
Elo fit, since nobody won.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from model.files import write_text
from tabula.elo import DEFAULT_ANCHOR, GameResult, fit_ratings
from tabula.errors import TabulaError

COLUMNS = (
    "match_id",
    "game",
    "black",
    "white",
    "winner",
    "reason",
    "score",
    "moves",
    "sgf",
    "timestamp",
    "iteration",
)
_REQUIRED = ("match_id", "black", "white", "winner", "reason")
_MATCH_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ResultsStoreError(TabulaError):
    """A malformed result row or an unreadable results store."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_optional(row: Mapping[str, Any]) -> None:
    for key in ("game", "moves", "iteration"):
        if row.get(key) is not None and not (_is_int(row[key]) and row[key] >= 0):
            raise ResultsStoreError(f"{key} must be an integer >= 0 or None, got {row[key]!r}")
    score = row.get("score")
    if score is not None and not (
        isinstance(score, int | float) and not isinstance(score, bool) and math.isfinite(score)
    ):
        raise ResultsStoreError(f"score must be a finite number or None, got {score!r}")
    for key in ("sgf", "timestamp"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise ResultsStoreError(f"{key} must be a string or None, got {row[key]!r}")


def validate_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with every column present (missing optional ones None); ResultsStoreError if bad."""
    unknown = sorted(set(row) - set(COLUMNS))
    missing = [key for key in _REQUIRED if key not in row]
    if unknown or missing:
        raise ResultsStoreError(f"result row: unknown columns {unknown}, missing {missing}")
    match_id = row["match_id"]
    if not (isinstance(match_id, str) and _MATCH_ID.fullmatch(match_id)):
        raise ResultsStoreError(f"match_id must be letters, digits, '.', '_', '-': {match_id!r}")
    black, white, winner, reason = row["black"], row["white"], row["winner"], row["reason"]
    if not (isinstance(black, str) and isinstance(white, str) and black and white):
        raise ResultsStoreError(f"black and white must be player names, got {black!r}, {white!r}")
    if black == white:
        raise ResultsStoreError(f"a player cannot play itself in a rated game: {black!r}")
    if not (isinstance(reason, str) and reason):
        raise ResultsStoreError(f"reason must be a non-empty string, got {reason!r}")
    if winner is None:
        if not reason.startswith("abort"):
            raise ResultsStoreError(f"a row without a winner is an abort: reason {reason!r}")
    elif not (_is_int(winner) and winner in (-1, 0, 1)):
        raise ResultsStoreError(f"winner must be +1, -1, 0 or None (abort), got {winner!r}")
    elif reason.startswith("abort"):
        raise ResultsStoreError(f"an aborted game has no winner, got winner={winner}")
    _check_optional(row)
    return {key: row.get(key) for key in COLUMNS}


def _match_file(store: Path, match_id: str) -> Path:
    return store / f"{match_id}.jsonl"


def _read_match(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(validate_row(json.loads(line)))
            except (json.JSONDecodeError, ResultsStoreError, TypeError) as err:
                raise ResultsStoreError(f"{path}:{number}: corrupt result row ({err})") from None
    return rows


def append_results(store: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """Add result rows to the store directory (created if needed); returns the directory.

    Rows are validated first (nothing is written if one is bad). Each match's file is then
    rewritten atomically with its old rows plus the new ones, a new row replacing an old one
    with the same (match_id, game).
    """
    store_dir = Path(store)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    by_match: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        clean = validate_row(row)
        if clean["timestamp"] is None:
            clean["timestamp"] = now
        by_match.setdefault(clean["match_id"], []).append(clean)
    if store_dir.exists() and not store_dir.is_dir():
        raise ResultsStoreError(f"results store {store_dir} is a file, expected a directory")
    store_dir.mkdir(parents=True, exist_ok=True)
    for match_id, new_rows in by_match.items():
        path = _match_file(store_dir, match_id)
        merged = _read_match(path) if path.exists() else []
        for row in new_rows:
            if row["game"] is not None:
                merged = [old for old in merged if old["game"] != row["game"]]
            merged.append(row)
        lines = "".join(json.dumps(row, sort_keys=False) + "\n" for row in merged)
        write_text(path, lines)
    return store_dir


def load_results(store: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every stored row (aborts included), ordered by match_id then row order; [] if no store."""
    store_dir = Path(store)
    if not store_dir.exists():
        return []
    if not store_dir.is_dir():
        raise ResultsStoreError(f"results store {store_dir} is a file, expected a directory")
    rows: list[dict[str, Any]] = []
    for path in sorted(store_dir.glob("*.jsonl")):
        if not path.name.startswith("."):  # hidden: a temporary file of a writer
            rows.extend(_read_match(path))
    return rows


def results_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[GameResult]:
    """The rated games among the rows: aborts (winner None) are left out."""
    return [
        GameResult(
            black=row["black"], white=row["white"], winner=row["winner"], reason=row["reason"]
        )
        for row in rows
        if row["winner"] is not None
    ]


def ratings_table(
    store: str | os.PathLike[str],
    anchor: str | None = DEFAULT_ANCHOR,
    anchor_elo: float = 0.0,
    prior_games: float = 2.0,
    anchors: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Fit Elo over every rated game in the store; rows sorted by Elo, strongest first.

    Each row: rank (1 = strongest), player, elo, low, high (95% interval), games, wins (draws
    as 0.5). The anchor rules (``anchor``, or several fixed ``anchors``) are those of
    ``tabula.elo.fit_ratings``.
    """
    ratings = fit_ratings(
        results_from_rows(load_results(store)),
        anchor=anchor,
        anchor_elo=anchor_elo,
        prior_games=prior_games,
        anchors=anchors,
    )
    ordered = sorted(ratings.values(), key=lambda r: (-r.elo, r.player))
    return [
        {
            "rank": rank,
            "player": r.player,
            "elo": r.elo,
            "low": r.low,
            "high": r.high,
            "games": r.games,
            "wins": r.wins,
        }
        for rank, r in enumerate(ordered, start=1)
    ]
