"""Batched network inference for search: ``evaluator(planes, rng) -> (priors, values)``.

The contract every search uses (docs/design.md, "Contracts"):

- ``planes``: uint8 or float32 ``[B, 17, N, N]``, the features of ``tabula.features``;
- ``priors``: float32 ``[B, N*N + 1]``, softmax probabilities over all moves (pass last), NOT
  masked: MCTS masks illegal moves and renormalises;
- ``values``: float32 ``[B]`` in [-1, 1], from the side to move.

With ``rng`` each position goes through a dihedral transform d_i "selected uniformly at random"
from the 8 (paper, Methods, "Search algorithm": (d_i(p), v) = f_theta(d_i(s_L))), drawn as
``ks = rng.integers(0, 8, size=B)``, and its policy comes back through the inverse transform.
The permutations come from ``tabula.features`` (one definition for augmentation and search):
transform ``k = 4 * flip + rot`` first rotates by ``rot`` quarter turns counter-clockwise
(``np.rot90`` on the last two axes), then, if ``flip``, mirrors left-right (``np.flip`` on the
last axis). A policy is transformed on its first N*N entries viewed as ``[N, N]``; pass stays.

Speed on the 2-core CPU this was measured on (bench/network.py, 9x9, 6x64, batch 128): folding
BN into the convs and channels_last give ~1.5x over plain eager fp32; bf16 autocast is ~2.5x
SLOWER there because the CPU lacks native bf16 (no AVX512-BF16/AMX), so "auto" takes bf16 only
on CPUs that have it and on CUDA. ``torch.compile`` adds ~1.3x more but costs ~10-30 s per
process plus several seconds per new batch size, which a quick-start self-play worker (~10^5
positions) does not win back, so "auto" leaves it off; pass ``compile=True`` for long workers.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Literal

import numpy as np
import torch

from model.network import PolicyValueNet, fold_batch_norm
from tabula.config import SearchConfig
from tabula.features import (
    NUM_PLANES,
    NUM_SYMMETRIES,
    inverse_symmetry,
    inverse_symmetry_permutations,
    symmetry_permutations,
)
from tabula.inputs import with_inputs
from tabula.mcts.utility import utilities

Precision = Literal["auto", "fp32", "bf16", "fastest"]


class EvaluatorInputError(ValueError):
    """The planes handed to an evaluator have the wrong shape or dtype."""


#: INVERSE[k] is the transform undoing k (tabula.features.inverse_symmetry), for vectorised use.
INVERSE = np.array([inverse_symmetry(k) for k in range(NUM_SYMMETRIES)], dtype=np.int64)


def transform_planes(planes: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """Apply transform ``ks[b]`` to ``planes[b]`` for all b at once: ``[B, C, N, N]`` -> same."""
    b, c, n, _ = planes.shape
    perm = symmetry_permutations(n)[:, : n * n]
    flat = planes.reshape(b, c, n * n)
    return np.take_along_axis(flat, perm[ks][:, None, :], axis=2).reshape(planes.shape)


def transform_policy(pi: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """Apply transform ``ks[b]`` to policy ``pi[b]`` for all b: ``[B, M+1]`` -> same."""
    n = int(round((pi.shape[-1] - 1) ** 0.5))
    return np.take_along_axis(pi, symmetry_permutations(n)[ks], axis=1)


def _cpu_has_native_bf16() -> bool:
    # Without AVX512-BF16 or AMX, oneDNN emulates bf16 and is ~2.5x slower than fp32 here.
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, p, lambda: False)() for p in probes)


def native_bf16(device: str | torch.device = "auto") -> bool:
    """Whether bf16 is the fast precision on ``device`` ("auto": CUDA when present, else
    CPU): CUDA with bf16 support, or a CPU with AVX512-BF16 or AMX. What precision "auto"
    picks, for inference here and for training (`tasks.train`)."""
    return _resolve(device, "auto")[1]


def _resolve(device: str | torch.device, precision: Precision) -> tuple[torch.device, bool]:
    dev = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    )
    if precision not in ("auto", "fp32", "bf16"):
        raise ValueError(f"precision must be 'auto', 'fp32' or 'bf16', got {precision!r}")
    if precision == "auto":
        if dev.type == "cuda":
            use_bf16 = torch.cuda.is_bf16_supported()
        else:
            use_bf16 = dev.type == "cpu" and _cpu_has_native_bf16()
    else:
        use_bf16 = precision == "bf16"
    return dev, use_bf16


def fastest_precision(evaluator: Evaluator, batch: int, repeats: int = 12) -> str:
    """ "bf16" or "fp32": whichever evaluates ``batch`` positions in less of this process's CPU
    time on this machine (the median of ``repeats`` calls each, after a warm-up call)."""
    planes = np.zeros((batch, NUM_PLANES, evaluator.board_size, evaluator.board_size), np.uint8)
    was, cost = evaluator.bf16, {}
    try:
        for name, bf16 in (("fp32", False), ("bf16", True)):
            evaluator.bf16 = bf16
            evaluator(planes)
            times = []
            for _ in range(repeats):
                started = time.process_time()
                evaluator(planes)
                times.append(time.process_time() - started)
            cost[name] = float(np.median(times))
    finally:
        evaluator.bf16 = was
    return min(cost, key=cost.__getitem__)


def _bucket(b: int) -> int:
    """Batch size a compiled graph runs at: the next power of two (>= 16), so a worker sees a
    handful of shapes and recompiles rarely (each costs seconds)."""
    return max(16, 1 << (b - 1).bit_length())


class Evaluator:
    """Batched inference with a private, eval-mode, BN-folded copy of a ``PolicyValueNet``.

    ``device``: "auto" (CUDA when available, else CPU) or a torch device. ``precision``: "fp32",
    "bf16" (autocast), "auto" (bf16 on CUDA and on CPUs with native bf16, else fp32) or
    "fastest" (on a CPU with native bf16, whichever of the two `fastest_precision` measures
    faster at the batch size ``batch``; else as "auto"): native bf16 is not always the faster
    at the small batches of one game's search. "fastest" is chosen by timing, so it is for
    players whose games are not recorded for replay (a GTP engine), never for self-play.
    ``compile``: ``torch.compile`` the network (inputs padded to power-of-two batches); "auto" is
    False (see the module docstring for the numbers). ``score_utility``, ``score_scale``: the
    values are the search's utility, the value with the score head's share
    (`tabula.mcts.utility`, ``search.score_utility``; ``score_scale`` in points per line); a
    network without the score head gives its value alone (`score_utility` then reads 0). Call it
    as described in the module docstring. Not thread-safe: one evaluator per worker thread.
    """

    def __init__(
        self,
        net: PolicyValueNet,
        device: str | torch.device = "auto",
        precision: Precision = "auto",
        compile: bool | Literal["auto"] = "auto",
        batch: int = 16,
        score_utility: float = 0.0,
        score_scale: float = 2.0,
    ) -> None:
        if compile not in (True, False, "auto"):
            raise ValueError(f"compile must be True, False or 'auto', got {compile!r}")
        if score_utility < 0 or score_scale <= 0:
            raise ValueError(
                f"score_utility must be >= 0 and score_scale > 0, got {score_utility},"
                f" {score_scale}"
            )
        self.device, self.bf16 = _resolve(device, "auto" if precision == "fastest" else precision)
        self.board_size = net.board_size
        self.score_utility = float(score_utility) if net.aux else 0.0
        self._score_points = float(score_scale) * net.board_size
        self.compiled = compile is True  # "auto" -> off: see the module docstring
        self._net = fold_batch_norm(net).to(self.device)
        self._net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self._forward = torch.compile(self._net, dynamic=False) if self.compiled else self._net
        inv = np.array(inverse_symmetry_permutations(self.board_size))  # writable copy for torch
        self._inverse_perm = torch.from_numpy(inv).to(self.device)
        if precision == "fastest" and self.bf16 and self.device.type == "cpu":
            self.bf16 = fastest_precision(self, batch) == "bf16"

    @classmethod
    def for_search(cls, net: PolicyValueNet, search: SearchConfig, **options: Any) -> Evaluator:
        """An evaluator whose values are what ``search`` values positions by (its
        ``score_utility`` and ``score_scale``); ``options``: the constructor's others."""
        return cls(
            net, score_utility=search.score_utility, score_scale=search.score_scale, **options
        )

    def __call__(
        self, planes: np.ndarray, rng: np.random.Generator | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        n = self.board_size
        planes = np.asarray(planes)
        if planes.ndim != 4 or planes.shape[1:] != (NUM_PLANES, n, n):
            raise EvaluatorInputError(
                f"planes must have shape [B, {NUM_PLANES}, {n}, {n}], got {planes.shape}"
            )
        if planes.dtype not in (np.uint8, np.float32, np.bool_):
            raise EvaluatorInputError(f"planes must be uint8 or float32, got {planes.dtype}")
        b = planes.shape[0]
        if b == 0:
            return np.zeros((0, n * n + 1), np.float32), np.zeros(0, np.float32)
        ks: np.ndarray | None = None
        if rng is not None:
            ks = np.asarray(rng.integers(0, NUM_SYMMETRIES, size=b), dtype=np.int64)
            planes = transform_planes(planes, ks)
        with torch.inference_mode():
            logits, values, scores = self._run(planes)
            priors = torch.softmax(logits.float(), dim=1)
            if ks is not None:
                # The net saw d_k(s); d_k^-1 brings its policy back to the board as given.
                idx = self._inverse_perm[torch.from_numpy(ks).to(self.device)]
                priors = torch.gather(priors, 1, idx)
            values = values.float().clamp_(-1.0, 1.0).cpu().numpy()
            if scores is not None:
                # The score head predicts the margin divided by N*N (`model.system.auxiliary_loss`).
                points = scores.float().cpu().numpy() * (n * n)
                values = utilities(values, points, self.score_utility, self._score_points)
            return priors.cpu().numpy(), values

    @property
    def has_aux(self) -> bool:
        """Whether the network has the ownership and score heads (`evaluate_aux`)."""
        return bool(self._net.aux)

    def evaluate_aux(
        self, planes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The four heads for analysis (`tabula.mcts.analysis.EvaluateAux`), no transform:
        ``(priors, values)`` as ``__call__`` gives them, then ownership float32[B, N*N] in
        [-1, 1] (+1: the side to move's) and score float32[B], the final score margin (komi
        included) the side to move expects, in points. Eager, whatever ``compile`` says (an
        analysis is not the hot path). ValueError for a network without the heads
        (``has_aux``)."""
        if not self.has_aux:
            raise ValueError("this network has no ownership and score heads")
        n = self.board_size
        planes = np.asarray(planes)
        if planes.ndim != 4 or planes.shape[1:] != (NUM_PLANES, n, n):
            raise EvaluatorInputError(
                f"planes must have shape [B, {NUM_PLANES}, {n}, {n}], got {planes.shape}"
            )
        x = torch.from_numpy(self._inputs(planes)).to(self.device)
        x = x.to(torch.float32).contiguous(memory_format=torch.channels_last)
        bf16 = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)
        with torch.inference_mode():
            with bf16:
                logits, values, ownership, score = self._net.forward_aux(x)
            priors = torch.softmax(logits.float(), dim=1)
            # The score head predicts the margin divided by N*N (`model.system.auxiliary_loss`).
            values, score = values.float().clamp(-1.0, 1.0), score.float() * (n * n)
            outputs = (priors, values, ownership.float().clamp(-1.0, 1.0), score)
            return tuple(t.cpu().numpy() for t in outputs)  # type: ignore[return-value]

    def _inputs(self, planes: np.ndarray) -> np.ndarray:
        """What the network takes: the 17 planes, and the planes derived from them that it
        has (`tabula.inputs.with_inputs`)."""
        return with_inputs(planes, self._net.shape.inputs)  # (the callers give 17 planes)

    def _run(self, planes: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(logits, values, scores) of the batch; scores only under a score utility (the
        network's score head, margin / N*N), evaluated eagerly."""
        b = planes.shape[0]
        x = torch.from_numpy(self._inputs(planes)).to(self.device)
        if self.compiled and not self.score_utility and _bucket(b) != b:
            x = torch.cat([x, x.new_zeros((_bucket(b) - b, *x.shape[1:]))])
        x = x.to(torch.float32).contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if self.score_utility:
                logits, values, _, scores = self._net.forward_aux(x)
                return logits, values, scores
            try:
                logits, values = self._forward(x)
            except Exception as e:  # any compiler failure: fall back, stay correct
                if not self.compiled:
                    raise
                warnings.warn(f"torch.compile failed, evaluating eagerly: {e}", stacklevel=3)
                self.compiled, self._forward = False, self._net
                logits, values = self._forward(x[:b])
        return logits[:b], values[:b], None


class UniformEvaluator:
    """Priors uniform over all N*N + 1 moves and value 0: a network-free evaluator for testing
    search (docs/style.md, principle 8). Same call contract as ``Evaluator``; ``rng`` is
    accepted and ignored."""

    def __call__(
        self, planes: np.ndarray, rng: np.random.Generator | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        planes = np.asarray(planes)
        if planes.ndim != 4 or planes.shape[1] != NUM_PLANES or planes.shape[2] != planes.shape[3]:
            raise EvaluatorInputError(
                f"planes must have shape [B, {NUM_PLANES}, N, N], got {planes.shape}"
            )
        b, m = planes.shape[0], planes.shape[2] * planes.shape[3]
        return np.full((b, m + 1), 1.0 / (m + 1), np.float32), np.zeros(b, np.float32)


def set_threads(n: int) -> None:
    """Set torch's intra-op threads for this process (`tabula.plan.torch_threads` gives the
    count); a no-op when it already has them."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
