"""Pipeline benchmark: orchestration overhead, and self-play scaling over Dask workers.

Usage: ``python -m bench.pipeline [--json PATH] [--iterations I] [--full] [--set KEY=VALUE ...]
[--games G] [--rounds R] [--only overhead|dask] [--cluster]``

(a) Orchestration overhead. The pipeline (`flows.pipeline.run_pipeline`: Prefect, MLflow,
DVC, git lineage) runs ``--iterations`` iterations of ``configs/quickstart.yaml`` in a fresh
temporary project, with fewer games and training steps (``OVERHEAD_SET``; ``--full`` keeps the
quick-start sizes) and then the ``--set`` overrides, against a temporary Prefect server started
before the clock. Per iteration, the time inside the stage functions is what the stage markers
record (``data/<run>/iter-*/state/*.json``): self-play (the slowest worker: they run side by
side), training, gating and the anchor matches. Overhead = the iteration flow run's wall time
(from Prefect) minus that, as a fraction of the iteration; the whole run's figure (its wall
time minus every stage's time) also counts the run's setup (DVC init, the initial network, the
MLflow parent run). Goal: <= 10% of an iteration. With ``--cluster`` (root), the same run
follows on `tabula cluster` (docs/scaling-out.md): the Prefect server over HTTP with its auth,
MLflow's tracking server on PostgreSQL, artifacts through it, DVC pushing to the shared remote,
self-play on the Dask workers in their own namespaces (the flow runs in this process, as
`tabula run` would; the cluster's start is not counted); its table follows the embedded one.
The Prefect tasks outside the stages (DVC commits, MLflow calls, ratings, lineage) are listed
with their times.

(b) Self-play scaling. `tasks.selfplay.run_worker` through a Dask ``LocalCluster`` of one
worker process vs one of two (one thread each, ``torch.set_num_threads(1)``), the same total
of ``--games`` games (split evenly over the workers; ``selfplay.concurrent_games`` = games per
worker of the two-worker case, so every network batch has the same size). Both clusters are
started and warmed up first (numba, torch), then measured in alternating ``--rounds``; the
median ratio of positions/s (2 workers / 1) is reported, and the wall-time ratio beside it.
Goal: >= 1.6x on 2 cores. The machine's load average is shown: other processes on the cores
lower the figure. So the CPU-time estimate is shown too: positions over the slowest worker's
process CPU time, the rate each worker would reach on a core of its own (it still counts what
the workers slow each other down by, through shared caches and memory bandwidth, but not
waiting for a core that another process holds).

Prints rich tables and writes the same figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest.mock import patch

from rich.console import Console

from bench.pipeline_tables import dask_table, overhead_table
from cli.clone import empty_project
from tasks.run.layout import RunLayout

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
# Smaller stages than the quick start's (128 games, 100 steps, 40 + 10 match games), so the
# bench takes minutes on 2 idle cores. The overhead per iteration hardly depends on these
# sizes, so the fraction measured here is an upper bound for the quick-start run's.
OVERHEAD_SET = [
    "selfplay.games=16",
    "evaluation.gating_games=4",
    "evaluation.anchor_games=2",
    "training.steps=25",
]
# Prefect task keys (function names) of the stages, and of the flows (a subflow is a task run).
STAGE_TASKS = {"selfplay_worker", "train", "gate", "anchor_match", "iteration", "pipeline"}
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------
# (a) orchestration overhead


def _project(tmp: Path) -> Path:
    return empty_project(tmp / "project", who="bench")


def _stage_seconds(state: Path) -> dict[str, float]:
    """Seconds spent inside the stage functions of one iteration, from its state markers."""

    def load(name: str) -> dict[str, Any]:
        path = state / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    workers = [json.loads(p.read_text()) for p in sorted(state.glob("selfplay-w*.json"))]
    evaluation = load("evaluate")
    return {
        "selfplay": max((w["seconds"] for w in workers), default=0.0),
        "selfplay_sum": sum(w["seconds"] for w in workers),
        "train": load("train").get("seconds", 0.0),
        "gate": evaluation.get("gate", {}).get("seconds", 0.0),
        "anchors": sum(m.get("seconds", 0.0) for m in evaluation.get("anchors", {}).values()),
    }


def _prefect_times() -> tuple[dict[int, float], dict[str, float]]:
    """(wall seconds of each iteration flow run, seconds of each kind of other task)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    only = FlowFilter(name=FlowFilterName(any_=["tabula-iteration"]))
    with get_client(sync_client=True) as client:
        flow_runs = client.read_flow_runs(flow_filter=only)
        task_runs: list[Any] = []
        while page := client.read_task_runs(limit=200, offset=len(task_runs)):  # API's max
            task_runs += page
    iterations = {
        int(r.parameters["i"]): (r.end_time - r.start_time).total_seconds()
        for r in flow_runs
        if r.start_time and r.end_time
    }
    kinds: dict[str, float] = {}
    for r in task_runs:
        kind = r.task_key.rsplit("-", 1)[0] if r.task_key else r.name
        kinds[kind] = kinds.get(kind, 0.0) + r.total_run_time.total_seconds()
    return iterations, kinds


def _overhead(overrides: list[str], run: RunLayout, iterations: int, start_s: float, wall: float,
              flow_wall: dict[int, float], tasks: dict[str, float]) -> dict[str, Any]:  # fmt: skip
    """The overhead figures of a finished run (``overrides`` on the quick start, its servers
    started in ``start_s``): per iteration and for the whole run."""
    rows = []
    for i in range(1, iterations + 1):
        stages = _stage_seconds(run.state(i))
        inside = sum(v for k, v in stages.items() if k != "selfplay_sum")
        it_wall = flow_wall.get(i, float("nan"))
        rows.append(
            {
                "iteration": i,
                "wall_s": it_wall,
                "stages_s": inside,
                **stages,
                "overhead_s": it_wall - inside,
                "overhead_fraction": (it_wall - inside) / it_wall,
            }
        )
    inside_all = sum(r["stages_s"] for r in rows)
    return {
        "config": str(QUICKSTART.relative_to(ROOT)),
        "overrides": overrides,
        "prefect_server_start_s": start_s,
        "iterations": rows,
        "run_wall_s": wall,
        "run_stages_s": inside_all,
        "run_overhead_fraction": (wall - inside_all) / wall,
        "mean_iteration_overhead_fraction": statistics.mean(r["overhead_fraction"] for r in rows),
        "other_tasks_s": {k: v for k, v in sorted(tasks.items()) if k not in STAGE_TASKS},
    }


def measure_overhead(overrides: list[str], iterations: int) -> dict[str, Any]:
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import run_pipeline
    from tabula.config import load_config

    cfg = load_config(QUICKSTART, [*overrides, "pipeline.name=bench"])
    with tempfile.TemporaryDirectory(prefix="tabula-bench-") as tmp:
        project = _project(Path(tmp))
        started = time.perf_counter()
        with prefect_test_harness(server_startup_timeout=120):
            server_s = time.perf_counter() - started
            started = time.perf_counter()
            run_pipeline(cfg, project, iterations=iterations)
            wall = time.perf_counter() - started
            flow_wall, tasks = _prefect_times()
        run = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
        return _overhead(overrides, run, iterations, server_s, wall, flow_wall, tasks)


def measure_cluster_overhead(overrides: list[str], iterations: int) -> dict[str, Any]:
    """(a) on `tabula cluster`: the Prefect server over HTTP with its auth, MLflow's tracking
    server on PostgreSQL over HTTP (artifacts through it), the DVC remote on a shared path,
    self-play on the two Dask workers in their namespaces (needs root)."""
    import dask.config
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from cli.cluster import control, layout
    from flows.pipeline import run_pipeline
    from tabula.config import load_config

    with tempfile.TemporaryDirectory(prefix="tabula-bench-", dir="/var/tmp") as tmp:
        Path(tmp).chmod(0o711)  # PostgreSQL's own user reaches its folder inside
        project = _project(Path(tmp))
        started = time.perf_counter()
        c = control.up(Path(tmp) / "cluster", project, "configs/quickstart.yaml", "bench")
        server_s = time.perf_counter() - started
        env = c.client_env()  # MLflow's credentials, Dask's certificates
        settings = {PREFECT_API_URL: env["PREFECT_API_URL"],
                    PREFECT_API_AUTH_STRING: env["PREFECT_API_AUTH_STRING"]}  # fmt: skip
        try:
            with (
                patch.dict(os.environ, env),
                temporary_settings(updates=settings),
                dask.config.set(_dask_config(env)),
            ):
                cfg = load_config(QUICKSTART, [*overrides, *c.overrides(), "pipeline.name=bench"])
                started = time.perf_counter()
                run_pipeline(cfg, project, iterations=iterations,
                             dask_address=layout.dask_address())  # fmt: skip
                wall = time.perf_counter() - started
                flow_wall, tasks = _prefect_times()
        finally:
            control.down(c.folder)
        run = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
        return _overhead(overrides, run, iterations, server_s, wall, flow_wall, tasks)


def _dask_config(env: dict[str, str]) -> dict[str, Any]:
    """Dask's settings among ``env``'s variables, as dotted keys for ``dask.config.set`` (Dask
    reads its environment once, at import)."""
    import dask.config

    return {
        name[len("DASK_") :].lower().replace("__", "."): dask.config.interpret_value(value)
        for name, value in env.items()
        if name.startswith("DASK_")
    }


# ---------------------------------------------------------------------------------------------
# (b) self-play scaling over Dask workers


def _play(cfg: Any, out: str, games: int, seed: int, worker: int) -> dict[str, Any]:
    """Runs in a Dask worker: one single-threaded self-play worker."""
    import torch

    from tabula.plan import WorkerSpec
    from tasks.selfplay import run_worker

    torch.set_num_threads(1)
    cpu = time.process_time()
    spec = WorkerSpec(0, worker, "random", games, seed, out, cfg.selfplay.v_resign)
    result = run_worker(cfg, spec, Path(out))
    return {
        "positions": result.positions,
        "seconds": result.seconds,
        "cpu_s": time.process_time() - cpu,
        "pid": os.getpid(),
    }


def _round(client: Any, cfg: Any, tmp: Path, games: int, seed: int) -> dict[str, Any]:
    """All games over all workers of ``client``'s cluster, one task pinned to each worker."""
    workers = sorted(client.scheduler_info()["workers"])
    n = len(workers)
    started = time.perf_counter()
    futures = [
        client.submit(
            _play,
            cfg,
            str(tmp / f"s{seed}-n{n}-w{w}"),
            games // n,
            seed,
            w,
            workers=[addr],
            allow_other_workers=False,
            pure=False,
        )
        for w, addr in enumerate(workers)
    ]
    results = client.gather(futures)
    wall = time.perf_counter() - started
    positions = sum(r["positions"] for r in results)
    assert len({r["pid"] for r in results}) == n, "two tasks shared a worker process"
    slowest_cpu = max(r["cpu_s"] for r in results)
    return {
        "workers": n,
        "games": games,
        "positions": positions,
        "wall_s": wall,
        "positions_per_s": positions / wall,
        "cpu_s": sum(r["cpu_s"] for r in results),
        "positions_per_cpu_s": positions / slowest_cpu,
    }


def measure_dask(overrides: list[str], games: int, rounds: int) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from tabula.config import load_config

    cfg = load_config(QUICKSTART, [*overrides, f"selfplay.concurrent_games={games // 2}"])
    with tempfile.TemporaryDirectory(prefix="tabula-dask-") as tmp, \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                         dashboard_address=":0", env=ONE_THREAD) as one, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         dashboard_address=":0", env=ONE_THREAD) as two, \
            Client(one) as c1, Client(two) as c2:  # fmt: skip
        warm = cfg.model_copy(update={"search": cfg.search.model_copy(update={"simulations": 2})})
        for client in (c1, c2):  # compile numba, load torch, in every worker process
            _round(client, warm, Path(tmp), 2, seed=999)
        load_before = os.getloadavg()
        measured: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        for r in range(rounds):
            for client in (c1, c2) if r % 2 == 0 else (c2, c1):
                row = _round(client, cfg, Path(tmp), games, seed=r)
                measured[row["workers"]].append(row)
        load_after = os.getloadavg()
    ratios = [
        b["positions_per_s"] / a["positions_per_s"] for a, b in zip(*measured.values(), strict=True)
    ]
    walls = [a["wall_s"] / b["wall_s"] for a, b in zip(*measured.values(), strict=True)]
    by_cpu = [
        b["positions_per_cpu_s"] / a["positions_per_cpu_s"]
        for a, b in zip(*measured.values(), strict=True)
    ]
    return {
        "config": str(QUICKSTART.relative_to(ROOT)),
        "overrides": overrides,
        "games": games,
        "concurrent_games": games // 2,
        "rounds": measured,
        "speedup": statistics.median(ratios),
        "speedup_rounds": ratios,
        "wall_ratio": statistics.median(walls),
        "cpu_speedup": statistics.median(by_cpu),
        "cpu_speedup_rounds": by_cpu,
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.pipeline", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--iterations", type=int, default=2, help="(a) pipeline iterations")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help=f"(a) config override, after {' '.join(OVERHEAD_SET)} (repeatable)",
    )
    ap.add_argument(
        "--full",
        action="store_true",
        help="(a) the quick-start config unchanged (minutes per iteration)",
    )
    ap.add_argument("--games", type=int, default=32, help="(b) games per measurement (even)")
    ap.add_argument("--rounds", type=int, default=2, help="(b) rounds per cluster size")
    ap.add_argument("--only", choices=("overhead", "dask"), help="run one part only")
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="(a) also on `tabula cluster` (root), side by side with the embedded defaults",
    )
    args = ap.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    console = Console(width=120)
    overrides = ([] if args.full else OVERHEAD_SET) + args.overrides
    results: dict[str, Any] = {}
    if args.only in (None, "dask"):
        results["dask"] = measure_dask([], args.games, args.rounds)
        console.print(dask_table(results["dask"]))
    if args.only in (None, "overhead"):
        results["overhead"] = measure_overhead(overrides, args.iterations)
        console.print(overhead_table(results["overhead"]))
        if args.cluster:
            results["cluster_overhead"] = measure_cluster_overhead(overrides, args.iterations)
            console.print(overhead_table(results["cluster_overhead"], "tabula cluster"))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
