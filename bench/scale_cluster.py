"""(d) of `bench.scale`: iterations an hour on the local cluster, one Dask worker against two.

``python -m bench.scale --cluster`` (root, and what ``tabula cluster up`` needs:
docs/scaling-out.md) starts the cluster once with a fresh project of ``nobody``'s, then runs
the pipeline through the cluster's deployment as ``up`` prints it (``prefect deployment run
... --watch`` with the cluster's credentials), once with ``selfplay.workers=1`` and once with
one worker per Dask worker of the cluster, each a run of its own with ``--pipeline-iterations``
iterations; the flows run under the work pool's worker, self-play on the Dask workers in their
namespaces, training in the flow's process. From each run's ``budget.json``, from the end of
its first iteration to the end of its last (the first pays the Dask workers' imports and
compilation): iterations an hour, self-play positions and trained samples a second (the games
differ between the runs, and so does an iteration's work), each stage's share of the wall time,
and the whole machine's cores busy over those iterations (``/proc/stat``: the servers, the Dask
workers and the flows together; a run's own count leaves the Dask workers out).

The ratio of the two rates is the goal's figure (docs/benchmarks.md, "Scaling": >= 1.8x).
Beside it, Amdahl's bound from the one-worker run: if every stage but self-play kept its wall
time and self-play's split evenly over the workers, the ratio could reach
``1 / (1 - s + s / W)`` for self-play's share ``s`` of the one-worker iteration.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.provenance import Snapshot
from bench.runs import iteration_rates, iteration_usage
from bench.strength import TABULA
from cli.clone import empty_project

#: Whom the project belongs to, so that the cluster's flows and Dask workers run as someone
#: other than root (`tabula cluster up` runs them as the project's owner).
OWNER = "nobody"
#: How often the runs' ``budget.json`` is looked at, seconds.
POLL_S = 0.25


def cluster_rates(config: str, overrides: list[str], iterations: int) -> dict[str, Any]:
    """(d): the cluster up once, a run at one Dask worker and one at all of them, down."""
    from cli.cluster import control
    from cli.cluster.layout import DASK_WORKERS

    with tempfile.TemporaryDirectory(prefix="tabula-scale-cluster-", dir="/var/tmp") as tmp:
        project = _owned_project(Path(tmp))
        c = control.up(Path(tmp) / "cluster", project, config, "scale")
        try:
            runs = [_run(c, project, config, overrides, w, iterations)
                    for w in (1, len(DASK_WORKERS))]  # fmt: skip
        finally:
            control.down(c.folder)
    one, all_ = runs[0], runs[-1]
    share = one["stage_share"].get("selfplay", 0.0)
    return {
        "dask_workers": len(DASK_WORKERS),
        "runs": runs,
        "speedup": all_["iterations_per_hour"] / one["iterations_per_hour"],
        "amdahl_bound": 1.0 / (1.0 - share + share / all_["workers"]),
    }


def _owned_project(tmp: Path) -> Path:
    """A fresh project of `OWNER`'s, in a folder that user reaches."""
    project = empty_project(tmp / "project", who="bench")
    user = pwd.getpwnam(OWNER)
    for path in [project, *project.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    tmp.chmod(0o711)  # (the servers' user and the owner reach their folders inside)
    return project


def _run(c: Any, project: Path, config: str, overrides: list[str], workers: int,
         iterations: int) -> dict[str, Any]:  # fmt: skip
    """One run through the deployment at ``workers`` self-play workers, and its figures."""
    from cli.cluster.layout import DEPLOYMENT
    from tasks.run.budget import read_budget
    from tasks.run.layout import RunLayout

    name = f"scale-cluster-w{workers}"
    layout = RunLayout(project, "data", name)
    params = {"config": config, "name": name, "iterations": iterations,
              "overrides": [*c.overrides(), *overrides, f"selfplay.workers={workers}"]}  # fmt: skip
    argv = [*TABULA, "cluster", "exec", "--dir", str(c.folder), "--", "prefect", "deployment",
            "run", DEPLOYMENT, "--params", json.dumps(params), "--watch"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    marks = _Marks(layout)
    marks.start()
    try:
        started = time.monotonic()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
    finally:
        marks.stop()
    final = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-400:]
    if done.returncode != 0 or "Completed" not in final:
        raise SystemExit(f"bench/scale.py: the cluster's run at {workers} workers: {final}")
    spent = read_budget(layout).spent
    run_wall, _, stage_wall, _ = iteration_usage(spent)
    first, last = marks.at.get(1), marks.at.get(len(spent))
    machine_busy = None
    if first is not None and last is not None and last[0] > first[0]:
        machine_busy = (last[1].busy_s - first[1].busy_s) / ((last[0] - first[0]) * _cores())
    return {
        "workers": workers,
        **iteration_rates(layout, spent, run_wall, stage_wall),
        "machine_busy": machine_busy,
        "run_wall_s": round(wall, 2),
    }


class _Marks(threading.Thread):
    """Watches a run's ``budget.json``: the monotonic time and the machine's busy CPU-seconds
    when it first records each iteration (``at``: iterations recorded -> (time, snapshot))."""

    def __init__(self, layout: Any) -> None:
        super().__init__(daemon=True)
        self.layout = layout
        self.at: dict[int, tuple[float, Snapshot]] = {}
        self._ended = threading.Event()

    def run(self) -> None:
        from tasks.run.budget import read_budget

        while not self._ended.wait(POLL_S):
            try:
                recorded = len(read_budget(self.layout).spent)
            except (OSError, ValueError):
                continue  # (being replaced, or not yet there)
            if recorded and recorded not in self.at:
                self.at[recorded] = (time.monotonic(), Snapshot.now())

    def stop(self) -> None:
        self._ended.set()
        self.join()


def _cores() -> int:
    return os.cpu_count() or 1
