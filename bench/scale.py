"""Scaling: how much of the machine self-play and the pipeline use, at 1, 2, ... N workers.

Usage: ``python -m bench.scale [--json PATH] [--workers 1,2] [--modes process,thread]
[--seconds S] [--warmup S] [--pipeline-iterations I] [--config PATH] [--set KEY=VALUE ...]
[--skip selfplay|network|pipeline] [--cluster]``

(a) Self-play at steady state. For each worker count W and each mode (``process``: each worker
a spawned process of its own, as `tasks.workers` runs them; ``thread``: workers as threads of one
process, as before), W workers play the config's self-play (its network initialised from the
seed, its search, ``selfplay.concurrent_games`` games each) for ``--seconds`` after a warm-up
of ``--warmup`` once every worker has loaded (process start, torch, the first network calls:
they wait for each other at a barrier), so every worker counts over the same wall seconds.
Reported: network evaluations, positions (moves
played) and games finished per second over the window, the mean network batch, the share of
the cores the process tree kept busy (CPU-seconds over wall x cores), and on CUDA the GPU's
busy share (NVML's utilisation, sampled every 0.2 s: `tasks.gpu_use`).

(b) The network alone: `model.evaluator.Evaluator` on random planes at self-play's batch size
and at 4096 (the network's own rate), positions per second; self-play's evaluations per
second over the larger of the two is how near the workers come to what the network can do.

(c) The pipeline: a fresh project runs ``tabula run --iterations I`` with ``--set
selfplay.workers=W`` for each W (``selfplay.processes`` auto: processes from 2 workers). From
the run's ``budget.json`` and stage records, from the end of the first iteration to the end
of the last (the first pays numba's compilation and the workers' start): iterations per hour,
self-play positions per second, trained samples per second, each stage's share of that wall
time (``between``: what the stages' laps leave out, the iteration flows' start and end and the
pipeline's work between them), the cores busy over it and within each stage. The run has the
environment's OpenMP wait policy, as a user's run would (unset: OpenMP's default), not
bench.strength's sleeping threads, which leave a core idle between training's parallel
regions.

(d) With ``--cluster`` (root): the pipeline on the local cluster, through its deployment, at
one Dask worker and at all of them (`bench.scale_cluster`): iterations an hour and their ratio.

Prints tables and writes JSON with the machine (CPU model, cores, GPU), the commit, the config
and its overrides. Goals (docs/benchmarks.md, "Scaling"): a 2-core CPU >= 95% busy in a run;
one H200 with 16 cores >= 10x the 2-core machine's self-play games per hour, the GPU >= 60% busy.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.runs import iteration_rates, iteration_usage
from bench.scale_cluster import cluster_rates
from bench.strength import TABULA, run_env
from cli.clone import empty_project
from model.files import write_json
from tabula.config import Config, dump_config, load_config
from tasks.gpu_use import gpu_use
from tasks.run.cputime import busy, cores, process_tree_cpu_seconds, run_measured
from tasks.selfplay import compile_kernels

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
#: The pipeline part's runs: no anchor games (they do not scale with workers).
PIPELINE_SET = ["evaluation.anchors=[]", "evaluation.anchor_games=0"]


# ---------------------------------------------------------------------------------------------
# (a) self-play at steady state


class _TimeUp(Exception):
    """Raised from the evaluator at the window's end: the games stop there."""


@dataclass
class _Window:
    """What one worker did between ``start`` and ``stop`` (monotonic seconds, shared by all)."""

    start: float
    stop: float
    evaluations: int = 0
    calls: int = 0
    positions0: int = -1
    games0: int = 0


def _timed_worker(config_yaml: str, worker: int, threads: int, ready: Any, settle: float,
                  seconds: float) -> dict:  # fmt: skip
    """One worker's self-play: load, wait at the ``ready`` barrier with the others and the
    caller, play for ``settle`` seconds more, then count for ``seconds``. Runs in a worker
    process or a thread."""
    from model.evaluator import Evaluator, set_threads
    from model.network import network_for
    from tabula.config import parse_config
    from tabula.features import NUM_PLANES
    from tabula.selfplay import SelfPlayParams, SelfPlayStats, play_games

    cfg = parse_config(config_yaml)
    set_threads(threads)
    evaluator = Evaluator(network_for(cfg, cfg.pipeline.seed), device=cfg.pipeline.device)
    N = cfg.rules.board_size
    for _ in range(2):  # torch's first calls (and CUDA's) are slow
        evaluator(np.zeros((cfg.selfplay.batch_size, NUM_PLANES, N, N), np.uint8))
    ready.wait()
    start = time.monotonic() + settle
    stats, window = SelfPlayStats(), _Window(start, start + seconds)

    def evaluate(planes: np.ndarray, rng: Any = None) -> tuple[np.ndarray, np.ndarray]:
        now = time.monotonic()
        if now >= window.stop:
            raise _TimeUp
        if now >= window.start:
            if window.positions0 < 0:
                window.positions0, window.games0 = stats.positions, stats.games
            window.evaluations += len(planes)
            window.calls += 1
        return evaluator(planes, rng)

    params = SelfPlayParams.from_config(cfg)
    rng = np.random.default_rng([cfg.pipeline.seed, worker])
    try:
        for _ in play_games(evaluate, params, 10**9, rng, stats=stats):
            pass
    except _TimeUp:
        pass
    started = max(window.positions0, 0)
    return {
        "evaluations": window.evaluations,
        "calls": window.calls,
        "positions": stats.positions - started,
        "games": stats.games - window.games0,
    }


def selfplay_rate(cfg: Config, workers: int, mode: str, seconds: float, warmup: float) -> dict:
    """(a) for ``workers`` workers in ``mode``: rates over the window (module docstring)."""
    threads = max(1, cores() // workers)
    text = dump_config(cfg)
    pool: Executor
    if mode == "process":
        context = multiprocessing.get_context("spawn")
        manager = context.Manager()
        ready = manager.Barrier(workers + 1)
        pool = ProcessPoolExecutor(workers, mp_context=context)
    else:
        manager, ready = None, threading.Barrier(workers + 1)
        pool = ThreadPoolExecutor(workers)
    with pool:
        jobs = [pool.submit(_timed_worker, text, w, threads, ready, warmup, seconds)
                for w in range(workers)]  # fmt: skip
        ready.wait()
        start = time.monotonic() + warmup
        time.sleep(max(0.0, start - time.monotonic()))
        with gpu_use(cfg) as gpu:  # NVML's readings over the window (none without a GPU)
            cpu0 = process_tree_cpu_seconds()
            time.sleep(max(0.0, start + seconds - time.monotonic()))
            cpu = process_tree_cpu_seconds() - cpu0
        readings = gpu.take() if gpu is not None else []
        done = [job.result() for job in jobs]
    if manager is not None:
        manager.shutdown()
    total = {k: sum(d[k] for d in done) for k in ("evaluations", "calls", "positions", "games")}
    return {
        "workers": workers,
        "mode": mode,
        "threads_per_worker": threads,
        "seconds": seconds,
        "evaluations_per_s": total["evaluations"] / seconds,
        "positions_per_s": total["positions"] / seconds,
        "games_per_s": total["games"] / seconds,
        "games_per_hour": total["games"] / seconds * 3600,
        "mean_batch": total["evaluations"] / max(total["calls"], 1),
        "cores_busy": busy(cpu, seconds, cores()),
        "gpu_busy": statistics.mean(readings) if readings else None,
    }


# ---------------------------------------------------------------------------------------------
# (b) the network alone


def network_rate(cfg: Config, batch: int, seconds: float) -> dict:
    """Positions per second of `Evaluator` at ``batch`` on random planes (after a warm-up)."""
    from model.evaluator import Evaluator, set_threads
    from model.network import network_for
    from tabula.features import NUM_PLANES

    set_threads(cores())
    evaluator = Evaluator(network_for(cfg, cfg.pipeline.seed), device=cfg.pipeline.device)
    N = cfg.rules.board_size
    planes = np.random.default_rng(0).integers(0, 2, (batch, NUM_PLANES, N, N), dtype=np.uint8)
    for _ in range(3):
        evaluator(planes)
    calls, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        evaluator(planes)
        calls += 1
    return {"batch": batch, "positions_per_s": calls * batch / (time.monotonic() - started)}


# ---------------------------------------------------------------------------------------------
# (c) the pipeline


def pipeline_rate(config: Path, overrides: list[str], workers: int, iterations: int,
                  work: Path) -> dict:  # fmt: skip
    """(c) for ``workers`` workers: one fresh ``tabula run`` and its records."""
    from tasks.run.budget import read_budget
    from tasks.run.layout import RunLayout

    project = empty_project(work / f"project-w{workers}", who="bench")
    run = f"scale-w{workers}"
    sets = [*PIPELINE_SET, *overrides, f"selfplay.workers={workers}"]
    argv = [*TABULA, "run", "--config", str(config), "--name", run, "--iterations",
            str(iterations), *(a for o in sets for a in ("--set", o))]  # fmt: skip
    # OpenMP's wait policy as the user's own runs have it (bench.strength's sleeping threads
    # would leave a core idle between training's parallel regions).
    env = run_env(work, omp_wait=os.environ.get("OMP_WAIT_POLICY"))
    done = run_measured(argv, cwd=project, env=env, log=work / f"run-w{workers}.log")
    if done.returncode != 0:
        raise SystemExit(f"bench/scale.py: the run failed: {done.stderr_tail[-400:]}")
    layout = RunLayout(project, "data", run)
    spent = read_budget(layout).spent
    wall, cpu, stage_wall, stage_cpu = iteration_usage(spent)
    return {
        "workers": workers,
        **iteration_rates(layout, spent, wall, stage_wall),
        "cores_busy": busy(cpu, wall, cores()),
        "stage_busy": {k: busy(stage_cpu[k], v, cores()) for k, v in sorted(stage_wall.items())},
        "omp_wait_policy": env.get("OMP_WAIT_POLICY", "unset"),
        "run_wall_s": done.wall_s,
        "run_cpu_s": done.cpu_s,
    }


# ---------------------------------------------------------------------------------------------


def machine() -> dict:
    """The CPU model, its cores, the GPU (if any), torch's version and the commit."""
    import torch

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    # BENCH_COMMIT: the commit a copied tree was made from (its own git may name another)
    commit = (
        os.environ.get("BENCH_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    return {"cpu": model, "cores": cores(), "gpu": gpu, "torch": torch.__version__,
            "commit": commit, "load_average": os.getloadavg()}  # fmt: skip


def _tables(result: dict, console: Console) -> None:
    if result.get("selfplay"):
        table = Table(title="(a) self-play at steady state")
        columns = ("workers", "mode", "evals/s", "positions/s", "games/h", "batch", "cores busy")
        for col in (*columns, "GPU busy"):
            table.add_column(col, justify="right")
        for r in result["selfplay"]:
            rates = (r["evaluations_per_s"], r["positions_per_s"], r["games_per_hour"])
            table.add_row(
                str(r["workers"]),
                r["mode"],
                *(f"{x:,.0f}" for x in rates),
                f"{r['mean_batch']:.0f}",
                _pct(r["cores_busy"]),
                _pct(r["gpu_busy"]),
            )
        console.print(table)
    for r in result.get("network", []):
        rate = r["positions_per_s"]
        console.print(f"(b) network alone, batch {r['batch']}: {rate:,.0f} positions/s")
    if result.get("pipeline"):
        table = Table(title="(c) the pipeline, iterations after the first")
        columns = ("workers", "iter/h", "positions/s", "samples/s", "cores busy", "wall shares",
                   "stage busy")  # fmt: skip
        for col in columns:
            table.add_column(col, justify="right")
        for r in result["pipeline"]:
            shares = " ".join(f"{k} {v:.0%}" for k, v in r["stage_share"].items())
            stage_busy = " ".join(f"{k} {_pct(v)}" for k, v in r.get("stage_busy", {}).items())
            table.add_row(
                str(r["workers"]),
                f"{r['iterations_per_hour']:.0f}",
                f"{r['selfplay_positions_per_s']:,.0f}",
                f"{r['trained_samples_per_s']:,.0f}",
                _pct(r["cores_busy"]),
                shares,
                stage_busy,
            )
        console.print(table)
    if result.get("cluster"):
        _cluster_table(result["cluster"], console)


def _cluster_table(cluster: dict, console: Console) -> None:
    table = Table(title="(d) tabula cluster, iterations after the first")
    for col in ("workers", "iter/h", "machine busy", "wall shares"):
        table.add_column(col, justify="right")
    for r in cluster["runs"]:
        shares = " ".join(f"{k} {v:.0%}" for k, v in r["stage_share"].items())
        table.add_row(str(r["workers"]), f"{r['iterations_per_hour']:.1f}",
                      _pct(r["machine_busy"]), shares)  # fmt: skip
    console.print(table)
    console.print(f"{cluster['dask_workers']} Dask workers against one: "
                  f"{cluster['speedup']:.2f}x the iterations an hour (Amdahl's bound from the "
                  f"one-worker run's self-play share: {cluster['amdahl_bound']:.2f}x)")  # fmt: skip


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--config", type=Path, default=QUICKSTART)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--workers", default=f"1,{cores()}")
    parser.add_argument("--modes", default="process,thread")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--pipeline-iterations", type=int, default=3)
    parser.add_argument("--skip", action="append", default=[],
                        choices=["selfplay", "network", "pipeline"])  # fmt: skip
    parser.add_argument(
        "--cluster", action="store_true", help="(d) on `tabula cluster` (root): 1 Dask worker, all"
    )
    args = parser.parse_args(argv)
    try:
        counts = sorted({int(w) for w in args.workers.split(",")})
    except ValueError:
        parser.error(f"--workers {args.workers!r}: give counts like 1,2,4")
    if not counts or counts[0] < 1:
        parser.error(f"--workers {args.workers!r}: counts must be >= 1")
    modes = args.modes.split(",")
    if not set(modes) <= {"process", "thread"}:
        parser.error(f"--modes {args.modes!r}: give process, thread or both")
    args.config = args.config.resolve()  # (the pipeline runs in a project of its own)
    cfg = load_config(args.config, args.overrides)
    console = Console()
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "machine": machine(),
                              "config": str(args.config), "overrides": args.overrides}  # fmt: skip
    if "selfplay" not in args.skip:
        compile_kernels(cfg)  # (the workers then load the kernels from numba's cache)
        result["selfplay"] = [selfplay_rate(cfg, w, m, args.seconds, args.warmup)
                              for w in counts for m in modes]  # fmt: skip
    if "network" not in args.skip:
        sizes = sorted({cfg.selfplay.batch_size, 4096})
        result["network"] = [network_rate(cfg, b, min(args.seconds, 10.0)) for b in sizes]
    if "pipeline" not in args.skip:
        with tempfile.TemporaryDirectory(prefix="tabula-scale-") as tmp:
            result["pipeline"] = [
                pipeline_rate(args.config, args.overrides, w, args.pipeline_iterations, Path(tmp))
                for w in counts
            ]
    if args.cluster:
        overrides = [*PIPELINE_SET, *args.overrides]
        result["cluster"] = cluster_rates(str(args.config), overrides, args.pipeline_iterations)
    _tables(result, console)
    if args.json:
        write_json(args.json, result)
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
