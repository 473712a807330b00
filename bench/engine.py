"""Go engine speed: random playouts to the end, moves per second, beside OpenSpiel's C++ Go.

Usage: ``python -m bench.engine [--json PATH] [--seconds S] [--rounds R] [--fresh-cache]``

A playout starts from the empty board and plays, for each move, a move uniform among the legal
moves (pass included, positional superko enforced) until two passes in a row or 2*N*N moves.
Paths, on 9x9 and 19x19 (komi 7.5):

- ``tabula incremental``: ``bench.playout.random_games``, the whole loop in numba over
  incrementally kept groups (what the ratio to OpenSpiel is taken on);
- ``tabula stateless``: the same games through ``board.legal_mask`` + ``board.play_move`` per
  move (an O(M) mask each move: the per-node cost the tree search pays);
- ``OpenSpiel``: ``pyspiel.load_game("go", ...)`` driven from Python with ``legal_actions()``,
  a uniform choice and ``apply_action`` (the ``bench`` extra; shown as unavailable if absent).

Paths are timed in interleaved rounds and the median rate is reported, so load from other
processes hits every path alike. The numba compile time is the first call's time, marked
``compiled`` (a cold compile), ``cache`` (loaded from numba's on-disk cache) or ``warm``
(already compiled in this process for the other size); ``--fresh-cache`` compiles into an
empty cache directory to measure a cold compile.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

SIZES = (9, 19)
KOMI = 7.5


def _timed(run_batch: Callable[[], int], seconds: float) -> tuple[float, int]:
    """Call ``run_batch`` (returns moves played) until ``seconds`` pass: (moves/s, moves)."""
    moves, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        moves += run_batch()
    return moves / elapsed, moves


def tabula_paths(N: int) -> tuple[dict[str, Callable[[], int]], dict[str, dict]]:
    """Batch runners for the two tabula paths, and their first-call (compile) figures."""
    from bench.playout import new_state, random_games, random_games_stateless
    from tabula.go.board import rules_context

    ctx = rules_context(N)
    state = new_state(N)
    seeds = iter(range(1, 1 << 30))
    batch = max(1, 2000 // N**2)  # ~0.5-5 ms per call: timer overhead stays negligible
    runners = {
        "tabula incremental": lambda: random_games(
            state, ctx.neighbors, ctx.zobrist, next(seeds), batch
        ),
        "tabula stateless": lambda: random_games_stateless(
            ctx.neighbors, ctx.zobrist, next(seeds), max(1, batch // 4)
        ),
    }
    compile_info = {}
    for name, kernel in [("tabula incremental", random_games),
                         ("tabula stateless", random_games_stateless)]:  # fmt: skip
        warm = bool(kernel.signatures)  # the other size already compiled these types
        start = time.perf_counter()
        runners[name]()
        first = time.perf_counter() - start
        source = "warm" if warm else "cache" if kernel.stats.cache_hits else "compiled"
        compile_info[name] = {"first_call_s": first, "source": source}
    return runners, compile_info


def openspiel_runner(N: int) -> Callable[[], int] | None:
    """One OpenSpiel random playout per call, or None if open_spiel is not installed."""
    try:
        import pyspiel
    except ImportError:
        return None
    game = pyspiel.load_game("go", {"board_size": N, "komi": KOMI})
    rng = random.Random(0)

    def run() -> int:
        state, n = game.new_initial_state(), 0
        while not state.is_terminal():
            state.apply_action(rng.choice(state.legal_actions()))
            n += 1
        return n

    return run


def measure(seconds: float, rounds: int) -> dict:
    results: dict = {"seconds_per_path_per_round": seconds, "rounds": rounds, "sizes": {}}
    for N in SIZES:
        runners, compile_info = tabula_paths(N)
        spiel = openspiel_runner(N)
        if spiel is not None:
            runners["OpenSpiel (C++ via pyspiel)"] = spiel
        for run in runners.values():
            run()  # warm up (first-call costs are reported separately)
        rates: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(rounds):
            for name, run in runners.items():
                rates[name].append(_timed(run, seconds)[0])
        median = {name: statistics.median(r) for name, r in rates.items()}
        results["sizes"][str(N)] = {
            "moves_per_s": median,
            "rounds_moves_per_s": rates,
            "compile": compile_info,
            "openspiel_available": spiel is not None,
        }
    return results


def render(results: dict, console: Console) -> None:
    table = Table(title="Random playouts to the end (uniform legal moves, superko, komi 7.5)")
    for col in ["board", "path", "M moves/s", "vs OpenSpiel", "first call (compile) s"]:
        table.add_column(col, justify="right" if col != "path" else "left")
    for N, r in results["sizes"].items():
        rates = r["moves_per_s"]
        spiel = rates.get("OpenSpiel (C++ via pyspiel)")
        for name, rate in rates.items():
            ratio = f"{rate / spiel:.2f}x" if spiel else "n/a"
            c = r["compile"].get(name)
            first = f"{c['first_call_s']:.2f} ({c['source']})" if c else ""
            table.add_row(f"{N}x{N}", name, f"{rate / 1e6:.3f}", ratio, first)
        if not r["openspiel_available"]:
            table.add_row(f"{N}x{N}", "OpenSpiel", "unavailable", "n/a", "(pip install open_spiel)")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--seconds", type=float, default=1.0, help="per path per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    parser.add_argument(
        "--fresh-cache", action="store_true", help="compile into an empty numba cache dir"
    )
    args = parser.parse_args()
    if args.fresh_cache:  # must happen before numba is imported
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="tabula-numba-")
    results = measure(args.seconds, args.rounds)
    render(results, Console())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
