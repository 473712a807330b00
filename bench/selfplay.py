"""Self-play throughput against the network alone and against a one-leaf-at-a-time search.

Usage: ``python -m bench.selfplay [--json PATH] [--seconds S] [--rounds R] [--threads T]
[--device auto|cpu|cuda] [--configs quick,19x19,puct,gumbel,caps,paper]``

For the 9x9 quick start (configs/quickstart.yaml: since it took the laptop preset, the Gumbel
search with playout caps at 0.25) and a small 19x19 net (4x32, the paper's PUCT search) by
default, and each of the laptop preset's search options alone when asked (``puct``: the paper's
search, every move in full, as the quick start was before; ``gumbel``: the Gumbel search, every
move in full; ``caps``: PUCT with playout caps at 0.25; ``paper``: the paper's 19x19 network, 19
residual blocks of 256 filters, for a GPU), in one run:

- (a) the network alone: positions/s of `model.evaluator.Evaluator` at the batch size
  self-play uses (``concurrent_games * leaves_per_game``, capped by ``batch_size``);
- (b) self-play (`tabula.selfplay.play_games`): network evaluations/s as the workers run it
  (no ``overlap``), and with ``overlap`` (the network on one half of the games in a second
  thread while the tree works on the other; it pays only with cores to spare);
- (c) a sequential one-game MCTS with the same network and one leaf per network call (what
  most single-machine AlphaZero code does);
- (t) the search alone, with a free uniform evaluator: what the tree and rules cost per leaf.

Goals (the self-play issue): (b)/(a) >= 0.85 and (b)/(c) >= 10. Measurements alternate in
``--rounds`` rounds of ``--seconds`` each, so load from other processes hits every path alike:
rates are the medians over rounds, and each ratio is the median over rounds of the two rates
measured in the same round (paired, so a slow stretch of the machine slows both sides).
Rates are wall-clock; the ratio of process-CPU rates of (b) and (a) is also shown: on a
shared machine it is the steadier estimate of what an idle one would give (CPU time is not
inflated by waiting), and "net share" is the part of (b)'s CPU time spent inside the network
call: the rest is the tree, the rules and the game loop, the cost the (b)/(a) goal bounds.
Then the tree memory of 256 concurrent 19x19 games at 800 simulations (RSS growth after
allocating and touching every array). Prints a table, writes the same figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from model.evaluator import Evaluator
from model.network import network_for
from tabula.config import Config, load_config
from tabula.features import NUM_PLANES
from tabula.mcts import BatchedMCTS, SearchParams
from tabula.selfplay import SelfPlayParams, play_games

ROOT = Path(__file__).resolve().parents[1]


class _TimeUp(Exception):
    """Raised by the counting evaluator when a measurement's time is over."""


class Counting:
    """Wraps an evaluator: counts positions and the process CPU time spent inside it until
    ``deadline``, then stops the caller."""

    def __init__(self, evaluate) -> None:
        self.evaluate, self.positions, self.deadline = evaluate, 0, float("inf")
        self.cpu = 0.0

    def __call__(self, planes, rng=None):
        if time.perf_counter() > self.deadline:
            raise _TimeUp
        start = time.process_time()
        out = self.evaluate(planes, rng)
        self.cpu += time.process_time() - start
        self.positions += len(planes)
        return out


def uniform(planes, rng=None):
    B, M = planes.shape[0], planes.shape[2] * planes.shape[3]
    return np.full((B, M + 1), 1.0 / (M + 1), np.float32), np.zeros(B, np.float32)


class Clock:
    """Wall and process CPU time since creation; ``rates(n)`` = n per second of each."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def elapsed(self) -> float:
        return time.perf_counter() - self.wall

    def rates(self, n: int) -> tuple[float, float]:
        return n / self.elapsed(), n / max(time.process_time() - self.cpu, 1e-9)


def network_alone(evaluate, N: int, batch: int, seconds: float) -> tuple[float, float]:
    planes = (np.random.default_rng(0).random((batch, NUM_PLANES, N, N)) < 0.3).astype(np.uint8)
    clock, n = Clock(), 0
    while clock.elapsed() < seconds:
        evaluate(planes, None)
        n += batch
    return clock.rates(n)


def selfplay(evaluate, params: SelfPlayParams, seconds: float, overlap: bool, seed: int):
    """(wall rate, CPU rate, share of the CPU time spent in the network: one thread only)."""
    counter = Counting(evaluate)
    clock = Clock()
    counter.deadline = clock.wall + seconds
    try:
        for _ in play_games(counter, params, 10**6, np.random.default_rng(seed), overlap=overlap):
            pass
    except _TimeUp:
        pass
    share = counter.cpu / max(time.process_time() - clock.cpu, 1e-9)
    return (*clock.rates(counter.positions), share)


def sequential(evaluate, params: SelfPlayParams, seconds: float, seed: int):
    """One game, one leaf per network call, tree reuse, tau = 1 (moves do not matter here)."""
    search = SearchParams(params.search.config, noise=params.search.noise, leaves_per_game=1)
    m = BatchedMCTS(1, params.board_size, params.komi, search)
    rng = np.random.default_rng(seed)
    m.reset(0, rng)
    clock = Clock()
    while clock.elapsed() < seconds:
        if m.is_over(0):
            m.reset(0, rng)
        m.search([0], evaluate)
        m.play(0, m.choose_move(0, 1.0))
    return clock.rates(m.evaluations)


def bench_config(name: str, cfg: Config, seconds: float, rounds: int, device: str) -> dict:
    N = cfg.rules.board_size
    params = SelfPlayParams.from_config(cfg)
    L = params.search.config.leaves_per_game
    batch = min(params.batch_size, params.concurrent_games * L)
    net = network_for(cfg, seed=0)
    evaluate = Evaluator(net, device=device)
    # Warm up: numba compile or cache load, torch's first calls at each batch shape (oneDNN
    # builds its kernels per shape; a first call costs milliseconds).
    network_alone(evaluate, N, batch, 1.0)
    selfplay(evaluate, params, 3.0, True, 0)
    selfplay(evaluate, params, 3.0, False, 0)
    sequential(evaluate, params, 1.0, 0)
    runs: dict[str, list[tuple[float, ...]]] = {k: [] for k in ("a", "b", "b2", "c", "t")}
    for r in range(rounds):
        runs["a"].append(network_alone(evaluate, N, batch, seconds))
        runs["b"].append(selfplay(evaluate, params, seconds, False, r))
        runs["b2"].append(selfplay(evaluate, params, seconds, True, r))
        runs["c"].append(sequential(evaluate, params, seconds, r))
        runs["t"].append(selfplay(uniform, params, seconds / 2, False, r))
    wall = {k: statistics.median(x[0] for x in v) for k, v in runs.items()}
    cpu = {k: statistics.median(x[1] for x in v) for k, v in runs.items()}
    share = statistics.median(x[2] for x in runs["b"])

    def ratio(top: str, bottom: str, i: int = 0) -> float:
        """The median over rounds of top / bottom measured in the same round (paired)."""
        return statistics.median(x[i] / y[i] for x, y in zip(runs[top], runs[bottom], strict=True))

    return {
        "name": name,
        "device": str(evaluate.device),
        "precision": "bf16" if evaluate.bf16 else "fp32",
        "board_size": N,
        "network": f"{cfg.network.blocks}x{cfg.network.filters}",
        "batch": batch,
        "simulations": params.search.simulations,
        "concurrent_games": params.concurrent_games,
        "leaves_per_game": L,
        "network_positions_per_s": wall["a"],
        "selfplay_evals_per_s": wall["b"],
        "selfplay_overlap_evals_per_s": wall["b2"],
        "sequential_evals_per_s": wall["c"],
        "search_alone_evals_per_s": wall["t"],
        "tree_us_per_leaf": 1e6 / wall["t"],
        "tree_cpu_us_per_leaf": 1e6 / cpu["t"],
        "ratio_b_over_a": ratio("b", "a"),
        "ratio_b_over_a_cpu": ratio("b", "a", 1),
        "ratio_b_overlap_over_a": ratio("b2", "a"),
        "network_share_of_selfplay_cpu": share,
        "ratio_b_over_c": ratio("b", "c"),
        "ratio_a_over_c": ratio("a", "c"),
        "rounds": runs,
    }


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def tree_memory(games: int = 256, N: int = 19, simulations: int = 800) -> dict:
    """RSS growth from allocating and touching the trees of ``games`` games."""
    before = _rss()
    m = BatchedMCTS(games, N, 7.5, SearchParams(algorithm="puct", simulations=simulations))
    for array in m.trees:
        array.fill(1)
    grown = _rss() - before
    nbytes = sum(a.nbytes for a in m.trees)
    del m
    return {"games": games, "board_size": N, "simulations": simulations,
            "rss_bytes": grown, "array_bytes": nbytes}  # fmt: skip


#: The paper's search: PUCT, every move searched in full (the quick start before it took the laptop
#: preset).
PUCT, FULL_SEARCH = "search.algorithm=puct", "selfplay.full_search_fraction=1.0"
PAPER_SEARCH = (PUCT, FULL_SEARCH)
#: Benchmarked configs: the quick start and each search option alone (docs/benchmarks.md: self-play
#: must keep >= 0.85 of the network's speed under each), name and overrides of
#: configs/quickstart.yaml.
CONFIGS = {
    "quick": ("9x9 quick start (Gumbel, playout caps 0.25)", ()),
    "19x19": ("19x19 4x32 (PUCT)", ("rules.board_size=19", *PAPER_SEARCH)),
    "puct": ("9x9 PUCT", PAPER_SEARCH),
    "gumbel": ("9x9 Gumbel search", ("search.algorithm=gumbel", FULL_SEARCH)),
    "caps": ("9x9 PUCT, playout caps", (PUCT, "selfplay.full_search_fraction=0.25")),
    "paper": (
        "19x19 19x256 (the paper's network, PUCT, 8 leaves)",
        (
            "rules.board_size=19",
            "network.blocks=19",
            "network.filters=256",
            "network.value_hidden=256",
            "network.aux_heads=false",
            *PAPER_SEARCH,
            "search.leaves_per_game=8",
            "selfplay.batch_size=512",
        ),
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.selfplay", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda")
    parser.add_argument(
        "--configs", default="quick,19x19", help=f"comma-separated, of {', '.join(CONFIGS)}"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.configs.split(",")) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown config {unknown[0]!r} (known: {', '.join(CONFIGS)})")
    torch.set_num_threads(args.threads)
    results = []
    for key in args.configs.split(","):
        name, overrides = CONFIGS[key]
        cfg = load_config(ROOT / "configs" / "quickstart.yaml", list(overrides))
        results.append(bench_config(name, cfg, args.seconds, args.rounds, args.device))
    memory = tree_memory()
    _print(results, memory)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"configs": results, "tree_memory": memory, "threads": args.threads,
                   "seconds": args.seconds, "rounds": args.rounds}  # fmt: skip
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


def _print(results: list[dict], memory: dict) -> None:
    table = Table(title="self-play throughput (median of rounds; ratios paired by round)")
    for col in ("config", "batch", "(a) network pos/s", "(b) self-play evals/s",
                "(b) overlap", "(c) sequential", "(t) tree alone", "tree cpu us/leaf",
                "(b)/(a)", "(b)/(a) cpu", "net share", "(b)/(c)", "(a)/(c)"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            f"{r['name']} ({r['device']}, {r['precision']})", str(r["batch"]),
            f"{r['network_positions_per_s']:.0f}",
            f"{r['selfplay_evals_per_s']:.0f}", f"{r['selfplay_overlap_evals_per_s']:.0f}",
            f"{r['sequential_evals_per_s']:.0f}", f"{r['search_alone_evals_per_s']:.0f}",
            f"{r['tree_cpu_us_per_leaf']:.1f}", f"{r['ratio_b_over_a']:.2f}",
            f"{r['ratio_b_over_a_cpu']:.2f}",
            f"{r['network_share_of_selfplay_cpu']:.2f}", f"{r['ratio_b_over_c']:.1f}",
            f"{r['ratio_a_over_c']:.1f}",
        )  # fmt: skip
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)
    console.print(
        f"tree memory, {memory['games']} games {memory['board_size']}x{memory['board_size']} "
        f"at {memory['simulations']} simulations: RSS +{memory['rss_bytes'] / 2**30:.2f} GiB "
        f"(arrays {memory['array_bytes'] / 2**30:.2f} GiB)"
    )
    console.print(
        "goals: (b)/(a) >= 0.85, (b)/(c) >= 10; (a)/(c) is what (b)/(c) would be with a free "
        "search (the network's own batching gain)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
