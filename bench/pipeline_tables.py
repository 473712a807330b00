"""The tables `bench/pipeline.py` prints: (a) the orchestration overhead of each iteration and of
the whole run, (b) self-play over one and two Dask workers, round by round (the figures are
``measure_overhead``'s and ``measure_dask``'s, as written to its JSON)."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def overhead_table(res: dict[str, Any], where: str = "embedded defaults") -> Table:
    """(a): per iteration, the stages' seconds and the orchestration's share beside them."""
    table = Table(title=f"(a) orchestration overhead, {where}: {res['config']} "
                        f"{' '.join(res['overrides'])}")  # fmt: skip
    for col in (
        "iteration",
        "wall s",
        "self-play s",
        "train s",
        "gate s",
        "anchors s",
        "overhead s",
        "overhead %",
    ):
        table.add_column(col, justify="right")
    for r in res["iterations"]:
        table.add_row(
            str(r["iteration"]),
            f"{r['wall_s']:.1f}",
            f"{r['selfplay']:.1f}",
            f"{r['train']:.1f}",
            f"{r['gate']:.1f}",
            f"{r['anchors']:.1f}",
            f"{r['overhead_s']:.1f}",
            f"{100 * r['overhead_fraction']:.1f}",
        )
    table.add_row(
        "whole run",
        f"{res['run_wall_s']:.1f}",
        "",
        "",
        "",
        "",
        f"{res['run_wall_s'] - res['run_stages_s']:.1f}",
        f"{100 * res['run_overhead_fraction']:.1f}",
    )
    table.caption = (
        "goal: <= 10% of an iteration; outside the stages: "
        + ", ".join(f"{k} {v:.1f}s" for k, v in res["other_tasks_s"].items() if v >= 0.05)
        + f"; servers' start {res['prefect_server_start_s']:.1f}s (not counted)"
    )
    return table


def dask_table(res: dict[str, Any]) -> Table:
    """(b): each round's positions, seconds and rates, one and two Dask workers."""
    table = Table(title=f"(b) self-play over Dask workers (1 thread each): {res['games']} games, "
                        f"{res['config']} {' '.join(res['overrides'])}")  # fmt: skip
    for col in (
        "workers",
        "round",
        "positions",
        "wall s",
        "positions/s",
        "CPU s",
        "positions / slowest worker's CPU s",
    ):
        table.add_column(col, justify="right")
    for n, rows in res["rounds"].items():
        for k, r in enumerate(rows):
            table.add_row(
                str(n),
                str(k),
                str(r["positions"]),
                f"{r['wall_s']:.1f}",
                f"{r['positions_per_s']:.1f}",
                f"{r['cpu_s']:.1f}",
                f"{r['positions_per_cpu_s']:.1f}",
            )
    table.caption = (
        f"speedup (positions/s, median) {res['speedup']:.2f}x, wall ratio "
        f"{res['wall_ratio']:.2f}x, CPU-time estimate {res['cpu_speedup']:.2f}x; "
        f"goal >= 1.6x; {res['cpus']} CPUs, load average "
        f"{res['loadavg_before'][0]:.1f} before, {res['loadavg_after'][0]:.1f} after"
    )
    return table
