"""Strength against compute: configs trained from scratch for one CPU budget, rated on GnuGo.

Usage: ``python -m bench.strength [--budget quick|1ch|4ch|HOURS] [--configs paper,default]
[--resume] [--games 100] [--curve-games 40] [--points 6] [--simulations 64]
[--deep-simulations 400] [--deep-games 100] [--h2h-games 100] [--search-games 100]
[--search-set KEY=VALUE ...] [--json PATH] [--png PATH]``

For each config in turn: a stand-in user repository, then ONE budgeted run, ``tabula run
--core-hours BUDGET``, as a user would make it: the run counts the CPU-seconds of its processes
(`tasks.run.budget`), fits its rate schedule to the budget and stops itself at the first
iteration boundary past it (an iteration that starts is finished, so a run spends up to one
iteration more than its budget, and the table says how much). The runs play no anchor games:
the benchmark rates their checkpoints after the budget, so the budget goes to self-play and
training, whose share (``learning_share``) the table and the JSON give per config. Then each
config's champion plays ``--games`` games against GnuGo level 1, and against the next level up
while it wins more than half; ``--points`` checkpoints of the run (evenly spaced, the last one
included) play ``--curve-games`` against level 1, so one run gives a whole learning curve.
The champion then climbs the ladder again searching deeper, ``--deep-games`` a level at
``--deep-simulations`` (default 400; 0: none): strength at 64 simulations understates a network,
and the deeper figures are reported in a table of their own, fitted apart (never mixed with the
games at ``--simulations``) on the same scale.
Then the champions of every pair of configs play ``--h2h-games`` games against each other:
while GnuGo wins every game, that is the only measure of which config learned more. Last, each
champion searching ``--deep-simulations`` plays itself at ``--simulations``, ``--search-games``
games (0: none): whether search pays, which it does only where the value head ranks positions
under good play (the goal: the deeper search wins at least 70%). ``--search-set KEY=VALUE``
changes the deeper side's config alone (``search.gumbel_c_scale=0.03``, say), in a match of its
own: how the evaluation search's settings are chosen.

Ladder games (`bench/strength_games.py`) follow `bench/ladder.py`'s protocol: komi 7.5,
Tromp-Taylor scoring, GnuGo with ``--chinese-rules --positional-superko --capture-all-dead``,
every game from a seeded opening with colours swapped in pairs, our side an MCTS player at
``--simulations`` with its config's search (PUCT, or Gumbel for the configs that train with
it), up to ``LADDER_GAMES_AT_ONCE`` games at once (one GnuGo process each, our side batched
across them). Elo is fitted over every
ladder and head-to-head game with the GnuGo levels held at the offsets `bench/ladder.py`
measured (`tabula.ladder.GNUGO_ELO_9X9`; GnuGo level 1 = 0), so figures of different runs and
budgets share one scale.

Configs: ``bench/strength_configs.py`` holds each (``--help`` names them), with the source of
its settings: ``paper``, the paper's search and training on 9x9 fitted to two cores; ``default``,
the quick start; the screenings, each one switch against the default of its time (``baseline``
where they run at an equal budget, ``pipeline.budget_overshoot`` 0.03); ``laptop``,
``configs/9x9-laptop.yaml``. docs/strength.md keeps every screening's result.
Each run's first iteration plans the config's ``pipeline.iterations`` (1000: no drop yet); from
the second on, the schedule is fitted to what the budget is expected to pay for, so every run
anneals within its budget.

The JSON says where its figures come from (`bench.provenance`): the commit and whether the tree
had local changes, the CPU model and cores; per config, its file, overrides and the resolved
config the run ran, whether other processes shared the machine while it trained (their
CPU-seconds from ``/proc/stat`` and the load average, measured around each invocation), the
commit each invocation of its run ran (``commits``: the code that trained it, where the
top-level commit is the code that wrote the JSON), and its compute in units that do not depend
on the CPU: iterations, self-play network evaluations, simulations and positions, and trained
samples.

Everything is kept under ``--workdir`` (default ``bench/results/strength/BUDGET``): a killed
benchmark resumes with ``--resume`` where it stopped (the runs are tabula runs, which resume
themselves; finished ladder games are kept); a config whose run fails is reported as failed and
the others still run. Prints the tables, writes JSON and the learning curve (Elo against
CPU-hours, one line per config) as PNG. Last, per config, the line of Elo against log2 of the
core-hours through the checkpoints that both won and lost against GnuGo, extended to the
moonshot (a day on two cores, 48 core-hours; `bench.strength_report.extrapolate`). A
``--resume`` of a finished benchmark plays nothing and writes the tables, JSON and figure again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.ladder import side_summary
from bench.provenance import Sharing, Snapshot, commit, compute, machine, merged, pace
from bench.strength_configs import CONFIGS, Entry
from bench.strength_games import climb, play_ladder, play_match
from bench.strength_report import (
    DEEP_LADDER,
    add_elo,
    deep_table,
    extrapolate,
    extrapolation_line,
    pace_line,
    pairs_table,
    plot,
    search_table,
    table,
)
from cli.clone import empty_project
from model.files import write_json
from tabula.config import Config, config_to_flat_dict, load_config
from tabula.errors import TabulaError, first_line
from tasks.match import MatchSpec
from tasks.run.budget import read_budget
from tasks.run.cputime import CORE_HOUR, run_measured
from tasks.run.layout import RunLayout
from tasks.run.markers import champion, finished
from tasks.run.records import SelfplayRecord, Stage, TrainRecord
from tasks.run.summary import learning_share

ROOT = Path(__file__).resolve().parents[1]
# Core-hours. quick: what the quick start's five iterations spent before it took the laptop preset
# (126-145 CPU-s an iteration of the `puct` config, 0.19 core-hours for five, without GnuGo games);
# today's spends about 0.14 (511 CPU-s with one GnuGo match, README), so `quick` gives it 7
# iterations.
BUDGETS = {"quick": 0.2, "1ch": 1.0, "4ch": 4.0}
# The CLI of this checkout (not the installed entry point), so a benchmark run from a git
# worktree trains with that worktree's code.
TABULA = [sys.executable, "-c", "import cli; cli.main()"]


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


def run_env(work: Path, *, omp_wait: str | None = "PASSIVE") -> dict[str, str]:
    """The environment of a benchmarked ``tabula run``. omp_wait: OpenMP's wait policy; the
    default, PASSIVE, makes torch's waiting threads sleep instead of spinning, since spinning
    threads count as CPU-seconds and a busy machine would inflate a run's count (and its cost).
    On an idle machine it costs training about 40% more wall time and 4% more CPU-seconds
    (docs/benchmarks.md, "Scaling"). None: OpenMP's own default, as a user's run has it."""
    env = {
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
    env.pop("OMP_WAIT_POLICY", None)
    if omp_wait is not None:
        env["OMP_WAIT_POLICY"] = omp_wait
    return env


def train_within_budget(name: str, entry: Entry, work: Path, budget_s: float, console: Console):
    """Config ``name`` as ONE budgeted run (``tabula run --core-hours``): the run fits its rate
    schedule to the budget, stops itself at an iteration boundary once it is spent, and
    records what each iteration cost (`tasks.run.budget`); a killed benchmark reruns the same
    command, which resumes the run. Returns the state: the run's per-iteration CPU and wall
    seconds (cumulative) and CPU by stage, and the command's own CPU count (``wait4``) beside
    the run's (``work/state.json``, kept for ``--resume``)."""
    state_path = work / "state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {"iterations": []}
    project = work / "project"
    if not project.exists():
        empty_project(project, who="strength")
    argv = [*TABULA, "run", "--config", str(ROOT / entry.file), "--name", f"strength-{name}"]
    argv += [a for o in entry.overrides for a in ("--set", o)]
    argv += ["--core-hours", f"{budget_s / CORE_HOUR:.6f}"]
    if state.get("failed") is None and not state.get("done"):
        console.print(f"{name}: one run of {budget_s / CORE_HOUR:.2f} core-hours")
        state["commits"] = [*state.get("commits", []), commit(ROOT)]  # the code it runs
        before = Snapshot.now()
        m = run_measured(argv, cwd=project, env=run_env(work), log=work / "run.log")
        sharing = Sharing.between(before, Snapshot.now(), m.cpu_s, m.wall_s, os.cpu_count() or 1)
        state["sharing"] = [*state.get("sharing", []), sharing.to_dict()]
        state["command_cpu_s"] = state.get("command_cpu_s", 0.0) + m.cpu_s
        state["command_wall_s"] = state.get("command_wall_s", 0.0) + m.wall_s
        if m.returncode != 0:
            state["failed"] = m.stderr_tail.splitlines()[-1] if m.stderr_tail else "failed"
        else:
            state["done"] = True
    budget = read_budget(run_layout(work, name))
    state["iterations"] = [
        {"iteration": s.iteration, "cpu_s": s.cpu_s, "wall_s": s.wall_s, "stages": s.stages}
        for s in budget.spent
    ]
    if state.get("failed") is not None:
        state["failed_cpu_s"] = state["command_cpu_s"]
    write_json(state_path, state)
    return state


def stage_split(state: dict) -> tuple[dict[str, float], float | None]:
    """CPU-seconds by stage over the run's iterations, with "other" for what the run spent
    outside them (process start-up, the initial network, a resume's mending), and the share
    of self-play and training in the whole (`tasks.run.summary.learning_share`; None when
    the run recorded none)."""
    stages: dict[str, float] = {}
    for row in state["iterations"]:
        for stage, seconds in row.get("stages", {}).items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    if state["iterations"]:
        other = state["iterations"][-1]["cpu_s"] - sum(stages.values())
        stages["other"] = round(max(0.0, other), 3)
    return stages, learning_share(stages)


# -- rating the runs ---------------------------------------------------------------------------


def run_layout(work: Path, name: str) -> RunLayout:
    """The run of config ``name`` in its benchmark folder ``work``."""
    return RunLayout(work / "project", "data", f"strength-{name}")


def rating_config(
    layout: RunLayout, name: str, simulations: int, changes: list[str] | None = None
) -> Config:
    """The config a run's checkpoints play with: the run's own, at ``simulations``, with
    ``changes`` (``section.key=value``)."""
    params = layout.params if layout.params.exists() else ROOT / CONFIGS[name].file
    return load_config(params, [f"evaluation.simulations={simulations}", *(changes or [])])


def _spec(layout: RunLayout, i: int, args: argparse.Namespace) -> str:
    return f"mcts:{layout.model(i)}@{args.simulations}"


def head_to_head(
    rows: list[dict[str, Any]], workdir: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every pair of the configs' champions (``rate_config``'s rows), ``--h2h-games`` games
    each (seeded openings, colours swapped in pairs), each side with its own config's search:
    the Elo gap between configs that the ladder cannot show while both lose every game to
    GnuGo."""
    players = {}
    for row in rows:
        name, i = row["config"], row["champion"]
        layout = run_layout(workdir / name, name)
        if layout.params.exists() and layout.model(i).exists():
            cfg = rating_config(layout, name, args.simulations)
            players[name] = (layout.model_id(i), _spec(layout, i, args), cfg)
    ready, pairs = list(players), []
    for k, first in enumerate(ready):
        for second in ready[k + 1 :]:
            (a, a_spec, a_cfg), (b, b_spec, b_cfg) = players[first], players[second]
            match = MatchSpec(
                (a_spec, b_spec),
                args.h2h_games,
                seed=k,
                match_id=f"{first}-vs-{second}",
                store=workdir / "head-to-head",
                player_cfgs=(a_cfg, b_cfg),
            )
            games = play_match(match, a_cfg)
            pairs.append({"first": first, "second": second, "players": [a, b],
                          **side_summary(games, a), "elo_gap": None})  # fmt: skip
    return pairs


def search_pays(rows: list[dict[str, Any]], workdir: Path, args: argparse.Namespace) -> None:
    """Each config's champion at ``--deep-simulations`` against itself at ``--simulations``,
    ``--search-games`` games (seeded openings, colours swapped in pairs, both sides with the
    run's own search, the deeper side's changed by ``--search-set``), into its row as
    ``search_pays``: the deeper side's record. Settings of the evaluation search are chosen by
    this row: the same champion and budgets, one setting changed on the deeper side."""
    changes = list(args.search_set or [])
    for row in rows:
        name, i = row["config"], row["champion"]
        layout = run_layout(workdir / name, name)
        if not (layout.params.exists() and layout.model(i).exists()):
            continue
        cfg = rating_config(layout, name, args.simulations)
        deep_cfg = rating_config(layout, name, args.simulations, changes)
        deep = f"mcts:{layout.model(i)}@{args.deep_simulations}"
        label = "".join(f"-{re.sub(r'[^A-Za-z0-9._-]', '_', c)}" for c in changes)  # its own
        match = MatchSpec(
            (deep, _spec(layout, i, args)),
            args.search_games,
            seed=i,
            match_id=f"{name}-{args.deep_simulations}{label}-vs-{args.simulations}",
            store=workdir / "search-pays",
            player_cfgs=(deep_cfg, cfg),
        )
        games = play_match(match, cfg)
        deeper = f"{layout.model_id(i)}@{args.deep_simulations}"  # (`tasks.players` names it)
        row["search_pays"] = {
            "simulations": [args.deep_simulations, args.simulations],
            "player": deeper,
            "deeper_set": changes,
            **side_summary(games, deeper),
        }


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
    layout = run_layout(work, name)
    done = [row["iteration"] for row in state["iterations"]]
    last = done[-1] if done else 0
    cfg = rating_config(layout, name, args.simulations)
    store = work / "ladder"
    best = champion(layout)
    best_i = 0 if best is None else best.iteration
    matches: dict[int, list[dict[str, Any]]] = {}
    for i in sorted({*_points(last, args.points), best_i}) if play and done else ():
        spec = _spec(layout, i, args)
        player = layout.model_id(i)
        if i != best_i:
            matches[i] = [play_ladder(player, spec, 1, args.curve_games, cfg, store, seed=i)]
            continue
        matches[i] = climb(player, spec, args.games, cfg, store, seed=i)
    deep = None
    if args.deep_simulations and args.deep_games and play and done:  # searching deeper
        deep_cfg = rating_config(layout, name, args.deep_simulations)
        spec = f"mcts:{layout.model(best_i)}@{args.deep_simulations}"
        deep = {
            "simulations": args.deep_simulations,
            "player": layout.model_id(best_i),
            "matches": climb(
                layout.model_id(best_i),
                spec,
                args.deep_games,
                deep_cfg,
                work / DEEP_LADDER,
                seed=best_i,
            ),  # fmt: skip
        }
    selfplay = [finished(layout, i, Stage.SELFPLAY, SelfplayRecord) for i in done]
    cpu = {row["iteration"]: row["cpu_s"] for row in state["iterations"]}
    stages, share = stage_split(state)
    return {
        "config": name,
        "failed": state.get("failed"),
        "iterations": last,
        "champion": best_i,
        "cpu_s": state.get("failed_cpu_s") or (state["iterations"][-1]["cpu_s"] if done else 0.0),
        "wall_s": state["iterations"][-1]["wall_s"] if done else 0.0,
        "command_cpu_s": state.get("command_cpu_s"),
        "stage_cpu_s": stages,
        "learning_share": share,
        "games": sum(s.games for s in selfplay if s is not None),
        "positions": sum(s.positions for s in selfplay if s is not None),
        "checkpoints": {
            str(i): {"cpu_s": cpu.get(i, 0.0), "player": layout.model_id(i), "matches": m}
            for i, m in matches.items()
        },
        "deep": deep,
        **provenance(name, layout, state, done),
    }


def provenance(name: str, layout: RunLayout, state: dict, done: list[int]) -> dict[str, Any]:
    """Where a run's figures come from: its config file and overrides and the config it ran
    (resolved, from its frozen params), whether others shared the machine while it trained
    (`bench.provenance.Sharing`, over every invocation), the commit each invocation ran
    (`bench.provenance.commit`: the JSON's own ``provenance`` names the code that wrote it,
    which for a run resumed or kept from before may not be the code that trained it), its
    compute in units that do not depend on the CPU (`bench.provenance.compute`), and the work a
    CPU-second of self-play bought along it (`bench.provenance.pace`)."""
    entry = CONFIGS[name]
    ran = load_config(layout.params) if layout.params.exists() else None
    selfplay = [finished(layout, i, Stage.SELFPLAY, SelfplayRecord) for i in done]
    trained = [finished(layout, i, Stage.TRAIN, TrainRecord) for i in done]
    played = [s for s in selfplay if s is not None]
    work = compute(
        len(done),
        sum(s.evaluations for s in played),
        sum(s.simulations for s in played),
        sum(s.positions for s in played),
        sum(t.trained.result.steps for t in trained if t is not None),
        ran.training.batch_size if ran is not None else 0,
    )
    rows = state.get("iterations", [])
    cpu = {row["iteration"]: row.get("stages", {}).get("selfplay", 0.0) for row in rows}
    rates = [s.evaluations / cpu[i] for i, s in zip(done, selfplay, strict=True)
             if s is not None and cpu.get(i)]  # fmt: skip
    return {
        "config_file": entry.file,
        "overrides": list(entry.overrides),
        "resolved_config": None if ran is None else config_to_flat_dict(ran.resolve()),
        "sharing": merged(state.get("sharing", [])),
        "pace": pace(rates),
        "commits": state.get("commits", []),
        "compute": work,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.strength", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--budget", default="quick", help="quick, 1ch, 4ch or core-hours")
    parser.add_argument("--configs", default="paper,default", help=f"of {', '.join(CONFIGS)}")
    parser.add_argument("--resume", action="store_true", help="continue a killed benchmark")
    parser.add_argument("--games", type=int, default=100, help="champion's games per level")
    parser.add_argument("--curve-games", type=int, default=40, help="games per curve point")
    parser.add_argument("--points", type=int, default=6, help="checkpoints rated per run")
    parser.add_argument("--simulations", type=int, default=64, help="our side's, every config")
    parser.add_argument("--deep-simulations", type=int, default=400,
                        help="the champions' deeper budget, rated apart (0: none)")  # fmt: skip
    parser.add_argument("--deep-games", type=int, default=100,
                        help="champion's games per level at the deeper budget")  # fmt: skip
    parser.add_argument("--h2h-games", type=int, default=100,
                        help="games per pair of configs' champions (0: none)")  # fmt: skip
    parser.add_argument("--search-games", type=int, default=100,
                        help="each champion deeper against itself (0: none)")  # fmt: skip
    parser.add_argument("--search-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a search-pays change, deeper side only")  # fmt: skip
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
    pairs = head_to_head(rows, workdir, args) if args.h2h_games else []
    if args.search_games and args.deep_simulations:
        search_pays(rows, workdir, args)
    anchors = add_elo(rows, pairs, workdir)
    for row in rows:
        row["extrapolation"] = extrapolate(row, anchors)
    console.print(table(rows, args.budget, args.simulations))
    if args.deep_simulations and args.deep_games:  # (0 games: no deeper ladder)
        console.print(deep_table(rows, args.budget, args.deep_simulations))
    if pairs:
        console.print(pairs_table(pairs, args.simulations))
    if any(row.get("search_pays") for row in rows):
        console.print(search_table(rows))
    for row in rows:
        console.print(extrapolation_line(row["config"], row["extrapolation"]))
        if slowed := pace_line(row["config"], row.get("pace")):
            console.print(slowed)
    console.print(f"wall time of the benchmark: {(time.monotonic() - started) / 60:.0f} min")
    payload = {
        "provenance": {**commit(ROOT), **machine()},
        "budget": args.budget,
        "core_hours": hours,
        "simulations": args.simulations,
        "deep_simulations": args.deep_simulations,
        "anchors": anchors,
        "configs": {n: {**asdict(CONFIGS[n])} for n in names},
        "results": rows,
        "head_to_head": pairs,
    }
    if args.json:
        write_json(args.json, payload)
    if args.png:
        plot(rows, args.png, args.budget)


if __name__ == "__main__":
    main()
