"""Anchor matches: GnuGo's processes asked one after another, against all at once.

Usage: ``python -m bench.matches [--model PATH] [--levels 1,10] [--games 20] [--json PATH]``

An anchor match as the pipeline plays it (`tasks.evaluate.anchor_match`: the quick start's
config, the network at ``evaluation.simulations``, seeded two-move openings, ten GnuGo processes,
one for each game in progress) between a network (``--model``, or a freshly initialised one of
the quick start's shape) and GnuGo at each ``--levels``, played twice from the same openings
and seeds:

- "one after another": each GnuGo process gets its ``genmove`` only once the one before it has
  answered, as `tasks.engines.GtpPlayer` asked until commit 1d23de8 (the baseline, measured in
  the same run);
- "at once": every process of a round gets its ``genmove`` before any answer is read, so
  GnuGo (single-threaded) thinks on every core.

Per match: wall seconds, CPU-seconds of this process (the network's search) and of the GnuGo
processes, the cores busy ((both) ÷ (wall × cores)), and whether the two ways played the same
games move for move (they should: each process plays its own game from its own seed). A first
match of two games, not counted, warms the process up.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.genmove import quickstart_model
from bench.provenance import commit, machine
from model.files import write_json
from tabula.arena import MoveRequest, Schedule, play_match, summarize
from tabula.config import Config, load_config
from tabula.ladder import gnugo_spec
from tabula.openings import match_openings
from tasks.engines import GtpPlayer
from tasks.players import PlayerSpecError, make_player, resolve_command

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("one after another", "at once")


class OneAfterAnother(GtpPlayer):
    """The baseline: each engine is asked only once the one before it has answered."""

    def genmoves(self, requests: Sequence[MoveRequest]) -> list[Any]:
        moves = []
        for r in requests:
            moves.extend(super().genmoves([r]))
        return moves


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def play(cfg: Config, model: Path, level: int, games: int, way: str) -> dict[str, Any]:
    """One anchor match of ``games`` games; its times, its result and its games' moves."""
    argv = resolve_command(gnugo_spec(level).removeprefix("gtp:"))
    kind = OneAfterAnother if way == WAYS[0] else GtpPlayer
    gnugo = kind(argv, cfg.rules.board_size, cfg.rules.komi, cfg.evaluation.match_timeout_s)
    ours = make_player(f"mcts:{model}", cfg, seed=1)
    openings = match_openings(cfg.rules.board_size, games, cfg.evaluation.opening_plies)
    schedule = Schedule(games, cfg.rules.board_size, cfg.rules.komi,
                        concurrent=cfg.selfplay.concurrent_games, openings=openings)  # fmt: skip
    own, children = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        outcomes = list(play_match(ours, gnugo, schedule))
    finally:
        gnugo.close()  # waits for the processes, so their CPU counts below
    wall = time.perf_counter() - started
    ours_cpu = cpu_seconds(resource.RUSAGE_SELF) - own
    gnugo_cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - children
    summary = summarize(outcomes, ours.name, gnugo.name)
    return {
        "level": level, "way": way, "games": games, "wall_s": wall, "ours_cpu_s": ours_cpu,
        "gnugo_cpu_s": gnugo_cpu,
        "cores_busy": (ours_cpu + gnugo_cpu) / (wall * (os.cpu_count() or 1)),
        "score": summary.score, "mean_margin": summary.mean_margin,
        "moves": [list(o.moves) for o in outcomes],
    }  # fmt: skip


def measure(cfg: Config, model: Path, levels: Sequence[int], games: int) -> list[dict[str, Any]]:
    """Both ways at each level, the baseline first; the moves compared, then dropped. A first
    match of two games, not counted, loads the search's kernels (about 25 CPU-s of numba's
    cache on a 2-core AMD EPYC), which would otherwise fall on the first match measured."""
    play(cfg, model, levels[0], 2, WAYS[1])
    rows = []
    for level in levels:
        pair = [play(cfg, model, level, games, way) for way in WAYS]
        same = pair[0]["moves"] == pair[1]["moves"]
        for row in pair:
            del row["moves"]
            row["same_games"] = same
            row["speedup"] = pair[0]["wall_s"] / row["wall_s"]
        rows.extend(pair)
    return rows


def report(rows: Sequence[dict[str, Any]], games: int) -> Table:
    table = Table(title=f"Anchor matches, {games} games, 9x9 (the quick start's config)")
    for column in ("GnuGo level", "engines asked", "wall s", "our CPU-s", "GnuGo CPU-s",
                   "cores busy", "wall: baseline ÷ this", "same games", "our score",
                   "mean margin"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            str(r["level"]), r["way"], f"{r['wall_s']:.1f}", f"{r['ours_cpu_s']:.1f}",
            f"{r['gnugo_cpu_s']:.1f}", f"{r['cores_busy']:.0%}", f"{r['speedup']:.2f}",
            "yes" if r["same_games"] else "no", f"{r['score']:.0%}", f"{r['mean_margin']:+.1f}",
        )  # fmt: skip
    return table


def _levels(text: str) -> list[int]:
    """GnuGo levels from ``1,10``; ValueError unless each is one of GnuGo's (0 to 10)."""
    levels = [int(x) for x in text.split(",") if x.strip()]
    if not levels or any(not 0 <= level <= 10 for level in levels):
        raise ValueError(text)
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.matches", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", type=Path, help="a checkpoint (default: quick-start shape)")
    parser.add_argument("--levels", default="1,10", help="GnuGo levels, comma-separated")
    parser.add_argument("--games", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.model is not None and not args.model.is_file():
        parser.error(f"--model {args.model}: no such checkpoint file")
    if args.games < 1:
        parser.error(f"--games {args.games}: at least 1")
    try:
        levels = _levels(args.levels)
    except ValueError:
        parser.error(f"--levels {args.levels!r}: GnuGo levels from 0 to 10, comma-separated")
    try:
        resolve_command(gnugo_spec(1).removeprefix("gtp:"))
    except PlayerSpecError as error:  # GnuGo is not installed
        raise SystemExit(f"bench/matches.py: {error}") from None
    cfg = load_config(ROOT / "configs/quickstart.yaml", [])
    with tempfile.TemporaryDirectory(prefix="tabula-matches-") as tmp:
        model = args.model or quickstart_model(Path(tmp))
        rows = measure(cfg, model, levels, args.games)
    Console(width=160).print(report(rows, args.games))
    if args.json is not None:
        out = {"benchmark": "matches", "date": time.strftime("%Y-%m-%d"), **commit(ROOT),
               **machine(), "games": args.games, "model": "given" if args.model else "fresh",
               "rows": rows}  # fmt: skip
        write_json(args.json, out)
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
