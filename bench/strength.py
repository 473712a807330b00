"""Strength against compute: configs trained from scratch for one CPU budget, rated on GnuGo.

Usage: ``python bench/strength.py [--budget quick|1ch|4ch|HOURS] [--configs paper,default]
[--resume] [--games 100] [--curve-games 40] [--points 6] [--simulations 64] [--json PATH]
[--png PATH]``

For each config in turn (issue 14): a stand-in user repository, then ``tabula run`` one iteration
at a time until the run has spent the budget, counted in CPU-seconds (user + system of the
run and every process it starts, `tasks.cputime`; an iteration that starts is finished, so a
run spends up to one iteration more than its budget, and the table says how much). Then each
config's champion plays ``--games`` games against GnuGo level 1, and against the next level up
while it wins more than half; ``--points`` checkpoints of the run (evenly spaced, the last one
included) play ``--curve-games`` against level 1, so one run gives a whole learning curve.

Ladder games follow `bench/ladder.py`'s protocol: komi 7.5, Tromp-Taylor scoring, GnuGo with
``--chinese-rules --positional-superko --capture-all-dead``, every game from a seeded opening
with colours swapped in pairs, our side an MCTS player at ``--simulations`` for every config,
up to ``LADDER_GAMES_AT_ONCE`` games at once (one GnuGo process each, our side batched across
them). Elo is fitted over every ladder game with the GnuGo levels held at the offsets
`bench/ladder.py` measured (`tabula.ladder.GNUGO_ELO_9X9`; GnuGo level 1 = 0), so figures of
different runs and budgets share one scale.

Configs (``CONFIGS``): ``paper``, the paper's search and training settings on 9x9
(``configs/9x9.yaml``: 200 simulations, 8 leaves per search, its learning-rate schedule, a
400-game SPRT gate) with the quick start's network and per-iteration game count so that only
the algorithm differs, fitted to two cores; ``default``, the quick start
(``configs/quickstart.yaml``); ``gumbel``, the default with issue 15's Gumbel search and no
gating; ``aux``, the default with the ownership and score heads. Every run plans 1000
iterations (``pipeline.iterations``) and the budget stops it: the paper's fixed-step rate
schedule and the default's run schedule both stay at 1e-2 within the budgets here.

Everything is kept under ``--workdir`` (default ``bench/results/strength/BUDGET``): a killed
benchmark resumes with ``--resume`` where it stopped (the runs are tabula runs, which resume
themselves; finished ladder games are kept); a config whose run fails is reported as failed and
the others still run. Prints a table, writes JSON and the learning curve (Elo against CPU-hours,
one line per config) as PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ladder import side_summary  # noqa: E402
from model.files import write_json  # noqa: E402
from tabula.config import Config, load_config  # noqa: E402
from tabula.elo import fit_ratings  # noqa: E402
from tabula.errors import TabulaError, first_line  # noqa: E402
from tabula.ladder import fixed_elos, gnugo_spec  # noqa: E402
from tabula.openings import match_openings  # noqa: E402
from tasks.cputime import CORE_HOUR, run_measured  # noqa: E402
from tasks.layout import RunLayout  # noqa: E402
from tasks.match import run_match  # noqa: E402
from tasks.ratings import load_results, results_from_rows  # noqa: E402
from tasks.records import SelfplayRecord, Stage  # noqa: E402
from tasks.resume import champion, finished  # noqa: E402
from tests.repos import make_user_repo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Core-hours. quick: what the quick start's five iterations spend (measured here: 126-145
# CPU-s an iteration of the default config, 0.19 core-hours for five, without GnuGo games).
BUDGETS = {"quick": 0.2, "1ch": 1.0, "4ch": 4.0}
# Ladder games played at once. Our side's network batches grow with it: 16 games of a 4x32
# checkpoint at 64 simulations cost 8.2 CPU-s a game against 15.8 at 4 at once (measured side
# by side on a busy 2-core machine, GnuGo's share about 0.8 CPU-s a game either way).
LADDER_GAMES_AT_ONCE = 16
LEVELS = (1, 5, 10)
# The CLI of this checkout (not the installed entry point), so a benchmark run from a git
# worktree trains with that worktree's code.
TABULA = [sys.executable, "-c", "import cli; cli.app()"]

# The machine fit both configs share: two self-play workers on two cores, batches of 256, no
# DataLoader processes, fp32 (precision is issue 15's), no GnuGo inside the run (rated here).
MACHINE = [
    "selfplay.workers=2",
    "selfplay.concurrent_games=64",
    "selfplay.batch_size=256",
    "training.num_workers=0",
    "training.bf16=false",
    "evaluation.anchors=[]",
    "evaluation.anchor_games=20",
]


@dataclass(frozen=True)
class Entry:
    """A config of the benchmark: a config file, overrides, and where its settings come from."""

    file: str
    overrides: tuple[str, ...]
    source: str


CONFIGS = {
    "paper": Entry(
        "configs/9x9.yaml",
        (
            *MACHINE,
            "network.blocks=4",
            "network.filters=32",
            "network.value_hidden=64",
            "selfplay.games=192",
            "pipeline.iterations=1000",
        ),
        "Silver et al. 2017 (Methods) via configs/9x9.yaml; quick-start network and game count",
    ),
    "default": Entry(
        "configs/quickstart.yaml",
        (*MACHINE, "pipeline.iterations=1000"),
        "configs/quickstart.yaml (the current default)",
    ),
    "gumbel": Entry(
        "configs/quickstart.yaml",
        (
            *MACHINE,
            "pipeline.iterations=1000",
            "search.algorithm=gumbel",
            "evaluation.gating=false",
        ),  # fmt: skip
        "the default with the Gumbel search (Danihelka et al. 2022) and no gating (Silver et al."
        " 2018; KataGo)",
    ),
    "aux": Entry(
        "configs/quickstart.yaml",
        (*MACHINE, "pipeline.iterations=1000", "network.aux_heads=true"),
        "the default with KataGo's ownership and score heads (Wu 2019)",
    ),
    "laptop": Entry(
        "configs/9x9-laptop.yaml",
        # Its precision is part of the preset (issue 15, item 7): chosen per machine.
        (*MACHINE, "pipeline.iterations=1000", "training.bf16=auto"),
        "configs/9x9-laptop.yaml: Gumbel search, playout caps, z mixed with the root value, no"
        " gating, bf16 where native",
    ),
}


def budget_core_hours(text: str) -> float:
    if text in BUDGETS:
        return BUDGETS[text]
    try:
        hours = float(text)
    except ValueError:
        hours = -1.0
    if hours <= 0:
        raise SystemExit(f"bench/strength.py: --budget {text!r}: use {', '.join(BUDGETS)} or hours")
    return hours


# -- training within the budget ---------------------------------------------------------------


def _run_env(work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_HOME": str(work / "prefect"),
        # A fresh PREFECT_HOME migrates its database on the first start: more than Prefect's
        # 20 s default on a busy two-core machine.
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600",
        "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache")),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def train_within_budget(name: str, entry: Entry, work: Path, budget_s: float, console: Console):
    """Run iterations of config ``name`` until its CPU-seconds reach ``budget_s``; the state
    (``work/state.json``: CPU and wall seconds after each iteration) survives a kill."""
    state_path = work / "state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {"iterations": []}
    project = work / "project"
    if not project.exists():
        make_user_repo(project, who="strength")
    argv = [*TABULA, "run", "--config", str(ROOT / entry.file), "--name", f"strength-{name}"]
    argv += [a for o in entry.overrides for a in ("--set", o)]
    while state.get("failed") is None:
        spent = state["iterations"][-1]["cpu_s"] if state["iterations"] else 0.0
        if spent >= budget_s:
            break
        i = len(state["iterations"]) + 1
        console.print(f"{name}: iteration {i} ({spent / CORE_HOUR:.2f} of "
                      f"{budget_s / CORE_HOUR:.2f} core-hours spent)")  # fmt: skip
        m = run_measured([*argv, "--iterations", str(i)], cwd=project, env=_run_env(work),
                         log=work / "run.log")  # fmt: skip
        wall = state["iterations"][-1]["wall_s"] if state["iterations"] else 0.0
        if m.returncode != 0:
            state["failed"] = m.stderr_tail.splitlines()[-1] if m.stderr_tail else "failed"
            state["failed_cpu_s"] = spent + m.cpu_s
        else:
            state["iterations"].append(
                {"iteration": i, "cpu_s": spent + m.cpu_s, "wall_s": wall + m.wall_s}
            )
        write_json(state_path, state)
    return state


# -- the ladder ---------------------------------------------------------------------------------


def play_ladder(
    player: str, spec: str, level: int, games: int, cfg: Config, store: Path, seed: int
) -> dict[str, Any]:
    """``games`` games of ``spec`` against GnuGo ``level`` (resumed from the store)."""
    match_id = f"{player.replace('/', '-')}-vs-gnugo-l{level}"
    rows = [r for r in load_results(store) if r["match_id"] == match_id] if store.exists() else []
    if len(rows) < games:
        openings = match_openings(cfg.rules.board_size, games, 2)
        run_match(spec, gnugo_spec(level), games - len(rows), cfg, store=store, seed=seed,
                  match_id=match_id, concurrent=LADDER_GAMES_AT_ONCE, openings=openings,
                  start=len(rows))  # fmt: skip
        rows = [r for r in load_results(store) if r["match_id"] == match_id]
    return {"level": level, **side_summary(rows, player)}


def _points(iterations: int, count: int) -> list[int]:
    """``count`` checkpoints evenly spaced over 0..iterations, the last one included."""
    if iterations <= 0:
        return [0]
    picks = {round(k * iterations / max(1, count - 1)) for k in range(count)}
    return sorted(p for p in picks if 0 <= p <= iterations)


def rate_config(
    name: str, work: Path, state: dict, args: argparse.Namespace, play: bool = True
) -> dict[str, Any]:
    """Ladder games of the run's champion and curve checkpoints (none when ``play`` is False
    or the run finished no iteration); summary of the run."""
    layout = RunLayout(work / "project", "data", f"strength-{name}")
    done = [row["iteration"] for row in state["iterations"]]
    last = done[-1] if done else 0
    cfg = load_config(
        layout.params if layout.params.exists() else ROOT / CONFIGS[name].file,
        [f"evaluation.simulations={args.simulations}"],
    )
    store = work / "ladder"
    best = champion(layout)
    best_i = 0 if best is None else best.iteration
    matches: dict[int, list[dict[str, Any]]] = {}
    for i in sorted({*_points(last, args.points), best_i}) if play and done else ():
        spec = f"mcts:{layout.model(i)}@{args.simulations}"
        player = layout.model_id(i)
        if i != best_i:
            matches[i] = [play_ladder(player, spec, 1, args.curve_games, cfg, store, seed=i)]
            continue
        matches[i] = []
        for level in LEVELS:  # the champion climbs while it wins more than half
            result = play_ladder(player, spec, level, args.games, cfg, store, seed=i)
            matches[i].append(result)
            if (result["win_rate"] or 0.0) <= 0.5:
                break
    selfplay = [finished(layout, i, Stage.SELFPLAY, SelfplayRecord) for i in done]
    cpu = {row["iteration"]: row["cpu_s"] for row in state["iterations"]}
    return {
        "config": name,
        "failed": state.get("failed"),
        "iterations": last,
        "champion": best_i,
        "cpu_s": state.get("failed_cpu_s") or (state["iterations"][-1]["cpu_s"] if done else 0.0),
        "wall_s": state["iterations"][-1]["wall_s"] if done else 0.0,
        "games": sum(s.games for s in selfplay if s is not None),
        "positions": sum(s.positions for s in selfplay if s is not None),
        "checkpoints": {
            str(i): {"cpu_s": cpu.get(i, 0.0), "player": layout.model_id(i), "matches": m}
            for i, m in matches.items()
        },
    }


def add_elo(rows: list[dict[str, Any]], workdir: Path) -> dict[str, float]:
    """Elo of every rated checkpoint, fitted over all ladder games with GnuGo held fixed."""
    anchors = fixed_elos([f"gnugo-l{level}" for level in LEVELS], 9)
    results = []
    for row in rows:
        store = workdir / row["config"] / "ladder"
        if store.exists():
            results += results_from_rows(load_results(store))
    fit = fit_ratings(results, anchors=anchors) if results else {}
    for row in rows:
        for point in row["checkpoints"].values():
            r = fit.get(point["player"])
            point["elo"] = None if r is None else {"elo": r.elo, "low": r.low, "high": r.high}
    return anchors


# -- output -------------------------------------------------------------------------------------


def _pct(m: dict[str, Any]) -> str:
    if m["win_rate"] is None:
        return "—"
    return f"{m['win_rate']:.0%} [{m['low']:.0%}, {m['high']:.0%}] of {m['games']}"


def table(rows: list[dict[str, Any]], budget: str, simulations: int) -> Table:
    t = Table(title=f"strength at budget {budget}: champion vs GnuGo ({simulations} simulations)")
    columns = ("config", "CPU-h used", "iterations", "games", "positions", "champion",
               "vs GnuGo l1 (95%)", "margin vs l1", "higher levels", "Elo (l1 = 0)")  # fmt: skip
    for column in columns:
        t.add_column(column)
    for row in rows:
        best = row["checkpoints"].get(str(row["champion"]), {})
        matches = best.get("matches", [])
        first = matches[0] if matches else None
        elo = best.get("elo")
        t.add_row(
            row["config"] + (f" (failed: {row['failed']})" if row["failed"] else ""),
            f"{row['cpu_s'] / CORE_HOUR:.2f}",
            str(row["iterations"]),
            f"{row['games']:,}",
            f"{row['positions']:,}",
            str(row["champion"]),
            _pct(first) if first else "—",
            "—" if not first or first["mean_margin"] is None else f"{first['mean_margin']:+.1f}",
            ", ".join(f"l{m['level']}: {_pct(m)}" for m in matches[1:]) or "—",
            "—" if not elo else f"{elo['elo']:+.0f} [{elo['low']:+.0f}, {elo['high']:+.0f}]",
        )
    return t


def plot(rows: list[dict[str, Any]], path: Path, budget: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for row in rows:
        points = sorted(
            (p["cpu_s"] / CORE_HOUR, p["elo"], p["matches"][0])
            for p in row["checkpoints"].values()
            if p["elo"]
        )
        if not points:
            continue
        x = [p[0] for p in points]
        y = [p[1]["elo"] for p in points]
        err = [[p[1]["elo"] - p[1]["low"] for p in points],
               [p[1]["high"] - p[1]["elo"] for p in points]]  # fmt: skip
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=row["config"])
        margins = [(p[0], p[2]["mean_margin"]) for p in points if p[2]["mean_margin"] is not None]
        bx.plot([m[0] for m in margins], [m[1] for m in margins], marker="o", label=row["config"])
    for axis in (ax, bx):
        axis.axhline(0.0, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel("CPU core-hours (user + system, all processes of the run)")
        axis.legend()
    ax.text(0.0, 0.0, " GnuGo level 1", va="bottom", fontsize=8, color="grey")
    ax.set_ylabel("Elo (GnuGo level 1 = 0, 95% interval)")
    bx.set_ylabel("mean score margin vs GnuGo level 1 (points)")
    fig.suptitle(f"tabula 9x9: strength against compute (budget {budget})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="quick", help="quick, 1ch, 4ch or core-hours")
    parser.add_argument("--configs", default="paper,default", help=f"of {', '.join(CONFIGS)}")
    parser.add_argument("--resume", action="store_true", help="continue a killed benchmark")
    parser.add_argument("--games", type=int, default=100, help="champion's games per level")
    parser.add_argument("--curve-games", type=int, default=40, help="games per curve point")
    parser.add_argument("--points", type=int, default=6, help="checkpoints rated per run")
    parser.add_argument("--simulations", type=int, default=64, help="our side's, every config")
    parser.add_argument("--workdir", type=Path, help="default bench/results/strength/BUDGET")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--png", type=Path, help="write the learning curve here")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 150))
    hours = budget_core_hours(args.budget)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(
            f"bench/strength.py: unknown config {unknown[0]!r}: use {', '.join(CONFIGS)}"
        )
    if shutil.which("gnugo") is None and not Path("/usr/games/gnugo").exists():
        raise SystemExit("bench/strength.py: gnugo is not installed (apt-get install gnugo)")
    workdir = (args.workdir or ROOT / "bench" / "results" / "strength" / args.budget).resolve()
    if workdir.exists() and not args.resume:
        raise SystemExit(f"bench/strength.py: {workdir} exists: pass --resume, or remove it")
    started = time.monotonic()
    rows = []
    for name in names:
        work = workdir / name
        work.mkdir(parents=True, exist_ok=True)
        state = train_within_budget(name, CONFIGS[name], work, hours * CORE_HOUR, console)
        console.print(f"{name}: rating on the GnuGo ladder")
        try:
            rows.append(rate_config(name, work, state, args))
        except TabulaError as error:  # a config that fails is reported; the others still run
            state["failed"] = state.get("failed") or f"rating: {first_line(error)}"
            rows.append(rate_config(name, work, state, args, play=False))
    anchors = add_elo(rows, workdir)
    console.print(table(rows, args.budget, args.simulations))
    console.print(f"wall time of the benchmark: {(time.monotonic() - started) / 60:.0f} min")
    payload = {
        "budget": args.budget,
        "core_hours": hours,
        "simulations": args.simulations,
        "anchors": anchors,
        "configs": {n: {**asdict(CONFIGS[n])} for n in names},
        "results": rows,
    }
    if args.json:
        write_json(args.json, payload)
    if args.png:
        plot(rows, args.png, args.budget)


if __name__ == "__main__":
    main()
