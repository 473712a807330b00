"""The evaluation stage: the gate, the anchor matches and the Elo fit, each a Prefect task.

The gate and the anchor matches are matches (`tasks.match`: players from specs, the arena, SGF
files, the results store, the gate's evidence) under ``match/i<NNNN>/`` (`RunLayout.match`);
the ratings are fitted over the whole results store. `anchors_to_play` chooses which anchors
an iteration plays.
"""

from __future__ import annotations

import time

from prefect import task

from model.files import write_json
from tabula.config import Config
from tabula.gating import ungated
from tabula.ladder import anchor_label, anchor_program, anchor_spec, elo_scale, fixed_elos
from tabula.openings import match_openings
from tabula.plan import plays_anchors
from tasks.match import GATE_FILE, MatchSpec, run_gate, run_match
from tasks.players import PlayerSpecError, resolve_command
from tasks.retry import IO_RETRIES
from tasks.run.codec import from_json
from tasks.run.layout import RunLayout, reset_dir
from tasks.run.records import AnchorRecord, Elo, GateRecord, RatingRow, Stage
from tasks.run.results import ratings_table
from tasks.run.summary import elos_by_iteration
from tasks.watch import counting, plot_elo_curve


@task(name="gate", task_run_name="gate-i{iteration}", **IO_RETRIES)
def gate(cfg: Config, layout: RunLayout, iteration: int, best: int, seed: int) -> GateRecord:
    """The candidate plays the champion; the decision comes with its evidence. With
    ``evaluation.gating`` off, no games: the candidate is promoted (`tabula.gating.ungated`)."""
    out = layout.gate(iteration)
    reset_dir(out)
    started = time.perf_counter()
    if not cfg.evaluation.gating:
        decision = ungated()
        evidence = {
            "candidate": layout.rel(layout.model(iteration)),
            "best": layout.rel(layout.model(best)),
        }
        write_json(out / GATE_FILE, evidence | decision.to_dict() | {"games_played": 0})
        return GateRecord(decision=decision, seconds=time.perf_counter() - started)
    games = cfg.evaluation.gating_games
    spec = MatchSpec(
        (str(layout.model(iteration)), str(layout.model(best))),
        games,
        seed=seed,
        match_id=f"{layout.run}-i{iteration:04d}-gate",
        iteration=iteration,
        sgf_dir=out / "sgf",
        store=layout.results,
        root=layout.project,
    )
    progress = counting(Stage.EVALUATE, f"iter {iteration} gate (games)", games)
    decision = run_gate(spec, cfg, out, progress)
    return GateRecord(decision=decision, seconds=time.perf_counter() - started)


def anchors_to_play(
    cfg: Config, iteration: int, planned: int | None = None
) -> tuple[list[str], dict[str, str]]:
    """The anchors iteration ``iteration`` plays, and those it cannot, with why.

    The configured anchors (`tabula.ladder`) where `tabula.plan.plays_anchors` says (in
    iterations divisible by ``evaluation.anchor_every``, unless with
    ``evaluation.anchor_skip_near_last`` the last one the run is planned for, ``planned``
    iterations, is less than half of that ahead, and in that last one), each when its program
    is installed (else skipped, with what to install); the uniform random player in iterations
    divisible by ``evaluation.random_every``, or with the anchors when it is None; none at all
    when ``anchor_games`` is 0.
    """
    evaluation = cfg.evaluation
    if evaluation.anchor_games == 0:
        return [], {}
    every, skip = evaluation.anchor_every, evaluation.anchor_skip_near_last
    anchored = plays_anchors(iteration, every, skip, planned)
    if evaluation.random_every is None:
        with_random = anchored
    else:
        with_random = iteration % evaluation.random_every == 0
    play: list[str] = ["random"] if with_random else []
    skipped: dict[str, str] = {}
    if anchored:
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
    out = layout.anchor_match(iteration, name)
    reset_dir(out)
    started = time.perf_counter()
    games = cfg.evaluation.anchor_games
    spec = MatchSpec(
        (str(layout.model(iteration)), anchor_spec(anchor)),
        games,
        seed=seed,
        match_id=f"{layout.run}-i{iteration:04d}-vs-{name}",
        iteration=iteration,
        sgf_dir=out,
        store=layout.results,
        root=layout.project,
        openings=match_openings(cfg.rules.board_size, games, cfg.evaluation.opening_plies),
    )
    progress = counting(Stage.EVALUATE, f"iter {iteration} vs {name} (games)", games)
    match = run_match(spec, cfg, progress)
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

    The scale: the GnuGo ladder's (level 1 = 0, `tabula.ladder.fixed_elos`) once a ladder
    anchor has played, else the random player's (random = 0), as `tabula.elo.fit_ratings`
    falls back; ``tabula elo`` fits the run's games the same way.
    The curve shows every iteration's Elo in this fit (`tasks.run.summary.elos_by_iteration`),
    the numbers of the closing table and ``plots/elo.csv`` when it is the run's latest."""
    fixed = fixed_elos(cfg.evaluation.anchors, cfg.rules.board_size)
    table = ratings_table(layout.results, anchors=fixed)
    write_json(layout.ratings(iteration), table)
    rows = tuple(from_json(RatingRow, row) for row in table)
    elos = elos_by_iteration(rows, layout, iteration)
    if elos:
        points = [(j, e.elo, e.low, e.high) for j, e in sorted(elos.items())]
        scale = elo_scale(fixed, (row.fit.player for row in rows))
        plot_elo_curve(points, layout.elo_plot, scale=scale)
    return rows


def elo_of(layout: RunLayout, iteration: int, table: tuple[RatingRow, ...]) -> Elo | None:
    """Iteration ``iteration``'s network's Elo in ``table``, None when it has no rated game."""
    me = next((r.fit for r in table if r.fit.player == layout.model_id(iteration)), None)
    return None if me is None else Elo(me.elo, me.low, me.high)
