"""The quick start as a new user meets it: a fresh clone, the install, ``make run`` timed from
outside, and the champion it ends with held out against GnuGo.

Usage: ``python -m bench.quickstart [--refs HEAD] [--games 100] [--seeds 7,8] [--level 1]
[--args "..."] [--venv PATH] [--workdir DIR] [--json PATH]``

For each commit of ``--refs`` (the first is the baseline the others are compared with):

1. ``git clone`` of this repository, checked out at that commit (what is not committed is not
   in it), under ``--workdir``;
2. the install, ``make .venv/.kernels`` (the environment, then numba's compile of self-play's
   kernels), timed; with ``--venv`` the clone's commands run from that environment instead
   (never linked into the clone; its code still comes from the clone, first on
   ``PYTHONPATH``), the install is not timed, the kernels are compiled into the clone's cache
   by ``tabula compile``, the figures name the environment by its Python's and torch's
   versions, and the goal below is not judged;
3. ``make run`` (``ARGS`` = ``--args``; with ``--venv``: ``tabula run --config
   configs/quickstart.yaml`` and the same arguments), timed from outside: its wall seconds, the
   CPU-seconds of it and every process it waited for, and the cores busy, CPU ÷ (wall × cores);
   beside it the run's own count (``budget.json``: its iterations, its CPU from the process's
   start and its wall from the pipeline's, to its last iteration's end, so that its cores busy
   read higher than from outside, above 100% in a run of seconds) and the share of its budget
   spent; what the rest of the machine did meanwhile (`bench.provenance.Sharing`);
4. the champion (``champion.json``) against GnuGo at ``--level``, ``--games`` games for each of
   ``--seeds`` (``tabula match``, 64 simulations, seeded two-move openings, colours
   alternating): games won, the mean margin from the champion's side (Tromp-Taylor points, komi
   included) with its 95% interval, and the games lost by the whole board.

Every commit after the first is compared with it game by game: the same seeds give the same
openings and colours against the same, nearly deterministic GnuGo, so the mean of the paired
margin differences has a tighter interval than the difference of the means. The quick start's
goal (docs/strength.md, "The goals, as measured"): a mean margin of -40 or better against level
1, in under 15 minutes from the clone (install and run), so that a new user's first run shows a
network that learned.

Prints a table and writes the figures as JSON (the machine, the bench's own commit, each
commit's figures and games).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.provenance import Sharing, Snapshot, commit, machine
from model.files import write_json
from tabula.ladder import gnugo_spec
from tasks.players import PlayerSpecError, resolve_command
from tasks.run.cputime import busy, cores, run_measured

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/quickstart.yaml"
#: The quick start's goal: this mean margin against GnuGo level 1, within this many seconds
#: from the clone (module docstring).
GOAL_MARGIN, GOAL_SECONDS = -40.0, 900.0
#: What the Makefile exports for its commands (`make run` sets them; ``--venv`` runs without it).
MAKE_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


def timed(args: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run ``args`` to its end, its output to ``log``: its wall seconds, the CPU-seconds of it
    and of every process it waited for (`tasks.run.cputime.run_measured`), and its exit
    status."""
    done = run_measured(args, cwd=cwd, env=env, log=log)
    return {"wall_s": round(done.wall_s, 3), "cpu_s": round(done.cpu_s, 3), "rc": done.returncode}


def clone(sha: str, dest: Path) -> None:
    """A fresh clone of this repository at commit ``sha`` in ``dest``."""
    if dest.exists():
        raise ValueError(f"{dest} exists already: name another --workdir")
    _git(ROOT, "clone", "--quiet", str(ROOT), str(dest))
    _git(dest, "checkout", "--quiet", "--detach", sha)


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout.strip()


def environment(dest: Path, venv: Path | None) -> dict[str, str]:
    """The environment the clone's commands run in: this one without a Python environment or
    a Prefect API of its own, with the Makefile's variables (which ``make`` sets the same way)
    and the clone's kernel cache; with ``venv``, the clone's code first on ``PYTHONPATH``."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PREFECT_API_URL", "NUMBA_CACHE_DIR")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env |= MAKE_ENV | {"NUMBA_CACHE_DIR": str(dest / ".numba_cache")}
    if venv is not None:
        env["PYTHONPATH"] = str(dest)
    return env


def tabula_of(dest: Path, venv: Path | None) -> str:
    """The ``tabula`` command the clone runs: its own environment's, or ``venv``'s (never
    linked into the clone, where a later ``make`` would install into it)."""
    return str((venv.resolve() if venv is not None else dest / ".venv") / "bin" / "tabula")


@functools.cache
def linked_versions(venv: Path) -> dict[str, str]:
    """What identifies a linked environment in the figures: its Python's and torch's versions
    (its path names this machine only); asked once per benchmark, however many refs it runs."""
    probe = "import platform, torch; print(platform.python_version(), torch.__version__)"
    done = subprocess.run([str(venv.resolve() / "bin" / "python"), "-c", probe],
                          capture_output=True, text=True, check=True)  # fmt: skip
    python, torch = done.stdout.split()
    return {"python": python, "torch": torch}


def install_and_run(dest: Path, run_args: list[str], venv: Path | None) -> dict[str, Any]:
    """Steps 2 and 3 of the module docstring in the clone ``dest``: the install (or, with
    ``venv``, the compile alone) and the quick start, each timed; raises when one fails."""
    env, tabula = environment(dest, venv), tabula_of(dest, venv)
    if venv is None:
        install = timed(["make", ".venv/.kernels"], dest, env, dest / "install.log")
        make_args = ["make", "run", f"ARGS={shlex.join(run_args)}"]
    else:
        install = timed([tabula, "compile", "--config", CONFIG], dest, env, dest / "install.log")
        install["linked"] = dict(linked_versions(venv))
        make_args = [tabula, "run", "--config", CONFIG, *run_args]
    if install["rc"] != 0:
        raise RuntimeError(f"the install failed (exit {install['rc']}): see {dest}/install.log")
    snap = Snapshot.now()
    ran = timed(make_args, dest, env, dest / "run.log")
    if ran["rc"] != 0:
        raise RuntimeError(f"the quick start failed (exit {ran['rc']}): see {dest}/run.log")
    n = cores()
    sharing = Sharing.between(snap, Snapshot.now(), ran["cpu_s"], ran["wall_s"], n)
    ran["busy"] = round(busy(ran["cpu_s"], ran["wall_s"], n) or 0.0, 4)
    return {"install": install, "run": ran, "sharing": sharing.to_dict(), "env": env}


def run_record(dest: Path) -> dict[str, Any]:
    """What the run recorded of itself: its name, champion, iterations and its own count of
    CPU and wall seconds (``budget.json``), and the share of its budget it spent."""
    runs = [p.parent for p in sorted((dest / "data").glob("*/budget.json"))]
    if len(runs) != 1:
        raise RuntimeError(f"expected one run under {dest}/data, found {len(runs)}")
    budget = json.loads((runs[0] / "budget.json").read_text())
    if not budget.get("spent") or not (runs[0] / "champion.json").exists():
        raise RuntimeError(f"the run under {runs[0]} finished no iteration")
    champion = json.loads((runs[0] / "champion.json").read_text())
    last = budget["spent"][-1]
    limits = [last["wall_s"] / (budget["hours"] * 3600.0)] if budget.get("hours") else []
    if budget.get("core_hours"):
        limits.append(last["cpu_s"] / (budget["core_hours"] * 3600.0))
    n = last.get("cores") or cores()
    return {
        "run_name": runs[0].name,
        "champion": champion["iteration"],
        "model": champion["model"],
        "iterations": len(budget["spent"]),
        "own_cpu_s": last["cpu_s"],
        "own_wall_s": last["wall_s"],
        "own_busy": round(busy(last["cpu_s"], last["wall_s"], n) or 0.0, 4),
        "budget_spent": round(max(limits), 4) if limits else None,
    }


def held_out(dest: Path, env: dict[str, str], record: dict[str, Any], args: argparse.Namespace
             ) -> list[dict[str, Any]]:  # fmt: skip
    """Step 4: the champion against GnuGo, ``args.games`` games for each seed, from the clone
    with its own code; one row per game: seed, game, the champion's colour and its margin."""
    tabula = tabula_of(dest, args.venv)
    rows = []
    for seed in args.seeds:
        store = dest / "held-out" / f"seed-{seed}"
        cmd = [tabula, "match", "--black", f"mcts:{record['model']}", "--white",
               gnugo_spec(args.level), "--games", str(args.games), "--seed", str(seed),
               "--store", str(store)]  # fmt: skip
        done = timed(cmd, dest, env, dest / f"held-out-{seed}.log")
        if done["rc"] != 0:
            raise RuntimeError(f"the held-out match failed: see {dest}/held-out-{seed}.log")
        rows += [_our_side(game, seed) for game in _stored(store)]
    return rows


def _stored(store: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(store.glob("*.jsonl")) for line in f.open()]


def _our_side(game: dict[str, Any], seed: int) -> dict[str, Any]:
    """A stored game (score: black minus white, komi included) from the champion's side."""
    ours_black = not game["black"].startswith("gnugo")
    score = game["score"]
    margin = None if score is None else (score if ours_black else -score)
    won = None if game["winner"] is None else game["winner"] == (1 if ours_black else -1)
    return {"seed": seed, "game": game["game"], "black": ours_black, "margin": margin, "won": won}


def mean_interval(values: list[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% interval (normal, 1.96 standard errors)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.inf
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, 1.96 * math.sqrt(var / n)


def summary(games: list[dict[str, Any]], board: int = 9, komi: float = 7.5) -> dict[str, Any]:
    """Won, scored, the mean margin with its 95% interval, and the games lost by the whole
    board (the champion left with no point: -(board² + komi) as black, -(board² - komi) as
    white)."""
    margins = [g["margin"] for g in games if g["margin"] is not None]
    mean, half = mean_interval(margins) if margins else (math.nan, math.inf)
    whole = sum(1 for g in games if g["margin"] is not None
                and g["margin"] <= -(board * board + (komi if g["black"] else -komi)))  # fmt: skip
    return {
        "games": len(games),
        "won": sum(1 for g in games if g["won"]),
        "scored": len(margins),
        "margin": round(mean, 2),
        "margin_95": round(half, 2),
        "whole_board_losses": whole,
    }


def goal_met(held: dict[str, Any], seconds: float | None, level: int) -> bool | None:
    """The quick start's goal: at least `GOAL_MARGIN` against GnuGo level 1 within `GOAL_SECONDS`
    from the clone; None when it cannot be told (another level, or the install not timed)."""
    if level != 1 or seconds is None:
        return None
    return held["margin"] >= GOAL_MARGIN and seconds < GOAL_SECONDS


def paired(base: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``other``'s margin less ``base``'s over the games both scored with the same seed and
    index (the same opening and colours), with its 95% interval; None when none pair."""
    key = {(g["seed"], g["game"]): g["margin"] for g in base if g["margin"] is not None}
    diffs = [g["margin"] - key[(g["seed"], g["game"])] for g in other
             if g["margin"] is not None and (g["seed"], g["game"]) in key]  # fmt: skip
    if not diffs:
        return None
    mean, half = mean_interval(diffs)
    return {"pairs": len(diffs), "difference": round(mean, 2), "difference_95": round(half, 2)}


def measure(k: int, sha: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The ``k``-th commit asked for, ``sha``, steps 1 to 4: its figures and held-out games."""
    dest = work / f"{k}-{sha[:7]}"
    clone(sha, dest)
    steps = install_and_run(dest, shlex.split(args.args), args.venv)
    record = run_record(dest)
    games = held_out(dest, steps.pop("env"), record, args)
    total = None if args.venv else steps["run"]["wall_s"] + steps["install"]["wall_s"]
    held = summary(games)
    return {"commit": sha, **steps, **record,
            "clone_to_end_s": None if total is None else round(total, 1), "held_out": held,
            "goal_met": goal_met(held, total, args.level), "games": games}  # fmt: skip


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> Table:
    t = Table(title=f"The quick start from a fresh clone, held out against GnuGo level "
                    f"{args.level} ({args.games} games x seeds {args.seeds})")  # fmt: skip
    for col in ("commit", "install", "make run", "cores busy (outside / own)", "iterations",
                "budget spent", "won", "mean margin (95%)", "whole-board losses",
                "vs the first, paired", "goal (-40, < 15 min)"):  # fmt: skip
        t.add_column(col)
    for row in rows:
        held, pair = row["held_out"], row.get("paired")
        install = "not timed (--venv)" if args.venv else f"{row['install']['wall_s']:.0f} s"
        t.add_row(
            row["commit"][:7],
            install,
            f"{row['run']['wall_s']:.0f} s",
            f"{row['run']['busy']:.1%} / {row['own_busy']:.1%}",
            str(row["iterations"]),
            "—" if row["budget_spent"] is None else f"{row['budget_spent']:.3f}",
            f"{held['won']} of {held['games']}",
            f"{held['margin']:+.1f} ± {held['margin_95']:.1f}",
            str(held["whole_board_losses"]),
            "—" if pair is None else f"{pair['difference']:+.1f} ± {pair['difference_95']:.1f}",
            {True: "met", False: "not met", None: "—"}[row["goal_met"]],
        )
    return t


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.quickstart",
        description="The quick start from a fresh clone, timed, its champion held out.",
    )
    ap.add_argument("--refs", default="HEAD", help="commits, the first the baseline")
    ap.add_argument("--games", type=int, default=100, help="held-out games per seed")
    ap.add_argument("--seeds", default="7,8", help="held-out matches' seeds")
    ap.add_argument("--level", type=int, default=1, help="GnuGo's level (0 to 10)")
    ap.add_argument("--args", default="", help="make run's ARGS (tabula run's options)")
    ap.add_argument("--venv", type=Path, help="link this environment instead of installing")
    ap.add_argument("--workdir", type=Path, help="where the clones go (default: a temp dir)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.games < 1:
        ap.error(f"--games {args.games}: at least 1")
    if not 0 <= args.level <= 10:
        ap.error(f"--level {args.level}: GnuGo levels from 0 to 10")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: integers, comma-separated")
    if len(set(args.seeds)) != len(args.seeds):
        ap.error(f"--seeds {args.seeds}: each seed once")
    if args.venv is not None and not (args.venv / "bin" / "tabula").exists():
        ap.error(f"--venv {args.venv}: no bin/tabula in it (an environment built by make run)")
    for program in ("git", *(("make",) if args.venv is None else ())):
        if shutil.which(program) is None:
            ap.error(f"{program} is not installed")
    args.commits = []
    for ref in args.refs.split(","):
        try:
            args.commits.append(_git(ROOT, "rev-parse", "--verify", f"{ref}^{{commit}}"))
        except ValueError:
            ap.error(f"--refs: {ref!r} is not a commit of this repository")
    try:
        resolve_command(gnugo_spec(args.level).removeprefix("gtp:"))
    except PlayerSpecError as error:
        ap.error(f"GnuGo: {error}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="tabula-quickstart-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    console = Console(width=None if sys.stdout.isatty() else 200)  # (a log: the whole table)
    rows: list[dict[str, Any]] = []
    failed = None
    for k, (ref, sha) in enumerate(zip(args.refs.split(","), args.commits, strict=True)):
        console.print(f"{ref} ({sha[:7]}): clone, install, make run and held-out games in {work}")
        try:
            rows.append({"ref": ref, **measure(k, sha, work, args)})
        except (RuntimeError, ValueError, OSError) as error:
            failed = f"bench.quickstart: {ref}: {error}"
            break
        if len(rows) > 1:
            rows[-1]["paired"] = paired(rows[0]["games"], rows[-1]["games"])
    if rows:
        console.print(table(rows, args))
    if args.json and rows:  # (what was measured before a failure is kept)
        out = {"bench": commit(ROOT), **machine(), "games": args.games, "seeds": args.seeds,
               "level": args.level, "args": args.args, "venv": args.venv is not None,
               "failed": failed, "rows": rows}  # fmt: skip
        write_json(args.json, out)
    if failed:
        sys.exit(failed)


if __name__ == "__main__":
    main()
