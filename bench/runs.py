"""A finished tabula run as the benchmarks that read one name it: ``--project DIR --run NAME``."""

from __future__ import annotations

import argparse
from pathlib import Path

from tasks.run.layout import RunLayout
from tasks.run.markers import champion


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
