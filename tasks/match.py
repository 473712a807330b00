"""A match between two player specs, and the gate, which is a match fed to a `Gate`.

`MatchSpec` says what a match plays and where its games go; `run_match` plays it and
`run_gate` plays one until `tabula.gating.Gate` decides. Both are plain functions: the
evaluation tasks (`tasks.evaluate`), the CLI (``tabula match``, ``tabula gate``) and the
benchmarks call them. Side effects live here (the arena in `tabula.arena` is pure):

- every game is written as SGF (``<match_id>-<game>.sgf``, temporary name then rename), the
  record of `tabula.sgf.match_record` (the result in RE, "B+F" for a win by forfeit, "Void"
  for an abort, and for games that did not end by score the reason as the root comment), with
  no date, so a match played again writes the same bytes whatever the day;
- each finished game is appended to the results store (`tasks.run.results`) at once, so a crash
  loses at most the games in progress and ``tabula elo`` sees every finished game;
- a gate writes its evidence as JSON (``gate.json``): the decision of `tabula.gating.Gate`
  (wins, losses, win rate and its 95% interval, the SPRT statistic when used), the SGF list,
  the duplicate count and every game's result.

Both players are built by `tasks.players.make_player` with seeds derived from the match's
seed; GTP engine processes are closed at the end, whatever happens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from model.files import write_bytes, write_text
from tabula.arena import ArenaError, GameOutcome, MatchSummary, Schedule, play_match, summarize
from tabula.config import Config
from tabula.errors import TabulaError
from tabula.gating import Gate, GateConfig, GateDecision
from tabula.openings import Opening
from tabula.sgf import game_to_sgf, match_record
from tasks.players import Resolver, make_player
from tasks.run.layout import relative_to
from tasks.run.results import append_results

Progress = Callable[["PlayedGame"], None]
GATE_FILE = "gate.json"


class MatchError(TabulaError):
    """A match that cannot be played or decided (e.g. every game aborted)."""


@dataclass(frozen=True)
class MatchSpec:
    """What a match plays and where its games go (`run_match`, `run_gate`).

    players: (first, second) player specs (`tasks.players.make_player`: random, PATH,
    raw:PATH, mcts:PATH@SIMS, gtp:CMD, ...); the first is Black in even-numbered games (in a
    gate, the candidate then the best).
    games: how many games (>= 1); in a gate, the most it plays.
    seed: the match seed; each player's seed is derived from it.
    match_id: the games' id in the results store and in the SGF names (None:
    ``<first>-vs-<second>-<UTC time>``, `default_match_id`).
    iteration: the pipeline iteration recorded with each game in the store (None outside a run).
    sgf_dir: every game is written here as SGF (None: no SGF).
    store: the results store every game is appended to (None: not stored).
    root: recorded SGF paths are relative to it when inside it (the project, in a pipeline run).
    openings: game i starts from ``opening_for_game(openings, i)`` (`tabula.openings`); None
    starts every game from the empty board.
    start: number of the first game: a match resumed after ``start`` recorded games plays
    games start, start + 1, ...; colours and openings follow the game number.
    concurrent: games at once (None: ``selfplay.concurrent_games``, or a quarter of the
    gate's games with the SPRT; GTP engines cap it).
    alternate: colours alternate game by game (False: the first player is always Black).
    player_cfgs: the configs the two players are built with (their search, simulations and
    precision) when they differ; the rules and the match settings are always the match's config.
    resolver: turns a registry URI in a spec into a checkpoint path (None: such specs are refused).
    """

    players: tuple[str, str]
    games: int
    seed: int = 0
    match_id: str | None = None
    iteration: int | None = None
    sgf_dir: Path | None = None
    store: Path | None = None
    root: Path | None = None
    openings: tuple[Opening, ...] | None = None
    start: int = 0
    concurrent: int | None = None
    alternate: bool = True
    player_cfgs: tuple[Config, Config] | None = None
    resolver: Resolver | None = None


@dataclass(frozen=True)
class PlayedGame:
    """One game of a match as recorded: the arena's outcome and where its SGF went."""

    outcome: GameOutcome
    sgf: Path | None

    def row(self, match_id: str, iteration: int | None) -> dict[str, Any]:
        """The results-store row (`tasks.run.results.COLUMNS`)."""
        o = self.outcome
        return {
            "match_id": match_id,
            "game": o.index,
            "black": o.black,
            "white": o.white,
            "winner": o.winner,
            "reason": o.reason,
            "score": o.score,
            "moves": len(o.moves),
            "sgf": None if self.sgf is None else str(self.sgf),
            "iteration": iteration,
        }


@dataclass(frozen=True)
class MatchResult:
    """A finished match: per-game records (in game order) and the summary table's numbers.

    summary is from the first player's side (the ``--black`` player of ``tabula match``,
    Black in even games); store: the results store the games went to (None if not stored).
    """

    match_id: str
    first: str
    second: str
    games: tuple[PlayedGame, ...]
    summary: MatchSummary
    sgf_dir: Path | None
    store: Path | None


def write_sgf(outcome: GameOutcome, sgf_dir: Path, match_id: str) -> Path:
    """Save one game as ``<sgf_dir>/<match_id>-<index>.sgf`` (atomically); returns the path.

    The bytes depend on the game and the match id only: no date (DT), see the comment below.
    """
    # No DT: the gate's and the anchors' SGFs are the evaluate stage's output, which DVC
    # hashes, and a date taken from the clock made a stage resumed or repeated after midnight
    # hash differently. DT is optional in FF[4]; an ad-hoc `tabula match` still
    # carries its UTC time in its match id (`default_match_id`), hence in GN and the file name.
    extra = {"GN": f"{match_id} game {outcome.index}"}
    path = sgf_dir / f"{match_id}-{outcome.index:04d}.sgf"
    write_bytes(path, game_to_sgf(match_record(outcome), extra=extra))
    return path


def default_match_id(first: str, second: str) -> str:
    """``<first>-vs-<second>-<UTC time>`` with only the characters the results store allows."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{first}-vs-{second}-{stamp}")


def _seeds(seed: int) -> tuple[int, int]:
    """Independent seeds for the two players of a match."""
    a, b = np.random.SeedSequence(seed).generate_state(2)
    return int(a), int(b)


class _Session:
    """A match's two players (closed, GTP processes ended, on exit) and its id."""

    def __init__(self, spec: MatchSpec, cfg: Config) -> None:
        cfgs = spec.player_cfgs or (cfg, cfg)
        if any(c.rules != cfg.rules for c in cfgs):
            raise ArenaError("the players' configs must have the match's rules (board size, komi)")
        self.players: list[Any] = []
        try:
            for player, player_cfg, seed in zip(spec.players, cfgs, _seeds(spec.seed), strict=True):
                self.players.append(
                    make_player(player, player_cfg, seed=seed, resolver=spec.resolver)
                )
        except BaseException:
            self.close()
            raise
        first, second = self.players
        if first.name == second.name:  # the store refuses a game of a player against itself
            second.name = f"{second.name}#2"
        self.names: tuple[str, str] = (first.name, second.name)
        self.match_id = spec.match_id or default_match_id(*self.names)

    def close(self) -> None:
        for player in self.players:
            close = getattr(player, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _games(
    session: _Session, spec: MatchSpec, cfg: Config, seen: dict[tuple[int, ...], int]
) -> Generator[PlayedGame, None, None]:
    """Play ``spec``'s games through the arena, recording each (SGF, store) as it is yielded;
    ``seen``: the move sequences of the match's earlier games (`tabula.arena.play_match`)."""
    default_width = cfg.selfplay.concurrent_games
    schedule = Schedule(
        games=spec.games,
        size=cfg.rules.board_size,
        komi=cfg.rules.komi,
        start=spec.start,
        concurrent=spec.concurrent if spec.concurrent is not None else default_width,
        alternate=spec.alternate,
        openings=spec.openings,
    )
    first, second = session.players
    outcomes = play_match(first, second, schedule, seen)
    try:
        for outcome in outcomes:
            sgf = None
            if spec.sgf_dir is not None:
                sgf = relative_to(write_sgf(outcome, spec.sgf_dir, session.match_id), spec.root)
            record = PlayedGame(outcome, sgf)
            if spec.store is not None:
                append_results(spec.store, [record.row(session.match_id, spec.iteration)])
            yield record
    finally:
        outcomes.close()


def run_match(spec: MatchSpec, cfg: Config, progress: Progress | None = None) -> MatchResult:
    """Play ``spec``'s games (``tabula match --black A --white B``) under ``cfg``'s rules.

    Every game goes to ``spec.sgf_dir`` as SGF and to ``spec.store`` when given.
    progress: called with each PlayedGame as games finish (in game order).
    Raises PlayerSpecError / CheckpointError for bad specs, ArenaError for bad arguments.
    """
    if spec.games < 1:
        raise ArenaError(f"a match needs at least 1 game, got {spec.games}")
    records = []
    with _Session(spec, cfg) as session:
        for record in _games(session, spec, cfg, {}):
            records.append(record)
            if progress is not None:
                progress(record)
    first, second = session.names
    summary = summarize([r.outcome for r in records], first, second)
    return MatchResult(
        session.match_id, first, second, tuple(records), summary, spec.sgf_dir, spec.store
    )


def run_gate(
    spec: MatchSpec, cfg: Config, out_dir: Path, progress: Progress | None = None
) -> GateDecision:
    """Gate a candidate (``spec.players[0]``) against the best; returns the decision and
    writes the evidence to ``out_dir/gate.json``.

    Plays up to ``spec.games`` games, the rest of the gate's settings from ``cfg``
    (`GateConfig.from_evaluation`), feeding each result to `tabula.gating.Gate` in game order,
    and stops as soon as it decides (SPRT). The games in progress at that moment are dropped
    (not recorded); with the SPRT, at most a quarter of the games run at once unless
    ``spec.concurrent`` says. Aborted games give no result, so more games are played in their
    place. SGFs and store rows as in `run_match`.
    Raises MatchError if a round of games gives no result at all (every game aborted).
    """
    gate = Gate(replace(GateConfig.from_evaluation(cfg.evaluation), games=spec.games))
    if spec.concurrent is None and gate.config.sprt:
        # Games in flight when the SPRT stops are wasted: keep a quarter of the maximum at once.
        spec = replace(spec, concurrent=max(1, min(cfg.selfplay.concurrent_games, spec.games // 4)))
    records: list[PlayedGame] = []
    seen: dict[tuple[int, ...], int] = {}
    with _Session(spec, cfg) as session:
        while not gate.decided:
            needed, before = gate.config.games - gate.games, gate.games
            round_ = replace(spec, games=needed, start=spec.start + len(records))
            stream = _games(session, round_, cfg, seen)
            with closing(stream):  # stopping early ends the games in progress now
                for record in stream:
                    records.append(record)
                    if progress is not None:
                        progress(record)
                    if record.outcome.first_result is not None:
                        gate.update(record.outcome.first_result)
                    if gate.decided:
                        break
            if gate.games == before:
                raise MatchError(f"gate {session.match_id}: all {needed} games aborted, no result")
    decision = gate.decision()
    _write_evidence(out_dir / GATE_FILE, decision, gate.config, session, records)
    return decision


def _write_evidence(
    path: Path,
    decision: GateDecision,
    config: GateConfig,
    session: _Session,
    records: list[PlayedGame],
) -> None:
    """The gate's evidence as JSON (atomically): the decision, its settings and every game."""
    candidate, best = session.names
    match_id = session.match_id
    summary = summarize([r.outcome for r in records], candidate, best)
    evidence = {
        "match_id": match_id,
        "candidate": candidate,
        "best": best,
        **decision.to_dict(),
        "threshold": config.threshold,
        "sprt": config.sprt,
        "sprt_elo": [config.elo0, config.elo1] if config.sprt else None,
        "games_played": len(records),
        "aborts": summary.aborts,
        "forfeits": summary.forfeits,
        "duplicates": summary.duplicates,
        "sgf": [str(r.sgf) for r in records if r.sgf is not None],
        "results": [
            r.row(match_id, None) | {"candidate_color": r.outcome.first_color} for r in records
        ],
    }
    write_text(path, json.dumps(evidence, indent=2) + "\n")
