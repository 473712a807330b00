"""Decided positions in a run's self-play: what KataGo's reduced visits would act on.

Usage: ``python -m bench.decided --project DIR --run NAME [--threshold 0.9] [--lookback 3]
[--json PATH]``

KataGo spends fewer visits, and gives less training weight, where one side is far ahead: its
self-play (Wu 2019; its selfplay configs: ``reduceVisits``, ``reduceVisitsThreshold = 0.9``,
``reduceVisitsThresholdLookback = 3``, ``reducedVisitsWeight = 0.1``) reduces a move's search
when the search's value has been more extreme than the threshold over the last 3 turns. Before
building that into tabula's self-play, this benchmark counts, per iteration of a finished run,
the positions it would act on: those whose recorded root value (``root_value``, from the side
to move) and the previous ``--lookback`` - 1 positions' of the same game all lie beyond
``--threshold`` for the same side, overall, among full searches, and in the games played with
resignation off (the others resign at ``selfplay.v_resign`` first). The share bounds the
self-play a reduction could save.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from bench.runs import add_run_arguments, run_layout
from model.datamodule import find_shards
from model.files import write_json

COLUMNS = ["game_id", "move_number", "root_value", "resign_disabled", "full_search"]


def decided_mask(
    game_id: np.ndarray, move_number: np.ndarray, value: np.ndarray, threshold: float, lookback: int
) -> np.ndarray:
    """Per row: this position and the ``lookback`` - 1 before it in its game all have
    ``|value| > threshold`` for the same side (a game's first ``lookback`` - 1 positions never
    do). Values are from the side to move, so one side stays ahead while their signs alternate;
    a swing starts the count again. Only recorded positions count, moves apart by one: where
    fast searches' rows are not recorded (``selfplay.record_fast_rows``), a gap in the move
    numbers starts the count again."""
    order = np.lexsort((move_number, game_id))
    v = value[order]
    extreme = np.abs(v) > threshold
    games, moves = game_id[order], move_number[order]
    run = np.zeros(len(order), dtype=np.int64)  # extreme positions in a row, within the game
    for k in range(len(order)):
        same = k > 0 and games[k] == games[k - 1] and moves[k] == moves[k - 1] + 1
        same = same and v[k] * v[k - 1] < 0
        run[k] = (run[k - 1] + 1 if same else 1) if extreme[k] else 0
    out = np.zeros(len(order), dtype=bool)
    out[order] = run >= lookback
    return out


def count_iteration(shards: list[Path], threshold: float, lookback: int) -> dict[str, Any]:
    table = pa.concat_tables([pq.read_table(p, columns=COLUMNS) for p in shards])
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in COLUMNS}
    decided = decided_mask(cols["game_id"], cols["move_number"], cols["root_value"],
                           threshold, lookback)  # fmt: skip
    full, disabled = cols["full_search"].astype(bool), cols["resign_disabled"].astype(bool)
    return {
        "positions": len(decided),
        "decided": int(decided.sum()),
        "full_searches": int(full.sum()),
        "decided_full_searches": int((decided & full).sum()),
        "resign_disabled_positions": int(disabled.sum()),
        "decided_resign_disabled": int((decided & disabled).sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.decided", description=__doc__.splitlines()[0]
    )
    add_run_arguments(parser)
    parser.add_argument("--threshold", type=float, default=0.9, help="KataGo's: 0.9")
    parser.add_argument("--lookback", type=int, default=3, help="KataGo's: 3")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not 0.0 < args.threshold < 1.0 or args.lookback < 1:
        parser.error("--threshold must lie in (0, 1) and --lookback be at least 1")
    layout = run_layout(args)
    iterations = layout.iterations()
    rows = []
    for i in iterations:
        if layout.selfplay(i).is_dir() and any(layout.selfplay(i).rglob("*.parquet")):
            shards = find_shards([layout.selfplay(i)])
            rows.append({"iteration": i, **count_iteration(shards, args.threshold, args.lookback)})
    if not rows:
        parser.error(f"--run {args.run}: no self-play shards under {layout.root}")
    table = Table(title=f"{args.run}: positions beyond |value| {args.threshold} for "
                        f"{args.lookback} moves")  # fmt: skip
    for column in ("iteration", "positions", "decided", "of full searches", "resign off: decided"):
        table.add_column(column, justify="right")
    for r in rows:
        off = f"{r['decided_resign_disabled']:,} of {r['resign_disabled_positions']:,}"
        table.add_row(str(r["iteration"]), f"{r['positions']:,}",
                      f"{r['decided']:,} ({r['decided'] / r['positions']:.2%})",
                      f"{r['decided_full_searches']:,} of {r['full_searches']:,}", off)  # fmt: skip
    Console(width=120).print(table)
    if args.json:
        write_json(args.json, {"run": args.run, "threshold": args.threshold,
                               "lookback": args.lookback, "iterations": rows})  # fmt: skip


if __name__ == "__main__":
    main()
