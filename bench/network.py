"""Network-alone inference throughput: positions/s for each execution path, ratios to eager fp32.

Usage: ``python -m bench.network [--json PATH] [--rounds R] [--seconds S] [--no-compile]
[--checkpoint MODEL]``

Two shapes: the 9x9 6-block 64-filter net at batch 128 and the quick-start 9x9 4x32 net at batch
256. Paths: eager fp32, channels_last fp32, bf16 autocast + channels_last, torch.compile + bf16 (the
four first measured), and what ``model.evaluator.Evaluator`` does: BN folded into the convs +
channels_last (fp32 and compiled), plus the full ``Evaluator`` call with its numpy round trip and
random symmetries. Then the architecture options of the quick-start shape (``ARCHITECTURES``, the
laptop preset) through the ``Evaluator``, side by side, per wall second and per CPU-second of
this process (which a shared machine does not move). Last, int8 against the fp32 path the
Evaluator takes on a CPU without native bf16 (``int8_paths``, an option not built: PyTorch's x86
quantized engine, static, FX graph mode; the convolutions in int8, the heads' fully connected
layers fp32), for the laptop preset's network or ``--checkpoint``'s, with how far int8's outputs
lie from fp32's on positions of the network's own games (``int8_agreement``). Paths are timed in
interleaved rounds and the median is reported, so load from other processes hits every path
alike. Compile times are reported beside the throughput.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from torch import nn

from bench.provenance import commit, machine
from model.checkpoint import load_checkpoint
from model.evaluator import Evaluator
from model.network import NetworkShape, PolicyValueNet, fold_batch_norm, make_network
from tabula.features import NUM_PLANES
from tabula.go.game import Game
from tabula.inputs import with_inputs

SHAPES = [  # (name, N, blocks, filters, batch)
    ("9x9 6x64 b128", 9, 6, 64, 128),
    ("9x9 4x32 b256 (quick start)", 9, 4, 32, 256),
]


def _autocast(fn: Callable, x: torch.Tensor) -> Callable[[], object]:
    def run() -> object:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fn(x)

    return run


def build_paths(n: int, blocks: int, filters: int, batch: int, compile_: bool) -> dict:
    """name -> (zero-argument callable doing one batch, compile seconds or None)."""
    net = make_network(n, blocks, filters, seed=0).eval()
    noise = torch.rand(batch, NUM_PLANES, n, n, generator=torch.Generator().manual_seed(0))
    x = (noise < 0.3).float()
    cl = copy.deepcopy(net).to(memory_format=torch.channels_last)
    xc = x.contiguous(memory_format=torch.channels_last)
    folded = fold_batch_norm(net).to(memory_format=torch.channels_last)
    paths: dict[str, tuple[Callable[[], object], float | None]] = {
        "eager fp32": (lambda: net(x), None),
        "channels_last fp32": (lambda: cl(xc), None),
        "bf16 autocast + channels_last": (_autocast(cl, xc), None),
        "BN folded + channels_last fp32": (lambda: folded(xc), None),
    }
    if compile_:
        for name, module, bf16 in (
            ("torch.compile + bf16", cl, True),
            ("torch.compile BN folded fp32", folded, False),
        ):
            fn = torch.compile(copy.deepcopy(module), dynamic=False)
            run = _autocast(fn, xc) if bf16 else (lambda fn=fn: fn(xc))
            t0 = time.perf_counter()
            with torch.inference_mode():
                run()
            paths[name] = (run, time.perf_counter() - t0)
    planes = (np.random.default_rng(0).random((batch, NUM_PLANES, n, n)) < 0.3).astype(np.uint8)
    ev = Evaluator(net, device="cpu", precision="auto", compile=False)
    rng = np.random.default_rng(1)
    paths["Evaluator(auto) incl. numpy + symmetries"] = (lambda: ev(planes, rng), None)
    return paths


def measure(
    paths: dict, batch: int, rounds: int, seconds: float, cpu: dict[str, float] | None = None
) -> dict[str, float]:
    """Median positions/s per path over ``rounds`` interleaved rounds of ~``seconds`` each;
    with ``cpu``, also the median positions per CPU-second of this process into it (what
    other processes on a shared machine cannot move, unlike the wall rate)."""
    rates: dict[str, list[float]] = {name: [] for name in paths}
    per_cpu: dict[str, list[float]] = {name: [] for name in paths}
    with torch.inference_mode():
        for run, _ in paths.values():  # warm-up: allocator, oneDNN primitive caches
            for _ in range(3):
                run()
        for _ in range(rounds):
            for name, (run, _) in paths.items():
                t0, c0, calls = time.perf_counter(), time.process_time(), 0
                while (elapsed := time.perf_counter() - t0) < seconds:
                    run()
                    calls += 1
                rates[name].append(calls * batch / elapsed)
                per_cpu[name].append(calls * batch / max(time.process_time() - c0, 1e-9))
    if cpu is not None:
        cpu.update({name: statistics.median(r) for name, r in per_cpu.items()})
    return {name: statistics.median(r) for name, r in rates.items()}


# Architecture options of the quick-start shape (docs/benchmarks.md), each through the Evaluator
# as self-play calls it, timed side by side in interleaved rounds: (name, make_network kwargs).
ARCHITECTURES = [
    ("4x32 (quick start)", {}),
    ("4x32 + global pooling (KataGo)", {"global_pooling": True}),
    ("4x32 + liberty planes (KataGo)", {"liberties": True}),  # (derived in the call)
]


def architecture_paths(batch: int = 256) -> dict:
    """name -> (one Evaluator call at ``batch`` on random planes, None) per architecture."""
    planes = (np.random.default_rng(0).random((batch, NUM_PLANES, 9, 9)) < 0.3).astype(np.uint8)
    paths = {}
    for name, options in ARCHITECTURES:
        ev = Evaluator(make_network(9, 4, 32, seed=0, **options), device="cpu", compile=False)
        paths[name] = ((lambda ev=ev: ev(planes, None)), None)
    return paths


# int8 (module docstring): the layers that stay fp32, and the positions that calibrate the rest.
INT8_FP32_LAYERS = ("policy_fc", "value_fc1", "value_fc2")
INT8_GAMES, INT8_POSITIONS = 16, 1024


class _Traceable(nn.Module):
    """``PolicyValueNet.forward`` without the autocast switch of its value layer, which FX
    cannot trace."""

    def __init__(self, net: PolicyValueNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, logits, v = self.net._body(x)
        return logits, torch.tanh(self.net.value_fc2(v)).squeeze(1)


def own_positions(net: PolicyValueNet, seed: int) -> torch.Tensor:
    """The network's inputs (float, channels_last) at up to ``INT8_POSITIONS`` positions,
    spread evenly over ``INT8_GAMES`` games it plays against itself by sampling its prior over
    the legal moves."""
    rng = np.random.default_rng(seed)
    games = [Game(net.board_size) for _ in range(INT8_GAMES)]
    seen = []
    with torch.inference_mode():
        while live := [g for g in games if not g.is_over()]:
            x = with_inputs(np.stack([g.features() for g in live]), net.shape.inputs)
            seen.append(x)
            prior = torch.softmax(net(torch.from_numpy(x).float())[0], 1).double().numpy()
            for g, p in zip(live, prior, strict=True):
                p = np.where(g.legal_mask(), p, 0.0)
                g.play(int(rng.choice(p.size, p=p / p.sum())))
    planes = np.concatenate(seen)
    keep = np.linspace(0, len(planes) - 1, min(len(planes), INT8_POSITIONS)).astype(int)
    return torch.from_numpy(planes[keep]).float().contiguous(memory_format=torch.channels_last)


def int8_network(net: PolicyValueNet, calibration: torch.Tensor) -> nn.Module:
    """``net`` (BN folded, channels_last) with its convolutions in int8: per-channel symmetric
    weights, per-tensor activations over 7 bits (the x86 engine's ``reduce_range``: without
    VNNI, u8 x s8 pairs sum in int16 and saturate over 8 bits), ranges observed on
    ``calibration``."""
    from torch.ao.quantization import MinMaxObserver, QConfig, QConfigMapping
    from torch.ao.quantization.observer import PerChannelMinMaxObserver
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    with warnings.catch_warnings():  # torch.ao.quantization's deprecation notices
        warnings.simplefilter("ignore", UserWarning)
        torch.backends.quantized.engine = "x86"
        qconfig = QConfig(
            activation=MinMaxObserver.with_args(dtype=torch.quint8, reduce_range=True),
            weight=PerChannelMinMaxObserver.with_args(
                dtype=torch.qint8, qscheme=torch.per_channel_symmetric
            ),
        )
        mapping = QConfigMapping().set_global(qconfig)
        for name in INT8_FP32_LAYERS:
            mapping = mapping.set_module_name(f"net.{name}", None)
        for op in (torch.tanh, "squeeze"):  # the value itself stays fp32
            mapping = mapping.set_object_type(op, None)
        folded = fold_batch_norm(net).to(memory_format=torch.channels_last)
        prepared = prepare_fx(_Traceable(folded), mapping, example_inputs=(calibration[:1],))
        with torch.inference_mode():
            prepared(calibration)
        return convert_fx(prepared)


def int8_paths(net: PolicyValueNet, batch: int = 256) -> tuple[dict, dict[str, float]]:
    """(name -> (one batch, None)) for fp32 and int8, and int8's distance from fp32 on positions
    of the network's own games other than those that calibrated it (`int8_agreement`)."""
    net = net.eval()
    q = int8_network(net, own_positions(net, seed=0))
    x = own_positions(net, seed=1)
    folded = fold_batch_norm(net).to(memory_format=torch.channels_last)
    xb = x[:batch] if len(x) >= batch else x.repeat(batch // len(x) + 1, 1, 1, 1)[:batch]
    paths = {"fp32, BN folded + channels_last": (lambda: folded(xb), None),
             "int8 convolutions, fp32 heads": (lambda: q(xb), None)}  # fmt: skip
    return paths, int8_agreement(folded, q, x)


def int8_agreement(fp32: nn.Module, int8: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """How far int8's outputs lie from fp32's on ``x``: the share of positions whose most
    likely move is the same, the mean KL(fp32 || int8) of the priors, the mean and largest
    |value difference|."""
    with torch.inference_mode():
        (la, va), (lb, vb) = fp32(x), int8(x)
    pa, pb = torch.log_softmax(la.float(), 1), torch.log_softmax(lb.float(), 1)
    return {
        "top1_agreement": float((pa.argmax(1) == pb.argmax(1)).float().mean()),
        "kl": float((pa.exp() * (pa - pb)).sum(1).mean()),
        "value_mae": float((va - vb).abs().mean()),
        "value_max": float((va - vb).abs().max()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.network", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="per path per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile paths")
    ap.add_argument(
        "--checkpoint", type=Path, help="int8 for this model (default: the laptop shape, seeded)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    console = Console()
    results = []
    for label, n, blocks, filters, batch in SHAPES:
        paths = build_paths(n, blocks, filters, batch, not args.no_compile)
        rates = measure(paths, batch, args.rounds, args.seconds)
        base = rates["eager fp32"]
        table = Table(title=f"{label}, {args.threads} threads, median of {args.rounds} rounds")
        for col in ("path", "positions/s", "x eager fp32", "compile s"):
            table.add_column(col, justify="left" if col == "path" else "right")
        for name, rate in rates.items():
            compile_s = paths[name][1]
            table.add_row(
                name,
                f"{rate:,.0f}",
                f"{rate / base:.2f}",
                "" if compile_s is None else f"{compile_s:.1f}",
            )
            results.append(
                {
                    "shape": label,
                    "board_size": n,
                    "blocks": blocks,
                    "filters": filters,
                    "batch": batch,
                    "path": name,
                    "positions_per_s": rate,
                    "ratio_to_eager_fp32": rate / base,
                    "compile_s": compile_s,
                }
            )
        console.print(table)
    cpu: dict[str, float] = {}
    rates = measure(architecture_paths(), 256, args.rounds, args.seconds, cpu)
    first = ARCHITECTURES[0][0]
    base, cpu_base = rates[first], cpu[first]
    table = Table(
        title=f"architectures, 9x9 batch 256 through the Evaluator, {args.threads} threads"
    )
    for col in ("architecture", "positions/s", "x quick start", "per CPU-s", "x quick start"):
        table.add_column(col, justify="left" if col == "architecture" else "right")
    for name, rate in rates.items():
        table.add_row(name, f"{rate:,.0f}", f"{rate / base:.2f}", f"{cpu[name]:,.0f}",
                      f"{cpu[name] / cpu_base:.2f}")  # fmt: skip
        results.append({"shape": "architectures", "path": name, "positions_per_s": rate,
                        "ratio_to_quick_start": rate / base, "positions_per_cpu_s": cpu[name],
                        "cpu_ratio_to_quick_start": cpu[name] / cpu_base})  # fmt: skip
    console.print(table)
    results += _int8_table(console, args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            **commit(Path(__file__).resolve().parents[1]),  # which code, and which CPU:
            **machine(),
            "threads": args.threads,
            "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        }
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")


def _int8_table(console: Console, args: argparse.Namespace) -> list[dict]:
    if args.checkpoint is not None:
        net, _ = load_checkpoint(args.checkpoint)
        label = str(args.checkpoint.name)
    else:
        shape = NetworkShape(9, 4, 32, aux=True, liberties=True, ladders=True)
        net, label = PolicyValueNet(shape), "the laptop preset's 4x32, seeded"
    paths, agreement = int8_paths(net)
    cpu: dict[str, float] = {}
    rates = measure(paths, 256, args.rounds, args.seconds, cpu)
    base = next(iter(cpu.values()))
    table = Table(title=f"int8, {label}, batch 256, {args.threads} threads")
    for col in ("path", "positions/s", "per CPU-s", "x fp32"):
        table.add_column(col, justify="left" if col == "path" else "right")
    for name, rate in rates.items():
        table.add_row(name, f"{rate:,.0f}", f"{cpu[name]:,.0f}", f"{cpu[name] / base:.2f}")
    console.print(table)
    console.print("int8 against fp32 on its own games' positions: " + ", ".join(
        f"{k} {v:.4f}" for k, v in agreement.items()))  # fmt: skip
    return [{"shape": f"int8 ({label})", "path": name, "positions_per_s": rates[name],
             "positions_per_cpu_s": cpu[name], "cpu_ratio_to_fp32": cpu[name] / base,
             **({"agreement": agreement} if "int8" in name else {})} for name in rates]  # fmt: skip


if __name__ == "__main__":
    main()
