"""A finished tabula run as the benchmarks that read one name it (``--project DIR --run NAME``)
and what its budget record says of its iterations."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from tasks.run.layout import RunLayout
from tasks.run.markers import champion, finished
from tasks.run.records import SelfplayRecord, Spent, Stage, TrainRecord


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", type=Path, required=True, help="the run's repository")
    parser.add_argument("--run", required=True, help="the run's name (data/RUN)")


def run_layout(args: argparse.Namespace) -> RunLayout:
    """The layout of the run that ``--project`` and ``--run`` name."""
    return RunLayout(args.project.resolve(), "data", args.run)


def champion_iteration(parser: argparse.ArgumentParser, layout: RunLayout) -> int:
    """The iteration of the run's champion; a usage error (exit 2, one line) when the run has
    none yet or no frozen config."""
    best = champion(layout)
    if best is None or not layout.params.exists():
        parser.error(f"--run {layout.run}: no champion under {layout.root}")
    return best.iteration


def iteration_usage(
    spent: Sequence[Spent],
) -> tuple[float, float, dict[str, float], dict[str, float]]:
    """Wall and CPU seconds from the end of a run's first iteration to the end of its last
    (``budget.json``'s totals: the whole run for one iteration), and both by stage over those
    iterations, with ``between`` for what the stages' laps leave out: the iteration flows'
    start and end and the pipeline's work between them (CPU: the CPU-only ``close`` too)."""
    first, measured = (spent[0], spent[1:]) if len(spent) > 1 else (None, spent)
    wall = spent[-1].wall_s - (first.wall_s if first else 0.0)
    cpu = spent[-1].cpu_s - (first.cpu_s if first else 0.0)
    stage_wall: dict[str, float] = {}
    stage_cpu: dict[str, float] = {}
    for s in measured:
        for stage, seconds in s.stage_wall_s.items():
            stage_wall[stage] = stage_wall.get(stage, 0.0) + seconds
            stage_cpu[stage] = stage_cpu.get(stage, 0.0) + s.stages.get(stage, 0.0)
    stage_wall["between"] = max(0.0, wall - sum(stage_wall.values()))
    stage_cpu["between"] = max(0.0, cpu - sum(stage_cpu.values()))
    return wall, cpu, stage_wall, stage_cpu


def work_done(layout: RunLayout, iterations: Sequence[int]) -> tuple[int, int]:
    """The self-play positions and trained samples of a run's ``iterations``, from their stage
    records: what an iteration's wall time bought, which differs between runs of one config."""
    from tabula.config import parse_config

    batch = parse_config(layout.params.read_text()).training.batch_size
    positions = samples = 0
    for i in iterations:
        selfplay = finished(layout, i, Stage.SELFPLAY, SelfplayRecord)
        train = finished(layout, i, Stage.TRAIN, TrainRecord)
        positions += selfplay.positions if selfplay else 0
        samples += train.trained.result.steps * batch if train else 0
    return positions, samples


def iteration_rates(layout: RunLayout, spent: Sequence[Spent], wall: float,
                    stage_wall: dict[str, float]) -> dict:  # fmt: skip
    """What the iterations that `iteration_usage` measures made of their ``wall`` seconds and
    ``stage_wall`` (its figures): their count, iterations an hour, self-play positions and
    trained samples a second of their stages, and each stage's share of the wall time."""
    measured = spent[1:] if len(spent) > 1 else spent
    positions, samples = work_done(layout, [s.iteration for s in measured])
    return {
        "iterations": len(measured),
        "iterations_per_hour": len(measured) / wall * 3600,
        "selfplay_positions_per_s": positions / max(stage_wall.get("selfplay", 0.0), 1e-9),
        "trained_samples_per_s": samples / max(stage_wall.get("train", 0.0), 1e-9),
        "stage_share": {k: round(v / wall, 4) for k, v in sorted(stage_wall.items())},
    }
