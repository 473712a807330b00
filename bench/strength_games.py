"""The games `bench/strength.py` plays: matches kept in a results store, so that a killed
benchmark resumes where it stopped, and the climb up the GnuGo ladder.

Ladder games follow `bench/ladder.py`'s protocol: komi 7.5, Tromp-Taylor scoring, GnuGo with
``--chinese-rules --positional-superko --capture-all-dead``, every game from a seeded opening
with colours swapped in pairs, up to ``LADDER_GAMES_AT_ONCE`` games at once (one GnuGo process
each, our side batched across them).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.ladder import side_summary
from bench.strength_report import LEVELS
from tabula.config import Config
from tabula.ladder import gnugo_spec
from tabula.openings import match_openings
from tasks.match import MatchSpec, run_match
from tasks.run.results import load_results

# Ladder games played at once. Our side's network batches grow with it: 16 games of a 4x32
# checkpoint at 64 simulations cost 8.2 CPU-s a game against 15.8 at 4 at once (measured side
# by side on a busy 2-core machine, GnuGo's share about 0.8 CPU-s a game either way).
LADDER_GAMES_AT_ONCE = 16


def play_match(spec: MatchSpec, cfg: Config) -> list[dict[str, Any]]:
    """The store's rows of ``spec``'s match (its ``match_id`` in its ``store``), after playing
    the games of its ``games`` that the store still lacks, from a seeded opening per pair of
    games, `LADDER_GAMES_AT_ONCE` at once."""
    assert spec.store is not None and spec.match_id is not None, "a resumable match is stored"
    store, match_id = spec.store, spec.match_id
    rows = [r for r in load_results(store) if r["match_id"] == match_id] if store.exists() else []
    if len(rows) < spec.games:
        rest = replace(
            spec,
            games=spec.games - len(rows),
            start=len(rows),
            openings=match_openings(cfg.rules.board_size, spec.games, 2),
            concurrent=LADDER_GAMES_AT_ONCE,
        )
        run_match(rest, cfg)
        rows = [r for r in load_results(store) if r["match_id"] == match_id]
    return rows


def play_ladder(
    player: str, spec: str, level: int, games: int, cfg: Config, store: Path, seed: int
) -> dict[str, Any]:
    """``games`` games of ``spec`` against GnuGo ``level`` (resumed from the store)."""
    match_id = f"{player.replace('/', '-')}-vs-gnugo-l{level}"
    match = MatchSpec((spec, gnugo_spec(level)), games, seed=seed, match_id=match_id, store=store)
    return {"level": level, **side_summary(play_match(match, cfg), player)}


def climb(
    player: str, spec: str, games: int, cfg: Config, store: Path, seed: int
) -> list[dict[str, Any]]:
    """``games`` games against each GnuGo level of the ladder, from level 1 up while the
    player wins more than half."""
    matches = []
    for level in LEVELS:
        result = play_ladder(player, spec, level, games, cfg, store, seed)
        matches.append(result)
        if (result["win_rate"] or 0.0) <= 0.5:
            break
    return matches
