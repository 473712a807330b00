"""Calibrate the GnuGo ladder: Elo gaps between GnuGo levels, measured on our rules
(docs/strength.md).

Usage: ``python -m bench.ladder [--levels 1,5,10] [--games 100] [--size 9] [--plies 2]
[--concurrent 2] [--store DIR] [--json PATH]``

Every pair of levels plays ``--games`` games (colours alternating) under the protocol the
strength benchmark uses: komi 7.5, Tromp-Taylor scoring of the final position, GnuGo with
``--chinese-rules --positional-superko --capture-all-dead`` so that its games end under area
scoring, and each game from a seeded opening (`tabula.openings`: opening k in games 2k and
2k+1, colours swapped), because GnuGo is nearly deterministic and would repeat its games from
the empty board. ``--concurrent`` games run at once, each GnuGo a process of its own.

Results go to a results store (``--store``, one JSON-lines file per pairing); a killed run
resumes where it stopped. The Elo fit is the project's (`tabula.elo.fit_ratings`, BayesElo-style
prior of 2 virtual draws), with the lowest level fixed at 0. Prints, per pairing: games, the
higher level's win rate with its 95% Wilson interval, duplicates, the mean score margin; then
each level's Elo with its 95% interval. Writes the same as JSON. Wall time is informative only:
what is measured here is who wins, not how fast.
"""

from __future__ import annotations

import argparse
import itertools
import math
import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from model.files import write_json
from tabula.config import load_config
from tabula.elo import fit_ratings
from tabula.gating import win_rate_interval
from tabula.ladder import gnugo_spec
from tabula.openings import match_openings
from tasks.match import MatchSpec, PlayedGame, run_match
from tasks.run.results import load_results, results_from_rows

ROOT = Path(__file__).resolve().parents[1]


def _pair_rows(store: Path, match_id: str) -> list[dict]:
    return [r for r in load_results(store) if r["match_id"] == match_id] if store.exists() else []


def play_pair(low: int, high: int, games: int, args: argparse.Namespace, console: Console) -> None:
    """Play the games of one pairing that the store does not hold yet."""
    match_id = f"ladder-{args.size}x{args.size}-gnugo-l{high}-vs-l{low}"
    done = len(_pair_rows(args.store, match_id))
    if done >= games:
        return
    cfg = load_config(None, [f"rules.board_size={args.size}", "rules.komi=7.5"])
    openings = match_openings(args.size, games, args.plies)
    started = time.monotonic()
    console.print(f"gnugo-l{high} vs gnugo-l{low}: games {done}..{games - 1}")

    def show(record: PlayedGame) -> None:
        if args.verbose:
            o = record.outcome
            console.print(f"  game {o.index}: {o.reason} {o.score}", highlight=False)

    spec = MatchSpec(
        (gnugo_spec(high), gnugo_spec(low)),
        games - done,
        match_id=match_id,
        store=args.store,
        openings=openings,
        start=done,
        concurrent=args.concurrent,
    )
    result = run_match(spec, cfg, progress=show)
    seconds = time.monotonic() - started
    duplicates = result.summary.duplicates
    console.print(f"  {games - done} games in {seconds:.0f} s, {duplicates} repeated a game")


def elo_gap(score: float | None) -> float | None:
    """The Elo difference a score (win rate, draws half) implies; None at 0, 1 or no games."""
    if score is None or score in (0.0, 1.0):
        return None
    return 400.0 * math.log10(score / (1.0 - score))


def _side(row: dict, player: str) -> int:
    return 1 if row["black"] == player else -1


def game_points(row: dict, player: str) -> float | None:
    """``player``'s points from one store row: 1 a win, 0.5 a draw, 0 a loss, None no result."""
    if row["winner"] is None:
        return None
    return 0.5 if row["winner"] == 0 else float(row["winner"] == _side(row, player))


def side_summary(rows: list[dict], player: str) -> dict:
    """``player``'s record in store rows of its games: win rate (draws half) with its 95%
    Wilson interval over decided games, aborts, and the mean margin over scored games."""
    decided = [r for r in rows if r["winner"] is not None]
    points = sum(game_points(r, player) or 0.0 for r in decided)
    margins = [r["score"] * _side(r, player) for r in rows if r["score"] is not None]
    low, high = win_rate_interval(points, len(decided)) if decided else (0.0, 1.0)
    return {
        "games": len(rows),
        "aborts": len(rows) - len(decided),
        "win_rate": points / len(decided) if decided else None,
        "low": low,
        "high": high,
        "mean_margin": sum(margins) / len(margins) if margins else None,
        "scored": len(margins),
    }


def pair_row(low: int, high: int, args: argparse.Namespace) -> dict:
    match_id = f"ladder-{args.size}x{args.size}-gnugo-l{high}-vs-l{low}"
    rows = _pair_rows(args.store, match_id)
    return {"pair": f"l{high} vs l{low}", **side_summary(rows, f"gnugo-l{high}")}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ladder", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--levels", default="1,5,10", help="GnuGo levels, comma-separated")
    parser.add_argument("--games", type=int, default=100, help="games per pairing")
    parser.add_argument("--size", type=int, default=9)
    parser.add_argument("--plies", type=int, default=2, help="opening length (even)")
    parser.add_argument("--concurrent", type=int, default=2, help="games at once")
    parser.add_argument("--store", type=Path, default=ROOT / "bench" / "results" / "ladder")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--verbose", action="store_true", help="print every game")
    args = parser.parse_args()
    console = Console()
    if shutil.which("gnugo") is None and not Path("/usr/games/gnugo").exists():
        console.print("bench/ladder.py: gnugo is not installed (apt-get install gnugo)")
        raise SystemExit(2)
    levels = sorted(int(x) for x in args.levels.split(","))
    pairs = list(itertools.combinations(levels, 2))
    for low, high in pairs:
        play_pair(low, high, args.games, args, console)
    rows = [pair_row(low, high, args) for low, high in pairs]
    fit = fit_ratings(results_from_rows(load_results(args.store)), anchor=f"gnugo-l{levels[0]}")
    table = Table(title=f"GnuGo ladder on {args.size}x{args.size} (komi 7.5, Tromp-Taylor)")
    for column in ("pairing", "games", "higher level's win rate (95%)", "mean margin"):
        table.add_column(column)
    for r in rows:
        rate = "—" if r["win_rate"] is None else f"{r['win_rate']:.0%}"
        table.add_row(
            r["pair"],
            str(r["games"]),
            f"{rate} [{r['low']:.0%}, {r['high']:.0%}]",
            "—" if r["mean_margin"] is None else f"{r['mean_margin']:+.1f}",
        )
    console.print(table)
    elo = Table(title=f"Elo, gnugo-l{levels[0]} fixed at 0 (95% interval)")
    for column in ("player", "Elo", "interval", "games"):
        elo.add_column(column)
    ladder = {}
    for name, r in sorted(fit.items(), key=lambda kv: kv[1].elo):
        ladder[name] = {"elo": r.elo, "low": r.low, "high": r.high, "games": r.games}
        elo.add_row(name, f"{r.elo:+.0f}", f"[{r.low:+.0f}, {r.high:+.0f}]", str(r.games))
    console.print(elo)
    if args.json:
        payload = {"args": {k: str(v) for k, v in vars(args).items()}, "pairs": rows}
        write_json(args.json, {**payload, "elo": ladder})


if __name__ == "__main__":
    main()
