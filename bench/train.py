"""Training throughput: Lightning's fit loop vs a hand-written PyTorch loop, and the data path.

Usage: ``python -m bench.train [--json PATH] [--steps S] [--rounds R] [--bf16] [--threads T]
[--device auto|cpu|cuda] [--board N --blocks B --filters F]``

1. Loops. The same network (quick start: 9x9, 4 blocks x 32 filters), batch (256), precision
   and pre-built batches, the same loss (``model.system.alphago_zero_loss``: value + policy +
   explicit L2), SGD with momentum, the learning rate set each step from the run-wide schedule,
   and the same logging work every ``LOG_EVERY_N_STEPS`` steps (loss means, grad norm). Lightning
   runs the way ``tasks.train`` runs it: no progress bar, no model summary, no sanity check, no
   checkpointing during the timed epoch, metrics flushed every n steps. Steps/s after a warm-up;
   goal: Lightning >= 0.95x the hand loop.
2. Data path. ``ShardDataModule`` batches (sample, unpack bits, random symmetry of planes and pi)
   per second vs the samples per second training consumes; goal >= 5x.

The two loops run interleaved step by step (a hand-loop step runs inside Lightning's batch-end
hook and is subtracted from Lightning's step), so load from other processes hits both alike;
a Lightning step spans batch start to next batch start (fetch, hooks, metric flushes included).
Rates come from the median step; the ratio is also given on the fastest 10% of steps. Figures
are ratios measured in the same run; nothing here asserts on time.

``--device cuda`` trains both loops on the GPU (batches are moved there per step, as Lightning
moves them; the clock waits for the GPU at every step boundary, so a step's time is its own);
``--board/--blocks/--filters`` change the network's shape (e.g. 19, 20, 256: the paper's).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from rich.console import Console
from rich.table import Table
from torch.utils.data import DataLoader

from model.datamodule import ShardDataModule, load_window, synthetic_records
from model.network import NetworkShape, PolicyValueNet
from model.shards import write_shard
from model.system import (
    LOG_EVERY_N_STEPS,
    AlphaZeroSystem,
    Objective,
    alphago_zero_loss,
    lr_at,
)

HIDDEN = 256
SCHEDULE = ([570, 860], [1e-2, 1e-3, 1e-4])  # the quick-start preset
MOMENTUM, C = 0.9, 1e-4

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*treespec.*")


@dataclass(frozen=True)
class Shape:
    """The network trained, and where: the quick start's 9x9 4x32 by default."""

    board: int = 9
    blocks: int = 4
    filters: int = 32
    device: str = "cpu"


def _sync(device: str) -> None:
    if device == "cuda":  # a step's clock stops when its kernels are done, not when queued
        torch.cuda.synchronize()


def _net(shape: Shape) -> PolicyValueNet:
    torch.manual_seed(0)  # channels_last as AlphaZeroSystem does by default
    net = PolicyValueNet(NetworkShape(shape.board, shape.blocks, shape.filters, HIDDEN))
    return net.to(shape.device, memory_format=torch.channels_last)


def hand_steps(batches: list, bf16: bool, shape: Shape) -> Iterator[None]:
    """A plain PyTorch loop doing what AlphaZeroSystem does; yields after every step."""
    net = _net(shape).train()
    params = list(net.parameters())
    opt = torch.optim.SGD(params, lr=SCHEDULE[1][0], momentum=MOMENTUM, weight_decay=0.0)
    sums, count = torch.zeros(3, device=shape.device), 0
    for step, (planes, pi, z) in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, *SCHEDULE)
        planes, pi, z = (t.to(shape.device, non_blocking=True) for t in (planes, pi, z))
        with torch.autocast(shape.device, dtype=torch.bfloat16, enabled=bf16):
            logits, value = net(planes.float().contiguous(memory_format=torch.channels_last))
            terms = alphago_zero_loss(logits, value, pi, z, params, C)
            loss = terms[0] + terms[1] + terms[2]
        sums += torch.stack(terms).detach()
        count += 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if (step + 1) % LOG_EVERY_N_STEPS == 0:  # the same logging work as the module
            float(torch.nn.utils.get_total_norm([p.grad for p in params]))
            (sums / count).tolist()
            sums.zero_()
            count = 0
        opt.step()
        yield


class _Paired(pl.Callback):
    """Runs one hand-loop step at the end of every Lightning step, timing both.

    Lightning's step i lasts from its batch start to the next batch start (fetch, hooks and
    metric flushes included) minus the embedded hand step, so both loops run under the same load.
    """

    def __init__(self, hand: Iterator[None], device: str) -> None:
        self.hand = hand
        self.device = device
        self.starts: list[float] = []
        self.hand_s: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        _sync(self.device)
        self.starts.append(time.perf_counter())

    def on_train_batch_end(self, *args: Any) -> None:
        _sync(self.device)
        t0 = time.perf_counter()
        next(self.hand)
        _sync(self.device)
        self.hand_s.append(time.perf_counter() - t0)

    def on_train_epoch_end(self, *args: Any) -> None:
        _sync(self.device)
        self.starts.append(time.perf_counter())

    def lightning_s(self) -> list[float]:
        spans = [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]
        return [span - h for span, h in zip(spans, self.hand_s, strict=True)]


class _DiscardLogger(pl.loggers.Logger):
    """Receives Lightning's metric flushes (so that path is timed) and drops them."""

    name, version = "discard", "0"

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        pass

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def paired_loops(
    batches: list, warm: int, bf16: bool, shape: Shape
) -> tuple[list[float], list[float]]:
    """Per-step seconds (hand loop, Lightning fit) after ``warm`` steps, interleaved step by
    step; Lightning is configured as ``tasks.train`` configures it."""
    torch.manual_seed(0)
    system = AlphaZeroSystem(
        NetworkShape(shape.board, shape.blocks, shape.filters, HIDDEN),
        Objective(
            lr_boundaries=tuple(SCHEDULE[0]),
            lr_values=tuple(SCHEDULE[1]),
            momentum=MOMENTUM,
            weight_decay=C,
        ),
        log_every_n_steps=LOG_EVERY_N_STEPS,
    )
    paired = _Paired(hand_steps(batches, bf16, shape), shape.device)
    trainer = pl.Trainer(
        accelerator=shape.device,
        devices=1,
        max_epochs=1,
        precision="bf16-mixed" if bf16 else "32-true",
        deterministic=True,
        logger=_DiscardLogger(),
        callbacks=[paired],
        log_every_n_steps=LOG_EVERY_N_STEPS,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(system, train_dataloaders=DataLoader(batches, batch_size=None))
    return paired.hand_s[warm:], paired.lightning_s()[warm:]


def data_path(dm: ShardDataModule) -> list[float]:
    """Per-batch seconds of the DataModule's loader (one full pass, after a warm-up batch)."""
    for _ in dm.train_dataloader():  # numba compile / page-in
        break
    stamps = [time.perf_counter()]
    for _ in dm.train_dataloader():
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def _data(tmp: Path, board: int, batch: int, steps: int) -> ShardDataModule:
    for w in range(4):  # 4 shards x 100 games x 60 positions: 24k positions
        write_shard(tmp / f"worker-{w}.parquet", synthetic_records(board, 100, 60, seed=w))
    return ShardDataModule(load_window([tmp], board), batch, steps, seed=0)


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "CPU"


def _stats(seconds: list[float]) -> dict[str, float]:
    q = statistics.quantiles(seconds, n=10)
    return {"median_s": statistics.median(seconds), "p10_s": q[0], "steps": len(seconds)}


def run(steps: int, rounds: int, bf16: bool, batch: int, shape: Shape) -> dict[str, Any]:
    warm = max(5, steps // 10)
    with tempfile.TemporaryDirectory() as tmp:
        dm = _data(Path(tmp), shape.board, batch, steps + warm)
        batches = list(dm.train_dataloader())  # the same batches for both loops
        torch.use_deterministic_algorithms(True)
        times: dict[str, list[float]] = {"hand": [], "lightning": [], "data": []}
        for _ in range(rounds):
            hand, light = paired_loops(batches, warm, bf16, shape)
            times["hand"] += hand
            times["lightning"] += light
            times["data"] += data_path(dm)
    st = {k: _stats(v) for k, v in times.items()}
    hand, light, data = st["hand"], st["lightning"], st["data"]
    return {
        "config": {
            "board_size": shape.board,
            "blocks": shape.blocks,
            "filters": shape.filters,
            "device": shape.device,
            "device_name": _device_name(shape.device),
            "batch": batch,
            "precision": "bf16-mixed" if bf16 else "fp32",
            "channels_last": True,
            "steps": steps,
            "warmup": warm,
            "rounds": rounds,
            "torch_threads": torch.get_num_threads(),
            "torch": str(torch.__version__),
            "lightning": pl.__version__,
        },
        "hand_loop_steps_per_s": 1 / hand["median_s"],
        "lightning_steps_per_s": 1 / light["median_s"],
        "training_samples_per_s": batch / light["median_s"],
        "data_path_samples_per_s": batch / data["median_s"],
        "lightning_vs_hand": hand["median_s"] / light["median_s"],
        "lightning_vs_hand_p10": hand["p10_s"] / light["p10_s"],
        "data_vs_training": light["median_s"] / data["median_s"],
        "goals": {"lightning_vs_hand": 0.95, "data_vs_training": 5.0},
        "per_step": st,
    }


def show(result: dict[str, Any]) -> None:
    c = result["config"]
    table = Table(
        title=f"training, {c['board_size']}x{c['board_size']} {c['blocks']}x"
        f"{c['filters']}, batch {c['batch']}, {c['precision']}, {c['device_name']}, "
        f"{c['torch_threads']} threads (median step of {c['rounds']} rounds)"
    )
    for col in ("path", "steps/s", "samples/s", "ratio", "ratio, fastest 10%", "goal"):
        table.add_column(col, justify="left" if col == "path" else "right")
    b = c["batch"]
    hand, light = result["hand_loop_steps_per_s"], result["lightning_steps_per_s"]
    table.add_row("PyTorch loop", f"{hand:.2f}", f"{hand * b:,.0f}", "1.00", "1.00", "")
    table.add_row(
        "Lightning fit",
        f"{light:.2f}",
        f"{result['training_samples_per_s']:,.0f}",
        f"{result['lightning_vs_hand']:.2f}",
        f"{result['lightning_vs_hand_p10']:.2f}",
        ">= 0.95",
    )
    table.add_row(
        "data path",
        "",
        f"{result['data_path_samples_per_s']:,.0f}",
        f"{result['data_vs_training']:.0f}x",
        "",
        ">= 5x training",
    )
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.train", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per loop and round")
    parser.add_argument("--rounds", type=int, default=3, help="fits, each with fresh networks")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast in both loops")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="auto: CUDA if present")  # fmt: skip
    parser.add_argument("--board", type=int, default=9)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--filters", type=int, default=32)
    args = parser.parse_args()
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if device == "cuda":  # deterministic cuBLAS, as torch.use_deterministic_algorithms asks
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(args.threads)
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)  # no per-fit banners
    shape = Shape(args.board, args.blocks, args.filters, device)
    result = run(args.steps, args.rounds, args.bf16, args.batch, shape)
    show(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
