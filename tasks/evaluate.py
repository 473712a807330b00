"""The evaluation stage: the gate, the anchor matches and the Elo fit, each a Prefect task over
the match functions here (players from specs, the arena, SGF files, the results store, evidence).

Side effects live here (the arena in `tabula.arena` is pure):

- every game is written as SGF (``<match_id>-<game>.sgf``, temporary name then rename), the
  record of `tabula.sgf.match_record` (the result in RE, "B+F" for a win by forfeit, "Void"
  for an abort, and for games that did not end by score the reason as the root comment);
- each finished game is appended to the results store (`tasks.run.results`) at once, so a crash
  loses at most the games in progress and ``tabula elo`` sees every finished game;
- a gate writes its evidence as JSON (``gate.json``): the decision of `tabula.gating.Gate`
  (wins, losses, win rate and its 95% interval, the SPRT statistic when used), the SGF list,
  the duplicate count and every game's result.

Both players are built by `tasks.players.make_player` with seeds derived from ``seed``; GTP
engine processes are closed at the end, whatever happens. `run_match` and `run_gate` are plain
functions: the tasks below and the CLI call them.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from prefect import task

from model.files import write_bytes, write_json, write_text
from tabula.arena import (
    ArenaError,
    GameOutcome,
    MatchSummary,
    Schedule,
    play_match,
    summarize,
)
from tabula.config import Config
from tabula.errors import TabulaError
from tabula.gating import Gate, GateConfig, GateDecision, ungated
from tabula.ladder import anchor_label, anchor_program, anchor_spec, elo_scale, fixed_elos
from tabula.openings import Opening, match_openings
from tabula.sgf import game_to_sgf, match_record
from tasks.players import PlayerSpecError, Resolver, make_player, resolve_command
from tasks.retry import IO_RETRIES
from tasks.run.codec import from_json
from tasks.run.layout import RunLayout, relative_to, reset_dir
from tasks.run.records import AnchorRecord, Elo, GateRecord, RatingRow, Stage
from tasks.run.results import append_results, ratings_table
from tasks.watch import counting, plot_elo_curve

Progress = Callable[["PlayedGame"], None]
GATE_FILE = "gate.json"


class MatchError(TabulaError):
    """A match that cannot be played or decided (e.g. every game aborted)."""


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

    summary is from the first player's side (the ``--black`` player of `run_match`, Black in
    even games); store: the results store the games went to (None if not stored).
    """

    match_id: str
    first: str
    second: str
    games: tuple[PlayedGame, ...]
    summary: MatchSummary
    sgf_dir: Path | None
    store: Path | None


def write_sgf(outcome: GameOutcome, sgf_dir: Path, match_id: str) -> Path:
    """Save one game as ``<sgf_dir>/<match_id>-<index>.sgf`` (atomically); returns the path."""
    extra = {
        "GN": f"{match_id} game {outcome.index}",
        "DT": datetime.now(UTC).date().isoformat(),
    }
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
    """Two players for one match, closed (GTP processes ended) on exit."""

    def __init__(
        self,
        specs: tuple[str, str],
        cfgs: tuple[Config, Config],
        seed: int,
        resolver: Resolver | None,
    ) -> None:
        seeds = _seeds(seed)
        self.players: list[Any] = []
        try:
            for spec, cfg, player_seed in zip(specs, cfgs, seeds, strict=True):
                self.players.append(make_player(spec, cfg, seed=player_seed, resolver=resolver))
        except BaseException:
            self.close()
            raise
        first, second = self.players
        if first.name == second.name:  # the store refuses a game of a player against itself
            second.name = f"{second.name}#2"

    def close(self) -> None:
        for player in self.players:
            close = getattr(player, "close", None)
            if close is not None:
                close()


def _games(
    session: _Session,
    games: int,
    cfg: Config,
    *,
    sgf_dir: Path | None,
    store: Path | None,
    match_id: str,
    iteration: int | None,
    concurrent: int | None,
    alternate: bool,
    start: int = 0,
    seen: dict[tuple[int, ...], int] | None = None,
    openings: Sequence[Opening] | None = None,
    root: Path | None = None,
) -> Generator[PlayedGame, None, None]:
    """Play games through the arena, recording each (SGF, store) as it is yielded; an SGF's
    path is recorded relative to ``root`` when it lies inside it."""
    first, second = session.players
    width = concurrent if concurrent is not None else cfg.selfplay.concurrent_games
    rules = cfg.rules
    schedule = Schedule(games, rules.board_size, rules.komi, start, width, alternate, openings)
    outcomes = play_match(first, second, schedule, seen)
    try:
        for outcome in outcomes:
            path = write_sgf(outcome, sgf_dir, match_id) if sgf_dir is not None else None
            record = PlayedGame(outcome, None if path is None else relative_to(path, root))
            if store is not None:
                append_results(store, [record.row(match_id, iteration)])
            yield record
    finally:
        outcomes.close()


def run_match(
    black_spec: str,
    white_spec: str,
    games: int,
    cfg: Config,
    sgf_dir: str | os.PathLike[str] | None = None,
    store: str | os.PathLike[str] | None = None,
    *,
    seed: int = 0,
    resolver: Resolver | None = None,
    match_id: str | None = None,
    iteration: int | None = None,
    concurrent: int | None = None,
    alternate: bool = True,
    progress: Progress | None = None,
    openings: Sequence[Opening] | None = None,
    start: int = 0,
    player_cfgs: tuple[Config, Config] | None = None,
    root: Path | None = None,
) -> MatchResult:
    """Play `games` games between two player specs (``tabula match --black A --white B``).

    The black_spec player is Black in even games; colours alternate unless `alternate` is
    False. Every game goes to ``sgf_dir`` as SGF and to the results ``store`` when given.
    concurrent: games at once (default selfplay.concurrent_games; GTP engines cap it).
    progress: called with each PlayedGame as games finish (in game order).
    openings: game i starts from ``opening_for_game(openings, i)`` (`tabula.openings`).
    start: number of the first game (a match resumed after ``start`` recorded games plays
    games start, start + 1, ...; colours and openings follow the game number).
    player_cfgs: the configs the two players are built with (their search, simulations and
    precision), when they differ; the rules and the match settings are always ``cfg``'s.
    root: the folder recorded SGF paths are relative to (the project, in a pipeline run).
    Raises PlayerSpecError / CheckpointError for bad specs, ArenaError for bad arguments.
    """
    if games < 1:
        raise ArenaError(f"a match needs at least 1 game, got {games}")
    cfgs = player_cfgs or (cfg, cfg)
    if any(c.rules != cfg.rules for c in cfgs):
        raise ArenaError("the players' configs must have the match's rules (board size, komi)")
    session = _Session((black_spec, white_spec), cfgs, seed, resolver)
    try:
        first, second = (p.name for p in session.players)
        match_id = match_id or default_match_id(first, second)
        sgf_path = Path(sgf_dir) if sgf_dir is not None else None
        store_path = Path(store) if store is not None else None
        records = []
        for record in _games(
            session, games, cfg, sgf_dir=sgf_path, store=store_path, match_id=match_id,
            iteration=iteration, concurrent=concurrent, alternate=alternate,
            openings=openings, start=start, root=root,
        ):  # fmt: skip
            records.append(record)
            if progress is not None:
                progress(record)
    finally:
        session.close()
    summary = summarize([r.outcome for r in records], first, second)
    return MatchResult(match_id, first, second, tuple(records), summary, sgf_path, store_path)


def run_gate(
    candidate_spec: str,
    best_spec: str,
    cfg: Config,
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    resolver: Resolver | None = None,
    store: str | os.PathLike[str] | None = None,
    match_id: str | None = None,
    iteration: int | None = None,
    concurrent: int | None = None,
    progress: Progress | None = None,
    root: Path | None = None,
) -> GateDecision:
    """Gate a candidate against the best player; returns the decision, writes the evidence.

    Plays up to evaluation.gating_games games (candidate Black in even games), feeding each
    result to `tabula.gating.Gate` in game order, and stops as soon as it decides (SPRT). The
    games in progress at that moment are dropped (not recorded); with the SPRT, at most a
    quarter of the games run at once by default (`concurrent` overrides). Aborted games give
    no result, so more games are played in their place. SGFs go to ``out_dir/sgf``, the evidence to
    ``out_dir/gate.json``; games also go to the results ``store`` when given, their SGF paths
    relative to ``root`` (the project, in a pipeline run).
    Raises MatchError if a round of games gives no result at all (every game aborted).
    """
    out = Path(out_dir)
    gate = Gate(GateConfig.from_evaluation(cfg.evaluation))
    if concurrent is None and gate.config.sprt:
        # Games in flight when the SPRT stops are wasted: keep a quarter of the maximum at once.
        concurrent = max(1, min(cfg.selfplay.concurrent_games, gate.config.games // 4))
    session = _Session((candidate_spec, best_spec), (cfg, cfg), seed, resolver)
    records: list[PlayedGame] = []
    seen: dict[tuple[int, ...], int] = {}
    try:
        candidate, best = (p.name for p in session.players)
        match_id = match_id or default_match_id(candidate, best)
        while not gate.decided:
            needed, before = gate.config.games - gate.games, gate.games
            stream = _games(
                session, needed, cfg, sgf_dir=out / "sgf",
                store=Path(store) if store is not None else None, match_id=match_id,
                iteration=iteration, concurrent=concurrent, alternate=True,
                start=len(records), seen=seen, root=root,
            )  # fmt: skip
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
                raise MatchError(f"gate {match_id}: all {needed} games aborted, no result")
    finally:
        session.close()
    decision = gate.decision()
    write_evidence(out / GATE_FILE, decision, gate.config, candidate, best, records, match_id)
    return decision


def write_evidence(
    path: Path,
    decision: GateDecision,
    config: GateConfig,
    candidate: str,
    best: str,
    records: list[PlayedGame],
    match_id: str,
) -> None:
    """The gate's evidence as JSON (atomically): the decision, its settings and every game."""
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


@task(name="gate", task_run_name="gate-i{iteration}", **IO_RETRIES)
def gate(cfg: Config, layout: RunLayout, iteration: int, best: int, seed: int) -> GateRecord:
    """The candidate plays the champion; the decision comes with its evidence. With
    ``evaluation.gating`` off, no games: the candidate is promoted (`tabula.gating.ungated`)."""
    out = layout.match(iteration) / "gate"
    reset_dir(out)
    started = time.perf_counter()
    if not cfg.evaluation.gating:
        decision = ungated()
        evidence = {
            "candidate": layout.rel(layout.model(iteration)),
            "best": layout.rel(layout.model(best)),
        }
        write_json(out / "gate.json", evidence | decision.to_dict() | {"games_played": 0})
        return GateRecord(decision=decision, seconds=time.perf_counter() - started)
    games = cfg.evaluation.gating_games
    decision = run_gate(
        str(layout.model(iteration)),
        str(layout.model(best)),
        cfg,
        out,
        store=layout.results,
        seed=seed,
        iteration=iteration,
        match_id=f"{layout.run}-i{iteration:04d}-gate",
        progress=counting(Stage.EVALUATE, f"iter {iteration} gate (games)", games),
        root=layout.project,
    )
    return GateRecord(decision=decision, seconds=time.perf_counter() - started)


def anchors_to_play(cfg: Config, iteration: int) -> tuple[list[str], dict[str, str]]:
    """The anchors iteration ``iteration`` plays, and those it cannot, with why.

    The uniform random player every iteration; the configured anchors (`tabula.ladder`) in
    iterations divisible by ``evaluation.anchor_every``, each when its program is installed
    (else skipped, with what to install); none at all when ``anchor_games`` is 0.
    """
    evaluation = cfg.evaluation
    if evaluation.anchor_games == 0:
        return [], {}
    play, skipped = ["random"], {}
    if iteration % evaluation.anchor_every == 0:
        for name in evaluation.anchors:
            try:
                resolve_command(anchor_spec(name).removeprefix("gtp:"))
            except PlayerSpecError:
                program = anchor_program(name)
                install = " (apt-get install gnugo)" if program == "gnugo" else ""
                skipped[anchor_label(name)] = f"{program} is not installed{install}"
                continue
            play.append(name)
    return play, skipped


@task(name="anchor-match", task_run_name="anchor-i{iteration}-{anchor}", **IO_RETRIES)
def anchor_match(
    cfg: Config, layout: RunLayout, iteration: int, anchor: str, seed: int
) -> AnchorRecord:
    """Games against a fixed anchor (random, a GnuGo level) from seeded openings: its score
    and mean margin track progress, its fixed Elo grounds the scale (`tabula.ladder`)."""
    name = anchor_label(anchor)
    out = layout.match(iteration) / f"vs-{name}"
    reset_dir(out)
    started = time.perf_counter()
    games = cfg.evaluation.anchor_games
    openings = match_openings(cfg.rules.board_size, games, cfg.evaluation.opening_plies)
    match = run_match(
        str(layout.model(iteration)),
        anchor_spec(anchor),
        games,
        cfg,
        out,
        layout.results,
        seed=seed,
        iteration=iteration,
        match_id=f"{layout.run}-i{iteration:04d}-vs-{name}",
        progress=counting(Stage.EVALUATE, f"iter {iteration} vs {name} (games)", games),
        openings=openings,
        root=layout.project,
    )
    return AnchorRecord(
        match_id=match.match_id,
        summary=match.summary,
        sgf_dir=None if match.sgf_dir is None else layout.rel(match.sgf_dir),
        store=None if match.store is None else layout.rel(match.store),
        results=tuple(g.row(match.match_id, None) for g in match.games),
        seconds=time.perf_counter() - started,
    )


@task(name="ratings", task_run_name="ratings-i{iteration}")
def ratings(cfg: Config, layout: RunLayout, iteration: int) -> tuple[RatingRow, ...]:
    """Fit Elo over every game of the run so far; write the table and the Elo curve.

    The scale: the GnuGo ladder's (level 1 = 0) once a ladder anchor has played, else the
    random player's (random = 0), as `tabula.elo.fit_ratings` falls back."""
    fixed = fixed_elos(cfg.evaluation.anchors, cfg.rules.board_size)
    table = ratings_table(layout.results, anchors=fixed)
    write_json(layout.match(iteration) / "ratings.json", table)
    rows = tuple(from_json(RatingRow, row) for row in table)
    by_name = {row.fit.player: row.fit for row in rows}
    points = []
    for j in range(0, iteration + 1):
        row = by_name.get(layout.model_id(j))
        if row is not None:
            points.append((j, row.elo, row.low, row.high))
    if points:
        scale = elo_scale(fixed, by_name)
        plot_elo_curve(points, layout.root / "elo.png", scale=scale)
    return rows


def elo_of(layout: RunLayout, iteration: int, table: tuple[RatingRow, ...]) -> Elo | None:
    """Iteration ``iteration``'s network's Elo in ``table``, None when it has no rated game."""
    me = next((r.fit for r in table if r.fit.player == layout.model_id(iteration)), None)
    return None if me is None else Elo(me.elo, me.low, me.high)
