"""Evaluation play: the cost of one ``tabula gtp`` genmove, alone and with two engines side by side.

Usage: ``python -m bench.genmove [--model PATH] [--simulations 64,400,800] [--moves 30]
[--threads 1,0] [--json PATH]``

Each engine is a real ``tabula gtp`` process (the quick start's network: ``--model``, or a
freshly initialised one of the quick start's shape, which costs the same per move) spoken to
over GTP: ``boardsize 9``, ``clear_board``, then ``--moves`` genmoves, colours alternating, one
game. Per genmove: wall seconds between the command and its answer, and CPU-seconds of the
engine's process (user + system, all its threads; read from the process before the first and
after the last genmove, so start-up is left out and reported apart). "pair" runs two engines at
once on the machine's cores, each driven from its own thread, and reports each engine's figures
and their CPU ratio to the engine alone. ``--threads``: torch threads per engine (0: torch's
default, one per core; `tabula gtp --threads`). Settings are measured one after another, so
compare them side by side within one run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
TABULA = [sys.executable, "-c", "import cli; cli.app()"]


class Engine:
    """One ``tabula gtp`` process and its genmove timings."""

    def __init__(self, model: Path, simulations: int, threads: int, seed: int) -> None:
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*TABULA, "gtp", "--model", str(model), "--simulations", str(simulations),
             "--threads", str(threads), "--seed", str(seed)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        self.ps = psutil.Process(self.proc.pid)
        self.ask("boardsize 9")
        self.ask("clear_board")
        self.ask("komi 7.5")
        self.start_wall = time.perf_counter() - started
        self.start_cpu = self.cpu()
        self.walls: list[float] = []

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"engine ended on {command!r}")
            if not line.strip():
                if lines:
                    break
                continue
            lines.append(line.strip())
        if not lines[0].startswith("="):
            raise RuntimeError(f"{command!r}: {lines}")
        return lines[0][1:].strip()

    def play(self, moves: int) -> dict[str, float]:
        before = self.cpu()
        for k in range(moves):
            t = time.perf_counter()
            self.ask(f"genmove {'b' if k % 2 == 0 else 'w'}")
            self.walls.append(time.perf_counter() - t)
        cpu = self.cpu() - before
        self.ask("quit")
        self.proc.wait(timeout=60)
        return {
            "cpu_ms": 1000 * cpu / moves,
            "wall_ms": 1000 * sum(self.walls) / moves,
            "start_cpu_s": self.start_cpu,
            "start_wall_s": self.start_wall,
        }


def measure(model: Path, simulations: int, threads: int, moves: int, engines: int) -> list[dict]:
    """Per engine: genmove CPU and wall (ms) with ``engines`` engines playing at once."""
    running = [Engine(model, simulations, threads, seed=k) for k in range(engines)]
    results: list[dict] = [{} for _ in running]

    def drive(k: int) -> None:
        results[k] = running[k].play(moves)

    workers = [threading.Thread(target=drive, args=(k,)) for k in range(engines)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return results


def quickstart_model(folder: Path) -> Path:
    path = folder / "model.pt"
    subprocess.run([*TABULA, "init-model", "--out", str(path), "--seed", "0"], cwd=ROOT,
                   check=True, capture_output=True)  # fmt: skip
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.genmove", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", type=Path, help="a checkpoint (default: quick-start shape)")
    parser.add_argument("--simulations", default="64,400,800")
    parser.add_argument("--moves", type=int, default=30)
    parser.add_argument("--threads", default="1,0", help="torch threads per engine (0: default)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console(width=120)
    with tempfile.TemporaryDirectory(prefix="tabula-genmove-") as tmp:
        model = args.model or quickstart_model(Path(tmp))
        rows = []
        for sims in [int(s) for s in args.simulations.split(",")]:
            for threads in [int(t) for t in args.threads.split(",")]:
                alone = measure(model, sims, threads, args.moves, 1)[0]
                pair = measure(model, sims, threads, args.moves, 2)
                pair_cpu = sum(p["cpu_ms"] for p in pair) / len(pair)
                rows.append({
                    "simulations": sims, "threads": threads, "alone": alone, "pair": pair,
                    "pair_cpu_ratio": pair_cpu / alone["cpu_ms"],
                })  # fmt: skip
                console.print(f"{sims} simulations, {threads or 'default'} thread(s): done")
    table = Table(title=f"tabula gtp genmove, 9x9, {args.moves} moves (ms per genmove)")
    for column in ("simulations", "threads", "alone CPU", "alone wall", "pair CPU (each)",
                   "pair wall (each)", "pair CPU / alone", "start-up CPU s"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in rows:
        a, p = r["alone"], r["pair"]
        table.add_row(
            str(r["simulations"]), str(r["threads"] or "default"),
            f"{a['cpu_ms']:.0f}", f"{a['wall_ms']:.0f}",
            " / ".join(f"{x['cpu_ms']:.0f}" for x in p),
            " / ".join(f"{x['wall_ms']:.0f}" for x in p),
            f"{r['pair_cpu_ratio']:.2f}", f"{a['start_cpu_s']:.1f}",
        )  # fmt: skip
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"moves": args.moves, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
