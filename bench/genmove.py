"""Evaluation play: the cost of one ``tabula gtp`` genmove, alone and with two engines side by side.

Usage: ``python -m bench.genmove [--model PATH] [--simulations 64,400,800] [--moves 30]
[--threads 1] [--leaves 4,16] [--precision auto,fastest] [--h2h-games 100]
[--h2h-simulations 400] [--json PATH]``

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

``--leaves``: the leaves one game's search evaluates in one network batch (`tabula gtp
--leaves`); ``--precision``: the network's (`tabula gtp --precision`: ``fastest`` measures bf16
against fp32 at start and keeps the faster, ``auto`` takes bf16 wherever the CPU has it). More
leaves a batch cost less per simulation and search a little less sharply: with ``--model`` a
trained checkpoint, ``--h2h-games`` games between the fewest and the most leaves (same network,
``--h2h-simulations`` each side, seeded openings, colours swapped in pairs, games batched
across as in matches) say what the cheaper search costs in strength.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
TABULA = [sys.executable, "-c", "import cli; cli.main()"]


@dataclass(frozen=True)
class Setting:
    """One engine setting of the table."""

    simulations: int
    threads: int
    leaves: int
    precision: str


class Engine:
    """One ``tabula gtp`` process and its genmove timings."""

    def __init__(self, model: Path, setting: Setting, seed: int) -> None:
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*TABULA, "gtp", "--model", str(model), "--simulations", str(setting.simulations),
             "--threads", str(setting.threads), "--leaves", str(setting.leaves),
             "--precision", setting.precision, "--seed", str(seed)],
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


def measure(model: Path, setting: Setting, moves: int, engines: int) -> list[dict]:
    """Per engine: genmove CPU and wall (ms) with ``engines`` engines playing at once."""
    running = [Engine(model, setting, seed=k) for k in range(engines)]
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


def head_to_head(model: Path, simulations: int, leaves: tuple[int, int], games: int) -> dict:
    """``games`` games of one network against itself, ``leaves[0]`` against ``leaves[1]``
    leaves a batch, from seeded openings (colours swapped in pairs), summarised from the
    second's side: what the cheaper search costs in strength."""
    from bench.ladder import elo_gap
    from tabula.config import load_config
    from tabula.gating import win_rate_interval
    from tabula.openings import match_openings
    from tasks.match import MatchSpec, run_match

    cfg = load_config(ROOT / "configs/quickstart.yaml", [])
    cfgs = tuple(load_config(ROOT / "configs/quickstart.yaml",
                             [f"search.leaves_per_game={n}"]) for n in leaves)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tabula-h2h-") as tmp:
        # Two files, two specs: each side is built with its own config.
        specs = []
        for n in leaves:
            copy = Path(tmp) / f"leaves-{n}.pt"
            copy.write_bytes(model.read_bytes())
            specs.append(f"mcts:{copy}@{simulations}")
        spec = MatchSpec(
            (specs[1], specs[0]),
            games,
            openings=match_openings(cfg.rules.board_size, games, 2),
            concurrent=16,
            player_cfgs=(cfgs[1], cfgs[0]),
        )
        result = run_match(spec, cfg)
    m = result.summary
    decided = m.wins + m.losses + m.draws
    low, high = win_rate_interval(m.score * decided, decided) if decided else (0.0, 1.0)
    return {"simulations": simulations, "leaves": list(leaves), "games": m.games,
            "score": m.score, "low": low, "high": high, "mean_margin": m.mean_margin,
            "elo_gap": elo_gap(m.score)}  # fmt: skip


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.genmove", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", type=Path, help="a checkpoint (default: quick-start shape)")
    parser.add_argument("--simulations", default="64,400,800")
    parser.add_argument("--moves", type=int, default=30)
    parser.add_argument("--threads", default="1", help="torch threads per engine (0: default)")
    parser.add_argument("--leaves", default="4,16", help="leaves a network batch")
    parser.add_argument("--precision", default="auto,fastest", help="of fastest, auto, fp32, bf16")
    parser.add_argument("--h2h-games", type=int, default=0,
                        help="fewest leaves against most (a trained --model)")  # fmt: skip
    parser.add_argument("--h2h-simulations", type=int, default=400)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.model is not None and not args.model.is_file():
        parser.error(f"--model {args.model}: no such checkpoint file")
    console = Console(width=140)
    settings = [Setting(sims, threads, leaves, precision)
                for sims in _ints(args.simulations) for threads in _ints(args.threads)
                for leaves in _ints(args.leaves)
                for precision in args.precision.split(",")]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tabula-genmove-") as tmp:
        model = args.model or quickstart_model(Path(tmp))
        rows = []
        for setting in settings:
            try:
                alone = measure(model, setting, args.moves, 1)[0]
                pair = measure(model, setting, args.moves, 2)
            except RuntimeError as error:  # the engine said why on stderr, above
                raise SystemExit(f"bench/genmove.py: {setting}: {error}") from None
            pair_cpu = sum(p["cpu_ms"] for p in pair) / len(pair)
            rows.append({
                **asdict(setting), "alone": alone, "pair": pair,
                "pair_cpu_ratio": pair_cpu / alone["cpu_ms"],
            })  # fmt: skip
            console.print(f"{setting}: done")
    table = Table(title=f"tabula gtp genmove, 9x9, {args.moves} moves (ms per genmove)")
    for column in ("simulations", "threads", "leaves", "precision", "alone CPU", "alone wall",
                   "pair CPU (each)", "pair wall (each)", "pair CPU / alone",
                   "start-up CPU s"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in rows:
        a, p = r["alone"], r["pair"]
        table.add_row(
            str(r["simulations"]), str(r["threads"] or "default"), str(r["leaves"]),
            r["precision"], f"{a['cpu_ms']:.0f}", f"{a['wall_ms']:.0f}",
            " / ".join(f"{x['cpu_ms']:.0f}" for x in p),
            " / ".join(f"{x['wall_ms']:.0f}" for x in p),
            f"{r['pair_cpu_ratio']:.2f}", f"{a['start_cpu_s']:.1f}",
        )  # fmt: skip
    console.print(table)
    h2h = None
    if args.h2h_games:
        if args.model is None:
            raise SystemExit("bench/genmove.py: --h2h-games needs a trained --model")
        few, many = min(_ints(args.leaves)), max(_ints(args.leaves))
        h2h = head_to_head(args.model, args.h2h_simulations, (few, many), args.h2h_games)
        gap = "—" if h2h["elo_gap"] is None else f"{h2h['elo_gap']:+.0f}"
        console.print(
            f"{many} leaves a batch against {few}, {h2h['simulations']} simulations each, "
            f"{h2h['games']} games: {h2h['score']:.0%} [{h2h['low']:.0%}, {h2h['high']:.0%}] "
            f"for {many}, Elo gap {gap}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"moves": args.moves, "model": str(args.model) if args.model else None,
                   "rows": rows, "head_to_head": h2h}  # fmt: skip
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
