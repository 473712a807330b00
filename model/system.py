"""The LightningModule that trains AlphaGo Zero's network f_theta(s) = (p, v).

Loss (Silver et al. 2017, Methods, "Optimization", eq. 1), per mini-batch::

    l = mean_b (z_b - v_b)^2  -  mean_b pi_b^T log p_b  +  c * ||theta||^2

with the value and policy terms weighted equally and ``c = weight_decay`` (paper: 1e-4). The L2
term is computed explicitly over every trainable parameter so that it is logged and matches the
paper's formula; the SGD optimizer therefore gets ``weight_decay=0`` (torch's ``weight_decay=c``
would add ``c * theta`` to the gradient, i.e. the loss ``c/2 ||theta||^2``, half the paper's).

Optimizer: SGD with momentum (paper: 0.9). Learning rate: piecewise constant on the GLOBAL step of
the whole run (paper: 1e-2, then 1e-3 from 400k, 1e-4 from 600k steps), set before every step from
``run_step = step_offset + trainer.global_step``. Resuming a Lightning ``.ckpt`` restores the
weights, the momentum buffers and the global step, so the schedule continues across iterations;
``step_offset`` only matters when a run starts from an exported model that recorded its step.

Batches are ``(planes uint8[B, 17, N, N], pi float32[B, N*N + 1], z float32[B])`` as produced by
``model.datamodule``: pi sums to 1 per row, z in {-1, 0, +1} from the side to move. bf16 mixed
precision comes from the Trainer (``precision="bf16-mixed"``), the documented Lightning switch
(on a CPU without AVX512-BF16/AMX, like the 2-core dev machine, it trains ~2x slower than fp32).

With ``aux`` (KataGo's auxiliary targets, Wu 2019) two terms join the sum, over the positions
of played-out games only (``scored``; 0 when a batch has none): ``ownership_weight`` times the
mean over points of the cross-entropy between the final owner of each point and the
ownership head's (1 + o) / 2, and ``score_weight`` times the squared error of the score head
against the final margin / N*N, both from the side to move.

Logged every ``log_every_n_steps`` steps (means over the steps since the previous log, so that the
per-step work stays a few tensor adds): ``loss``, ``loss/value``, ``loss/policy``, ``loss/l2``
(and ``loss/ownership``, ``loss/score`` with ``aux``), ``lr``, ``grad_norm`` (total 2-norm of
the gradients, before the step) and ``samples_per_s``.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from model.network import NetworkShape, PolicyValueNet
from tabula.config import Config

#: Order of the loss terms in the running sums and in ``final_losses`` (then the aux terms).
#: Steps between logged metrics, as ``tasks.train`` and ``bench.train`` run Lightning.
LOG_EVERY_N_STEPS = 10
LOSS_NAMES = ("value", "policy", "l2")
AUX_LOSS_NAMES = ("ownership", "score")


def lr_at(step: int, boundaries: Sequence[int], values: Sequence[float]) -> float:
    """The learning rate for the optimizer step taken when ``step`` steps are already done.

    ``values[i]`` applies for ``boundaries[i-1] <= step < boundaries[i]``: with the paper's
    ``boundaries=[400_000, 600_000]``, ``values=[1e-2, 1e-3, 1e-4]``, steps 0..399_999 use 1e-2,
    steps 400_000..599_999 use 1e-3 and every later step 1e-4.
    """
    if len(values) != len(boundaries) + 1:
        raise ValueError(f"need len(lr_values) = len(lr_boundaries) + 1, got {len(values)}")
    return float(values[bisect.bisect_right(list(boundaries), step)])


def alphago_zero_loss(
    logits: torch.Tensor,
    value: torch.Tensor,
    pi: torch.Tensor,
    z: torch.Tensor,
    params: Sequence[torch.Tensor],
    c: float,
    full: torch.Tensor | None = None,
    fast_weight: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The paper's three loss terms: ``(value_loss, policy_loss, l2)`` as fp32 scalars.

    ``logits: [B, M+1]`` unnormalised, ``value: [B]`` in [-1, 1], ``pi: [B, M+1]`` search
    probabilities, ``z: [B]`` game outcome from the side to move; ``l2 = c * sum ||w||^2`` over
    ``params``. The total loss is their plain sum (equal weights, paper eq. 1). ``full: [B]``
    bool: only those rows are policy targets (playout caps; KataGo): the policy loss is their
    mean (0 when none), the value loss every row's, the other rows weighted ``fast_weight``
    (KataGo records them with weight 0; 1: a plain mean).
    """
    if full is None or fast_weight == 1.0:
        value_loss = F.mse_loss(value.float(), z.float())
    else:
        w = fast_row_weights(full, fast_weight)
        value_loss = ((value.float() - z.float()) ** 2 * w).sum() / w.sum().clamp(min=1e-6)
    cross = -(pi.float() * F.log_softmax(logits.float(), dim=1)).sum(dim=1)
    if full is None:
        policy_loss = cross.mean()
    else:
        weight = full.float()
        policy_loss = (cross * weight).sum() / weight.sum().clamp(min=1.0)
    # One fused kernel for all squared norms; stays fp32 under autocast (parameters are fp32).
    sq = torch.stack(torch._foreach_norm(list(params))).pow(2).sum()
    return value_loss, policy_loss, c * sq


def weighted_loss(
    logits: torch.Tensor,
    value: torch.Tensor,
    pi: torch.Tensor,
    z: torch.Tensor,
    params: Sequence[torch.Tensor],
    c: float,
    policy_weight: torch.Tensor,
    value_weight: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`alphago_zero_loss` with a weight per row: ``policy_weight: [B]`` on the policy term
    (0 where pi is no target), ``value_weight: [B]`` on the value term, each term the weighted
    mean over the batch (0 when its weights sum to 0). For rows with their own training weight
    (a decided game's, KataGo's reducedVisitsWeight; `model.shards`)."""
    se = (value.float() - z.float()) ** 2
    value_loss = (se * value_weight).sum() / value_weight.sum().clamp(min=1e-6)
    cross = -(pi.float() * F.log_softmax(logits.float(), dim=1)).sum(dim=1)
    policy_loss = (cross * policy_weight).sum() / policy_weight.sum().clamp(min=1e-6)
    sq = torch.stack(torch._foreach_norm(list(params))).pow(2).sum()
    return value_loss, policy_loss, c * sq


def fast_row_weights(full: torch.Tensor, fast_weight: float) -> torch.Tensor:
    """``[B]`` fp32: 1 for a full search's row, ``fast_weight`` for a fast search's."""
    return torch.where(full, 1.0, fast_weight).float()


def auxiliary_loss(
    ownership: torch.Tensor,
    score: torch.Tensor,
    owner: torch.Tensor,
    margin: torch.Tensor,
    scored: torch.Tensor,
    row_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ownership_loss, score_loss)`` as fp32 scalars, unweighted, over the ``scored`` rows.

    ``ownership: [B, M]`` in [-1, 1] and ``owner: [B, M]`` in {-1, 0, +1}: the mean over points
    and scored rows of the cross-entropy of (1 + owner) / 2 under (1 + ownership) / 2 (a dame
    point's target is one half); ``score: [B]`` against ``margin / M`` (``margin: [B]`` in
    points), squared error. Both from the side to move. ``row_weight: [B]`` weighs the rows
    (`fast_row_weights`; None: 1 each)."""
    weight = scored.float()
    if row_weight is not None:
        weight = weight * row_weight
    rows = weight.sum().clamp(min=1.0) if row_weight is None else weight.sum().clamp(min=1e-6)
    p = ((1.0 + ownership.float()) / 2.0).clamp(1e-6, 1.0 - 1e-6)
    t = (1.0 + owner.float()) / 2.0
    cross = -(t * p.log() + (1.0 - t) * (1.0 - p).log()).mean(dim=1)
    target = margin.float() / owner.shape[1]
    return (cross * weight).sum() / rows, ((score.float() - target) ** 2 * weight).sum() / rows


@dataclass(frozen=True)
class Objective:
    """What a training stage minimises and how (module docstring).

    ownership_weight, score_weight: the auxiliary terms' weights (with ``aux``).
    fast_row_weight: the value (and auxiliary) weight of a fast search's row, 1 a full one's.
    lr_boundaries: global steps where the rate drops, increasing; lr_values: the rates, one
        more than the boundaries (`lr_at`). momentum: SGD's; weight_decay: c of the L2 term.
    """

    ownership_weight: float = 1.5
    score_weight: float = 1.0
    fast_row_weight: float = 1.0
    lr_boundaries: tuple[int, ...] = (400_000, 600_000)
    lr_values: tuple[float, ...] = (1e-2, 1e-3, 1e-4)
    momentum: float = 0.9
    weight_decay: float = 1e-4

    @classmethod
    def of(cls, cfg: Config, lr_boundaries: Sequence[int]) -> Objective:
        """The ``training`` section's objective with the rate dropping at ``lr_boundaries``."""
        t = cfg.training
        return cls(
            t.ownership_weight,
            t.score_weight,
            t.fast_row_weight,
            tuple(int(b) for b in lr_boundaries),
            tuple(t.lr_values),
            t.momentum,
            t.weight_decay,
        )


class AlphaZeroSystem(pl.LightningModule):
    """Trains ``self.net`` (a ``PolicyValueNet`` of ``shape``) on (planes, pi, z) batches,
    minimising ``objective``.

    ``forward(x)`` is inference: ``float[B, 17, N, N] -> (logits [B, M+1], value [B])``.
    After ``fit``, ``final_losses`` holds the mean loss terms over the last logging window.

    step_offset: the run's optimizer steps before this trainer's first (`run_step`).
    ``hparams`` (saved in every ``.ckpt``) are plain values, flat: the shape's fields, the
    objective's (lists for its tuples), ``step_offset``, ``log_every_n_steps`` and
    ``channels_last``, the keys checkpoints of every version hold (`model.checkpoint`).
    """

    def __init__(
        self,
        shape: NetworkShape,
        objective: Objective = Objective(),  # noqa: B008 - frozen, shared safely
        *,
        step_offset: int = 0,
        log_every_n_steps: int = 50,
        channels_last: bool = True,
    ) -> None:
        super().__init__()
        lr_at(0, objective.lr_boundaries, objective.lr_values)  # validates the schedule early
        plain = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(objective).items()}
        self.save_hyperparameters(
            {
                **shape.to_dict(),
                **plain,
                "step_offset": step_offset,
                "log_every_n_steps": log_every_n_steps,
                "channels_last": channels_last,
            }
        )
        self.net = PolicyValueNet(shape)
        self.loss_names = LOSS_NAMES + (AUX_LOSS_NAMES if shape.aux else ())
        if channels_last:
            # NHWC convolutions train ~1.35x faster on CPU (9x9 4x32, batch 256, measured for
            # bench/train.py); state dicts and weights_sha256 see the same values either way.
            self.net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.final_losses: dict[str, float] = {}
        self._sums = torch.zeros(len(self.loss_names))
        self._count = 0
        self._grad_norm = float("nan")
        self._clock = (0, 0.0)  # (global step, perf_counter) at the previous log

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net(x)

    @property
    def run_step(self) -> int:
        """Optimizer steps taken in the whole run (the learning-rate schedule's clock)."""
        return int(self.hparams["step_offset"]) + int(self.global_step)

    def current_lr(self) -> float:
        """The learning rate of the next optimizer step, from the run-wide schedule."""
        return lr_at(self.run_step, self.hparams["lr_boundaries"], self.hparams["lr_values"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # weight_decay=0: the paper's L2 term is in the loss itself (see module docstring).
        return torch.optim.SGD(
            self.net.parameters(),
            lr=self.current_lr(),
            momentum=self.hparams["momentum"],
            weight_decay=0.0,
        )

    def on_train_start(self) -> None:
        self._sums = torch.zeros(len(self.loss_names), device=self.device)
        self._count = 0
        self._clock = (self.global_step, time.perf_counter())

    def on_train_batch_start(self, batch: object, batch_idx: int) -> None:
        # The schedule is a pure function of the run-wide step, so a resume cannot desynchronise.
        lr = self.current_lr()
        for group in self.trainer.optimizers[0].param_groups:
            group["lr"] = lr

    def training_step(self, batch: Sequence[torch.Tensor], batch_idx: int) -> torch.Tensor:
        terms = self._terms(self._forward(batch), batch[1:])
        loss = terms[0] + terms[1] + terms[2]
        if self.net.aux:
            loss = loss + self.hparams["ownership_weight"] * terms[3]
            loss = loss + self.hparams["score_weight"] * terms[4]
        self._sums += torch.stack(terms).detach()
        self._count += 1
        if self._log_now():
            self._log_window(batch_size=batch[0].shape[0])
        return loss

    @torch.no_grad()
    def held_out_losses(self, batches: Iterable[Sequence[torch.Tensor]]) -> dict[str, float]:
        """The loss terms on positions never trained on, as `final_losses` names them: the
        network in eval mode, no gradient, fp32, over every row of ``batches`` (as
        `training_step` takes them) at once, so each term is the mean a single batch of
        them all would give."""
        was = self.training
        self.eval()
        try:
            device = next(self.net.parameters()).device
            outputs, targets = [], []
            for batch in batches:
                batch = [t.to(device) for t in batch]
                outputs.append(self._forward(batch))
                targets.append(batch[1:])
            joined = [None if o[0] is None else torch.cat(o) for o in zip(*outputs, strict=True)]
            terms = self._terms(tuple(joined), [torch.cat(t) for t in zip(*targets, strict=True)])
        finally:
            self.train(was)
        return self._totalled(dict(zip(self.loss_names, (float(t) for t in terms), strict=True)))

    def _forward(self, batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        """(logits, value, ownership, score) of a batch's planes; the last two None unless
        the network and the batch have the auxiliary heads and targets."""
        x = batch[0].float()
        if self.hparams["channels_last"]:
            x = x.contiguous(memory_format=torch.channels_last)
        if self.net.aux and len(batch) >= 7:
            return self.net.forward_aux(x)
        return (*self.net(x), None, None)

    def _terms(
        self, outputs: Sequence[torch.Tensor | None], targets: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        """The loss terms (`loss_names`' order) of ``outputs`` (`_forward`) against a batch's
        ``targets``: ``(pi, z)``, then ``full`` and the auxiliary targets when it has them, then
        the rows' weights when it has them (`model.datamodule.PositionWindow.batch`)."""
        logits, value, ownership, score = outputs
        assert logits is not None and value is not None
        pi, z, *rest = targets
        row = rest.pop() if len(rest) in (2, 5) else None  # full (+ aux), then the weights
        full = rest[0] if rest else None
        fast = float(self.hparams.get("fast_row_weight", 1.0))
        params, c = list(self.net.parameters()), self.hparams["weight_decay"]
        weights = None if full is None or fast == 1.0 else fast_row_weights(full, fast)
        terms: tuple[torch.Tensor, ...]
        if row is None:
            terms = alphago_zero_loss(logits, value, pi, z, params, c, full, fast)
        else:
            assert full is not None  # a batch with weights carries the policy-target mask
            weights = row.float() if weights is None else weights * row.float()
            terms = weighted_loss(logits, value, pi, z, params, c, full.float() * row, weights)
        if self.net.aux:  # (0 for a batch without the targets: old shards)
            aux = (0.0 * value.sum(), 0.0 * value.sum())
            if ownership is not None and score is not None:
                aux = auxiliary_loss(ownership, score, *rest[1:], row_weight=weights)
            terms = (*terms, *aux)
        return terms

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._log_now():
            grads = [p.grad for p in self.net.parameters() if p.grad is not None]
            self._grad_norm = float(torch.nn.utils.get_total_norm(grads))
            self.log("grad_norm", self._grad_norm, on_step=True, on_epoch=False)

    def on_train_end(self) -> None:
        if self._count:
            self.final_losses = self._window_means()

    def _log_now(self) -> bool:
        """True on the steps where Lightning flushes to the logger (``log_every_n_steps``)."""
        return (self.global_step + 1) % self.hparams["log_every_n_steps"] == 0

    def _window_means(self) -> dict[str, float]:
        means = (self._sums / max(self._count, 1)).tolist()
        return self._totalled(dict(zip(self.loss_names, means, strict=True)))

    def _totalled(self, terms: dict[str, float]) -> dict[str, float]:
        """``terms`` with their weighted sum, the loss, as ``total``."""
        weights = {"ownership": self.hparams["ownership_weight"],
                   "score": self.hparams["score_weight"]}  # fmt: skip
        return {**terms, "total": sum(weights.get(k, 1.0) * v for k, v in terms.items())}

    def _log_window(self, batch_size: int) -> None:
        means = self._window_means()
        self.final_losses = means
        step0, t0 = self._clock
        now = time.perf_counter()
        steps = self.global_step + 1 - step0
        metrics = {f"loss/{k}": v for k, v in means.items() if k != "total"}
        metrics["loss"] = means["total"]
        metrics["lr"] = self.current_lr()
        metrics["samples_per_s"] = steps * batch_size / max(now - t0, 1e-9)
        self.log_dict(metrics, on_step=True, on_epoch=False, prog_bar=False)
        self._clock = (self.global_step + 1, now)
        self._sums.zero_()
        self._count = 0
