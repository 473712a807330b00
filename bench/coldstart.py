"""Cold start: what compiling numba's self-play kernels costs the worker processes, when the
pool compiles once and when every process compiles its own.

Usage: ``python -m bench.coldstart [--json PATH] [--workers N] [--games G] [--rounds R]
[--config PATH] [--set KEY=VALUE ...]``

A new clone, a new worktree or a changed kernel finds numba's on-disk cache empty, and a
self-play process then spends about a minute of CPU compiling before its first move. Here
``--workers`` processes of `tasks.workers.WorkerProcesses` (default 2) each get one job at
once: `tasks.selfplay.run_worker`, what the pipeline's worker jobs run, playing ``--games`` games of
the config's self-play (default `configs/quickstart.yaml`) with a freshly initialised network
into a scratch project. Four cases:

- ``each compiles`` (``warm=None``, what the pool did before it compiled once): a cold cache (a
  new, empty ``NUMBA_CACHE_DIR``); every process compiles what its games need;
- ``compile once`` (the pool before it split the compile, `tasks.selfplay.compile_kernels`):
  a cold cache; the first process compiles, the others wait and then load the kernels from
  the cache;
- ``compile split`` (what the pipeline's pool does): as ``compile once``, and one waiting process
  compiles meanwhile the kernels the first one's game reaches last
  (`tasks.selfplay.compile_kernels_ahead`), which that game then loads from the cache;
- ``warm cache``: as ``compile split``, on the cache the case before filled: the floor.

Per case: the wall time from the jobs' start to the last one's end; the processes'
CPU-seconds (each process's own from its start: the interpreter, the imports, the compile,
the games); and how many of the processes compiled (numba's cache misses). The three cold cases
rotate over ``--rounds`` (the medians are shown). ``each compiles`` less ``compile once`` is
the CPU a run's first self-play stage saves, which a budgeted run then spends on learning;
``compile split`` against ``compile once``, the wall time a cold start saves and its CPU. The
other processes' CPU on the machine meanwhile is reported (`bench.provenance.Sharing`).
Prints a table, writes the same figures as JSON.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.provenance import Sharing, Snapshot, commit, machine
from model.files import write_json
from tabula.config import Config, load_config
from tabula.plan import WorkerSpec
from tasks.selfplay import compile_kernels, compile_kernels_ahead
from tasks.workers import WorkerProcesses

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
CASES = ("each compiles", "compile once", "compile split", "warm cache")
COLD = CASES[:3]


def tabula_kernels() -> list[Any]:
    """The numba dispatchers of the ``tabula`` modules this process has imported."""
    import numba.core.registry as registry

    return [value for name, module in list(sys.modules.items()) if name.startswith("tabula.")
            for value in vars(module).values()
            if isinstance(value, registry.CPUDispatcher)]  # fmt: skip


def play_counted(cfg: Config, project: Path, spec: WorkerSpec, progress: Any = None) -> dict:
    """A worker job: `tasks.selfplay.run_worker` into ``project``, then this process's
    CPU-seconds since it started and how many kernel signatures it compiled rather than
    loaded from numba's cache."""
    from tasks.selfplay import run_worker

    result = run_worker(cfg, spec, project / spec.folder, progress)
    misses = sum(len(kernel.stats.cache_misses) for kernel in tabula_kernels())
    return {"cpu_s": time.process_time(), "compiled": misses, "positions": result.positions}


def run_case(cfg: Config, case: str, cache: Path, project: Path, games: int, workers: int) -> dict:
    """One case (module docstring) on ``workers`` new processes with numba's cache in
    ``cache``: wall, CPU-seconds and how many processes compiled."""
    os.environ["NUMBA_CACHE_DIR"] = str(cache)  # (read by each process as it starts)
    warm = None if case == "each compiles" else compile_kernels
    ahead = compile_kernels_ahead if case in ("compile split", "warm cache") else None
    pool = WorkerProcesses(workers, warm=warm, ahead=ahead)
    results: list[Any] = [None] * workers

    def play(w: int) -> None:
        spec = WorkerSpec(1, w, "random", games, 1000 + w, f"{case}/worker-{w}", None)
        results[w] = pool.play(play_counted, cfg, project, spec, threads=1)

    start = time.perf_counter()
    try:
        threads = [threading.Thread(target=play, args=(w,)) for w in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        pool.close()
    wall = time.perf_counter() - start
    if any(r is None for r in results):
        raise RuntimeError(f"{case}: a worker ended without its result")
    return {"case": case, "wall_s": round(wall, 2),
            "cpu_s": round(sum(r["cpu_s"] for r in results), 2),
            "compiled": sum(1 for r in results if r["compiled"]),
            "positions": sum(r["positions"] for r in results)}  # fmt: skip


def measure(cfg: Config, workers: int, games: int, rounds: int, scratch: Path) -> list[dict]:
    """Every case: the cold ones, their order rotating over ``rounds``, then the warm cache."""
    rows = []
    for r in range(rounds):
        for case in COLD[r % len(COLD) :] + COLD[: r % len(COLD)]:
            cache = scratch / f"cache-{r}-{case.replace(' ', '-')}"
            rows.append(run_case(cfg, case, cache, scratch / "project", games, workers))
            if case == "compile split":
                warm_cache = cache
    rows.append(run_case(cfg, CASES[-1], warm_cache, scratch / "project", games, workers))
    return rows


def summary(rows: list[dict]) -> dict[str, dict]:
    """Per case, the medians of its rows; and the CPU each compiles spends over compile once."""
    out: dict[str, Any] = {}
    for case in CASES:
        mine = [r for r in rows if r["case"] == case]
        out[case] = {k: statistics.median(r[k] for r in mine)
                     for k in ("wall_s", "cpu_s", "compiled")}  # fmt: skip
    each, once, split = out["each compiles"], out["compile once"], out["compile split"]
    out["saved_cpu_s"] = round(each["cpu_s"] - once["cpu_s"], 2)
    out["wall_ratio"] = round(once["wall_s"] / each["wall_s"], 3)
    out["split_saved_wall_s"] = round(once["wall_s"] - split["wall_s"], 2)
    out["split_extra_cpu_s"] = round(split["cpu_s"] - once["cpu_s"], 2)
    return out


def table(rows: list[dict], workers: int) -> Table:
    t = Table(title=f"Self-play's first jobs on {workers} worker processes")
    for column in ("case", "wall s", "CPU s", "processes that compiled", "positions"):
        t.add_column(column, justify="left" if column == "case" else "right")
    for r in rows:
        t.add_row(r["case"], f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}", str(r["compiled"]),
                  str(r["positions"]))  # fmt: skip
    return t


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.coldstart", description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--games", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--config", type=Path, default=QUICKSTART)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    if min(args.workers, args.games, args.rounds) < 1:
        parser.error("--workers, --games and --rounds must be >= 1")
    cfg = load_config(args.config, args.overrides)
    start, began = Snapshot.now(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tabula-coldstart-") as tmp:
        rows = measure(cfg, args.workers, args.games, args.rounds, Path(tmp))
    wall = time.perf_counter() - began
    own = sum(r["cpu_s"] for r in rows)
    sharing = Sharing.between(start, Snapshot.now(), own, wall, os.cpu_count() or 1)
    result = {"date": time.strftime("%Y-%m-%d"), **commit(ROOT), "machine": machine(),
              "config": str(args.config), "overrides": args.overrides, "workers": args.workers,
              "games": args.games, "rounds": rows, "summary": summary(rows),
              "sharing": sharing.to_dict()}  # fmt: skip
    console = Console()
    console.print(table(rows, args.workers))
    s = result["summary"]
    console.print(f"compile once saves {s['saved_cpu_s']:.1f} CPU-s over each compiles; "
                  f"wall ratio {s['wall_ratio']:.2f}; compile split saves "
                  f"{s['split_saved_wall_s']:.1f} s of wall for {s['split_extra_cpu_s']:+.1f} "
                  f"CPU-s; others' share of the machine "
                  f"{sharing.others_share:.1%}")  # fmt: skip
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
