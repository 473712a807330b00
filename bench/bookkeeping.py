"""Bookkeeping as a run grows: what an iteration costs besides its games and training steps,
early in a run and hundreds of iterations in.

Usage: ``python -m bench.bookkeeping [--iterations 300] [--early 10] [--window 5]
[--workdir DIR] [--resume] [--json PATH]``

One real ``tabula run`` (Prefect, DVC and git, MLflow on SQLite: the quick start's defaults) of
a run whose stages are as small as a run's can be (a 5x5 board, a 1x8 network, 4 games of 4
simulations, 4 training steps on a window of the last 10 iterations as the quick start's, 2
games against random an iteration, no gate), so that nearly all of each iteration's CPU is what
every run pays around its stages however big they are: the plan, the DVC commits, the MLflow
runs, the Elo fit over every game so far and its curve, the promotion (a model version), the
lineage commit. The run is one process, as a user's run is; a
killed benchmark resumes with ``--resume`` (the run resumes itself, and its earlier iterations'
records stay).

From the run's ``budget.json`` (`tasks.run.budget`): per stage, the mean CPU-seconds an iteration
spent over the ``--window`` iterations up to iteration ``--early`` (default 6-10: the first
iteration pays the start, numba's compilation and Prefect's server among it) and over the last
``--window``, their ratio, and ``other``: what the run's process tree spent per iteration
outside the stages (Prefect's flow and task runs, reading the records). A flat run has ratios
near 1; whatever grows with the run shows here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.strength import TABULA, run_env
from cli.clone import empty_project
from model.files import write_json
from tasks.run.budget import read_budget
from tasks.run.cputime import run_measured
from tasks.run.layout import RunLayout
from tasks.run.records import Spent

ROOT = Path(__file__).resolve().parents[1]
RUN = "bookkeeping"
#: The smallest stages a run can have: what is left is the cost around them.
TINY = [
    "rules.board_size=5",
    "network.blocks=1",
    "network.filters=8",
    "network.value_hidden=16",
    "network.aux_heads=false",
    "search.simulations=4",
    "search.leaves_per_game=2",
    "selfplay.games=4",
    "selfplay.workers=1",
    "selfplay.concurrent_games=4",
    "selfplay.batch_size=8",
    "selfplay.sgf_sample=1",
    "training.batch_size=16",
    "training.steps=4",
    "training.checkpoint_every=4",
    # the quick start's window of the last 10 iterations (3,840 of its 384 games each): a
    # window in games would otherwise cover every iteration of a run with 4 games each
    "training.window_games=40",
    "training.num_workers=0",
    "training.bf16=false",
    "evaluation.simulations=4",
    "evaluation.anchor_games=2",
    "evaluation.anchors=[]",
    "evaluation.gating=false",
]


def run_to(iterations: int, work: Path, console: Console) -> RunLayout:
    """The run, to ``iterations`` (resumed where it stopped when the project is there)."""
    project = work / "project"
    if not project.exists():
        empty_project(project, who="bookkeeping")
    argv = [*TABULA, "run", "--config", str(ROOT / "configs/quickstart.yaml"), "--name", RUN,
            "--iterations", str(iterations), *(a for o in TINY for a in ("--set", o))]  # fmt: skip
    console.print(f"one run of {iterations} iterations in {project}")
    done = run_measured(argv, cwd=project, env=run_env(work), log=work / "run.log")
    if done.returncode != 0:
        raise SystemExit(f"bench/bookkeeping.py: the run failed: {done.stderr_tail[-300:]}")
    return RunLayout(project, "data", RUN)


def per_iteration(spent: tuple[Spent, ...]) -> list[dict[str, float]]:
    """Each iteration's CPU-seconds by stage, with ``other`` (its share of the process tree's
    count outside the stages) and ``total``."""
    rows, before = [], 0.0
    for s in spent:
        total = s.cpu_s - before
        before = s.cpu_s
        row = dict(s.stages)
        row["other"] = max(0.0, total - sum(s.stages.values()))
        row["total"] = total
        rows.append(row)
    return rows


def compare(rows: list[dict[str, float]], early: int, window: int) -> dict[str, Any]:
    """Mean per stage over the ``window`` iterations that end at iteration ``early`` and over
    the last ``window``, and their ratio."""
    first, last = rows[early - window : early], rows[-window:]
    stages = sorted({k for r in rows for k in r} - {"total"}) + ["total"]
    table = {}
    for stage in stages:
        a = statistics.fmean(r.get(stage, 0.0) for r in first)
        b = statistics.fmean(r.get(stage, 0.0) for r in last)
        table[stage] = {"early": round(a, 3), "late": round(b, 3),
                        "ratio": round(b / a, 2) if a > 0 else None}  # fmt: skip
    n = len(rows)
    return {"iterations": n, "early": [early - window + 1, early], "late": [n - window + 1, n],
            "stages": table}  # fmt: skip


def print_table(result: dict[str, Any], console: Console) -> None:
    (a, b), (c, d) = result["early"], result["late"]
    table = Table(title=f"CPU-seconds an iteration: iterations {a}-{b} against {c}-{d}")
    for column in ("stage", f"{a}-{b}", f"{c}-{d}", "ratio"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for stage, row in result["stages"].items():
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}×"
        table.add_row(stage, f"{row['early']:.2f}", f"{row['late']:.2f}", ratio)
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bookkeeping", description=__doc__)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--early", type=int, default=10, help="the early window ends here")
    ap.add_argument("--window", type=int, default=5, help="iterations averaged in each window")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench/results/bookkeeping")
    ap.add_argument("--resume", action="store_true", help="continue a killed benchmark")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    if not 1 < args.window <= args.early < args.iterations:
        ap.error("need 1 < --window <= --early < --iterations")
    work = args.workdir.resolve()
    if work.exists() and any(work.iterdir()) and not args.resume:
        ap.error(f"{work} is not empty: --resume, or another --workdir")
    work.mkdir(parents=True, exist_ok=True)
    console = Console()
    layout = run_to(args.iterations, work, console)
    rows = per_iteration(read_budget(layout).spent)
    result = {
        "command": " ".join(
            ["python -m bench.bookkeeping", *(sys.argv[1:] if argv is None else argv)]
        ),
        "overrides": TINY,
        **compare(rows, args.early, args.window),
        "per_iteration": rows,
    }
    print_table(result, console)
    if args.json:
        write_json(args.json, result)
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
