"""The evaluation search's settings, each rated against GnuGo with the same network.

Usage: ``python -m bench.evalsearch --workdir W --config NAME [--iteration I] [--variant
LABEL:KEY=VALUE[,KEY=VALUE] ...] [--games 100] [--level 1] [--simulations 64] [--json PATH]``

Training fixes a network; how it searches when it is rated is a choice of its own (the
strength goals fix the simulations, 64 by default, not the search). Here one checkpoint of a
`bench.strength` run (``--workdir``/``--config``, its champion unless ``--iteration``) plays
``--games`` games against GnuGo ``--level`` with its run's own config (``default``) and with
each ``--variant``: the same config with its ``KEY=VALUE`` changes, for example
``m8:search.gumbel_m=8`` or ``puct:search.algorithm=puct``. Every variant plays the same
games: the same seeded openings, colours swapped in pairs, the same match seed
(`bench.strength_games`'s protocol), so game k of two variants differs only by the search.

Per variant: the win rate with its 95% Wilson interval, the mean margin, our side's CPU-seconds
a game (this process's, over the games it played in this invocation, numba's compile done
before the first; GnuGo's run in its own processes), and against ``default`` game by game:
the games the variant won that ``default`` lost and the reverse, with the sign test's
two-sided p-value over those discordant games. Games go to a results store under the run's
benchmark folder, so a killed run resumes. Prints a table, writes the same as JSON with the
commit, the machine and the others' share of it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.ladder import game_points, side_summary
from bench.provenance import Sharing, Snapshot, commit, machine
from bench.strength import ROOT, rating_config, run_layout
from bench.strength_games import play_match
from model.files import write_json
from tabula.errors import TabulaError, first_line
from tabula.ladder import gnugo_spec
from tasks.match import MatchSpec
from tasks.run.markers import champion
from tasks.run.results import load_results
from tasks.selfplay import compile_kernels

DEFAULT = "default"


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``LABEL:KEY=VALUE[,KEY=VALUE]`` as (label, changes); ValueError names what is wrong."""
    label, sep, rest = text.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9._-]+", label) or label == DEFAULT:
        raise ValueError(f"--variant {text!r}: want LABEL:KEY=VALUE[,KEY=VALUE], LABEL not "
                         f"{DEFAULT!r}, of letters, digits, '.', '_' and '-'")  # fmt: skip
    changes = [c.strip() for c in rest.split(",") if c.strip()]
    if not changes or any("=" not in c for c in changes):
        raise ValueError(f"--variant {text!r}: each change is KEY=VALUE")
    return label, changes


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial p-value of ``wins`` against ``losses`` at one half (1.0 when
    both are zero)."""
    n, k = wins + losses, min(wins, losses)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def discordant(base: list[dict], rows: list[dict], player: str) -> dict[str, Any]:
    """Game by game against ``base`` (same game numbers): the games won here and lost there,
    the reverse, and the sign test's p-value."""
    before = {r["game"]: game_points(r, player) for r in base}
    better = worse = 0
    for r in rows:
        now, then = game_points(r, player), before.get(r["game"])
        if now is None or then is None or now == then:
            continue
        better, worse = better + (now > then), worse + (now < then)
    return {"better": better, "worse": worse, "p": round(sign_test(better, worse), 4)}


def play_variant(args: argparse.Namespace, label: str, changes: list[str]) -> dict[str, Any]:
    """The variant's games (those the store lacks are played now) and its record."""
    layout, base_cfg, cfg = args.layout, args.cfgs[DEFAULT], args.cfgs[label]
    model_id = layout.model_id(args.iteration)
    store = args.workdir / args.config / "eval-search"
    match = MatchSpec(
        (f"mcts:{layout.model(args.iteration)}@{args.simulations}", gnugo_spec(args.level)),
        args.games,
        seed=args.iteration,
        match_id=f"{model_id.replace('/', '-')}-{label}-vs-gnugo-l{args.level}",
        store=store,
        player_cfgs=(cfg, base_cfg),
    )
    costs = store / f"{match.match_id}.cost.json"
    cost = json.loads(costs.read_text()) if costs.exists() else {"cpu_s": 0.0, "games": 0}
    began, before = time.process_time(), _count(store, match.match_id)
    rows = play_match(match, base_cfg)
    if len(rows) > before:
        cost = {"cpu_s": cost["cpu_s"] + time.process_time() - began,
                "games": cost["games"] + len(rows) - before}  # fmt: skip
        write_json(costs, cost)
    per_game = cost["cpu_s"] / cost["games"] if cost["games"] else None
    return {"variant": label, "changes": changes, "player": model_id, "rows": rows,
            **side_summary(rows, model_id), "cpu_s_per_game": per_game}  # fmt: skip


def _count(store: Path, match_id: str) -> int:
    return sum(r["match_id"] == match_id for r in load_results(store)) if store.exists() else 0


def table(records: list[dict], args: argparse.Namespace) -> Table:
    t = Table(title=f"{args.config} iteration {args.iteration} at {args.simulations} simulations"
                    f" against GnuGo level {args.level}")  # fmt: skip
    for column in ("variant", "games", "win rate (95%)", "mean margin", "CPU s a game",
                   "won / lost where default did not"):  # fmt: skip
        t.add_column(column, justify="left" if column == "variant" else "right")
    for r in records:
        d = r.get("against_default")
        t.add_row(
            r["variant"],
            str(r["games"]),
            f"{r['win_rate']:.0%} [{r['low']:.0%}, {r['high']:.0%}]" if r["games"] else "—",
            f"{r['mean_margin']:+.1f}" if r["mean_margin"] is not None else "—",
            f"{r['cpu_s_per_game']:.1f}" if r["cpu_s_per_game"] else "—",
            f"{d['better']} / {d['worse']} (p {d['p']:.2f})" if d else "—",
        )
    return t


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.evalsearch", description=__doc__)
    parser.add_argument("--workdir", type=Path, required=True, help="bench.strength's --workdir")
    parser.add_argument("--config", required=True, help="the config whose run is rated")
    parser.add_argument("--iteration", type=int, help="its checkpoint (default: its champion)")
    parser.add_argument("--variant", action="append", default=[], help="LABEL:KEY=VALUE[,...]")
    parser.add_argument("--games", type=int, default=100)
    parser.add_argument("--level", type=int, default=1, help="GnuGo's level")
    parser.add_argument("--simulations", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        args.variants = [(DEFAULT, []), *(parse_variant(v) for v in args.variant)]
    except ValueError as e:
        parser.error(str(e))
    if min(args.games, args.simulations) < 1 or not 1 <= args.level <= 10:
        parser.error("--games and --simulations must be >= 1, --level 1..10")
    if len({label for label, _ in args.variants}) < len(args.variants):
        parser.error("--variant: each LABEL once")
    layout = args.layout = run_layout(args.workdir / args.config, args.config)
    if not layout.params.exists():
        parser.error(f"no run of {args.config!r} under {args.workdir} (no {layout.params})")
    args.cfgs = {}
    for label, changes in args.variants:
        try:
            args.cfgs[label] = rating_config(layout, args.config, args.simulations, changes)
        except TabulaError as e:
            parser.error(f"--variant {label}: {first_line(e)}")
    if args.iteration is None:
        best = champion(layout)
        args.iteration = 0 if best is None else best.iteration
    if not layout.model(args.iteration).exists():
        parser.error(f"no checkpoint of iteration {args.iteration}: {layout.model(args.iteration)}")
    return args


def main() -> None:
    args = parse_args()
    console = Console(width=120)
    start, began = Snapshot.now(), time.perf_counter()
    own_start = time.process_time()
    for cfg in args.cfgs.values():  # numba's compile, so that no variant's cost counts it
        compile_kernels(cfg)
    records = []
    for label, changes in args.variants:
        console.print(f"{label}: {args.games} games")
        records.append(play_variant(args, label, changes))
        if label != DEFAULT:
            records[-1]["against_default"] = discordant(
                records[0]["rows"], records[-1]["rows"], records[-1]["player"]
            )
    wall = time.perf_counter() - began
    sharing = Sharing.between(start, Snapshot.now(), time.process_time() - own_start, wall,
                              os.cpu_count() or 1)  # fmt: skip
    console.print(table(records, args))
    for r in records[1:]:
        console.print(f"{r['variant']}: {', '.join(r['changes'])}")
    console.print(f"others' share of the machine {sharing.others_share:.1%} (GnuGo's included)")
    if args.json:
        write_json(args.json, {
            "date": time.strftime("%Y-%m-%d"), **commit(ROOT), "machine": machine(),
            "workdir": str(args.workdir), "config": args.config, "iteration": args.iteration,
            "simulations": args.simulations, "level": args.level, "games": args.games,
            "variants": [{k: v for k, v in r.items() if k != "rows"} for r in records],
            "sharing": sharing.to_dict(),
        })  # fmt: skip


if __name__ == "__main__":
    main()
