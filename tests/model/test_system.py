"""The LightningModule: the paper's loss, the run-wide learning-rate schedule, resuming."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from model.network import NetworkShape, weights_sha256
from model.system import (
    AlphaZeroSystem,
    Objective,
    alphago_zero_loss,
    fast_row_weights,
    lr_at,
    weighted_loss,
)

N = 5
M = N * N
PAPER = ([400_000, 600_000], [1e-2, 1e-3, 1e-4])

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:.*treespec"),  # Lightning 2.6 on torch 2.13
]


def _system(aux: bool = False, **kw) -> AlphaZeroSystem:
    """A small system; ``kw``: `Objective` fields, or ``step_offset``, ``log_every_n_steps``."""
    torch.manual_seed(0)
    names = {f.name for f in dataclasses.fields(Objective)}
    objective = {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items() if k in names}
    rest = {"log_every_n_steps": 5, **{k: v for k, v in kw.items() if k not in names}}
    shape = NetworkShape(N, 1, 8, 16, aux=aux)
    return AlphaZeroSystem(shape, Objective(**objective), **rest)


def _batches(count: int, size: int = 16, seed: int = 0, one_hot: bool = False) -> list:
    """Fixed (planes uint8, pi, z) batches, as the DataModule yields them."""
    g = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        planes = torch.from_numpy((g.random((size, 17, N, N)) < 0.3).astype(np.uint8))
        if one_hot:
            pi = np.eye(M + 1, dtype=np.float32)[g.integers(0, M + 1, size)]
        else:
            pi = g.dirichlet(np.full(M + 1, 0.3), size).astype(np.float32)
        z = g.choice([-1.0, 1.0], size).astype(np.float32)
        out.append((planes, torch.from_numpy(pi), torch.from_numpy(z)))
    return out


def _loader(batches: list) -> DataLoader:
    return DataLoader(batches, batch_size=None, shuffle=False)


class _LrRecorder(pl.Callback):
    """The learning rate actually used by each optimizer step, keyed by the global step."""

    def __init__(self) -> None:
        self.lr: dict[int, float] = {}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.lr[trainer.global_step] = optimizer.param_groups[0]["lr"]


def _trainer(max_epochs: int, *callbacks: pl.Callback) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
        callbacks=list(callbacks),
        log_every_n_steps=5,
    )


def test_lr_at_paper_schedule_before_at_and_after_each_boundary() -> None:
    b, v = PAPER
    assert lr_at(0, b, v) == 1e-2
    assert lr_at(399_999, b, v) == 1e-2
    assert lr_at(400_000, b, v) == 1e-3
    assert lr_at(400_001, b, v) == 1e-3
    assert lr_at(599_999, b, v) == 1e-3
    assert lr_at(600_000, b, v) == 1e-4
    assert lr_at(10**9, b, v) == 1e-4


def test_lr_at_refuses_mismatched_lists() -> None:
    with pytest.raises(ValueError, match="len"):
        lr_at(0, [10], [0.1])


def test_loss_terms_match_the_paper_formula() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, M + 1, generator=g)
    value = torch.tanh(torch.randn(4, generator=g))
    pi = torch.softmax(torch.randn(4, M + 1, generator=g), 1)
    z = torch.tensor([1.0, -1.0, 0.0, 1.0])
    params = [torch.randn(3, 3, generator=g), torch.randn(5, generator=g)]
    value_loss, policy_loss, l2 = alphago_zero_loss(logits, value, pi, z, params, c=1e-4)
    p = torch.softmax(logits, 1)
    assert value_loss.item() == pytest.approx(((z - value) ** 2).mean().item(), rel=1e-6)
    assert policy_loss.item() == pytest.approx(-(pi * p.log()).sum(1).mean().item(), rel=1e-5)
    sq = sum((w**2).sum() for w in params)
    assert l2.item() == pytest.approx(1e-4 * sq.item(), rel=1e-5)


def test_fast_rows_weigh_the_value_loss_as_configured() -> None:
    """Playout caps: rows of fast searches are never policy targets, and their value error
    counts ``fast_weight`` times a full row's (KataGo: 0)."""
    logits = torch.zeros(4, M + 1)
    pi = torch.full((4, M + 1), 1.0 / (M + 1))
    value = torch.tensor([0.5, 0.0, -0.5, 1.0])
    z = torch.tensor([1.0, 1.0, 1.0, -1.0])  # squared errors 0.25, 1, 2.25, 4
    full = torch.tensor([True, False, True, False])
    loss = {w: alphago_zero_loss(logits, value, pi, z, [torch.zeros(1)], 0.0, full, w)[0].item()
            for w in (0.0, 0.5, 1.0)}  # fmt: skip
    assert loss[0.0] == pytest.approx((0.25 + 2.25) / 2)  # the full rows only
    assert loss[0.5] == pytest.approx((0.25 + 2.25 + 0.5 * (1 + 4)) / 3)
    assert loss[1.0] == pytest.approx((0.25 + 1 + 2.25 + 4) / 4)  # a plain mean
    none_full = torch.zeros(4, dtype=torch.bool)
    assert (
        alphago_zero_loss(logits, value, pi, z, [torch.zeros(1)], 0.0, none_full, 0.0)[0].item()
        == 0.0
    )
    weights = fast_row_weights(full, 0.25)
    assert weights.tolist() == [1.0, 0.25, 1.0, 0.25]


def test_l2_is_in_the_loss_not_in_the_optimizer() -> None:
    system = _system(weight_decay=1e-4)
    opt = system.configure_optimizers()
    assert opt.param_groups[0]["weight_decay"] == 0.0
    assert opt.param_groups[0]["momentum"] == 0.9


def test_forward_is_inference_of_the_net() -> None:
    system = _system().eval()
    x = torch.zeros(2, 17, N, N)
    logits, value = system(x)
    assert logits.shape == (2, M + 1) and value.shape == (2,)
    assert torch.equal(logits, system.net(x)[0])


def test_overfits_a_tiny_fixed_dataset() -> None:
    data = _batches(1, size=16, one_hot=True)  # one batch seen again and again
    system = _system(lr_boundaries=[], lr_values=[0.1], weight_decay=1e-4)
    start = system.training_step(data[0], 0).item()
    _trainer(1).fit(system, train_dataloaders=_loader(data * 150))
    final = system.final_losses
    assert final["total"] < 0.25 * start, (start, final)
    assert final["value"] < 0.2 and final["policy"] < 0.5 * np.log(M + 1)


def test_lr_schedule_is_exact_and_continues_across_a_resume(tmp_path: Path) -> None:
    sched = dict(lr_boundaries=[3, 7], lr_values=[0.1, 0.01, 0.001])
    rec = _LrRecorder()
    system = _system(**sched)
    first = _trainer(1, rec)
    first.fit(system, train_dataloaders=_loader(_batches(5, seed=1)))
    first.save_checkpoint(tmp_path / "a.ckpt", weights_only=False)
    resumed = _system(**sched)
    second = _trainer(2, rec)
    second.fit(
        resumed,
        train_dataloaders=_loader(_batches(6, seed=2)),
        ckpt_path=tmp_path / "a.ckpt",
        weights_only=True,
    )
    assert second.global_step == 11
    assert sorted(rec.lr) == list(range(11))
    assert all(rec.lr[s] == lr_at(s, [3, 7], [0.1, 0.01, 0.001]) for s in range(11))
    assert [rec.lr[s] for s in (2, 3, 4, 6, 7, 8)] == [0.1, 0.01, 0.01, 0.01, 0.001, 0.001]


def test_resume_continues_step_momentum_and_schedule_exactly(tmp_path: Path) -> None:
    """10 steps in one go == 4 steps, checkpoint, resume for 6: bit-identical weights.

    A resume that lost the momentum buffers, the global step or the schedule would diverge
    (the control: same split without the optimizer state).
    """
    sched = dict(lr_boundaries=[5], lr_values=[0.05, 0.01])
    data = _batches(10, seed=3)
    straight = _system(**sched)
    _trainer(1).fit(straight, train_dataloaders=_loader(data))

    part = _system(**sched)
    t1 = _trainer(1)
    t1.fit(part, train_dataloaders=_loader(data[:4]))
    t1.save_checkpoint(tmp_path / "p.ckpt", weights_only=False)
    state = torch.load(tmp_path / "p.ckpt", weights_only=True)
    assert state["global_step"] == 4
    assert state["optimizer_states"][0]["state"], "momentum buffers must be saved"
    resumed = _system(**sched)
    t2 = _trainer(2)
    t2.fit(
        resumed,
        train_dataloaders=_loader(data[4:]),
        ckpt_path=tmp_path / "p.ckpt",
        weights_only=True,
    )
    assert t2.global_step == 10
    assert weights_sha256(resumed.net) == weights_sha256(straight.net)

    fresh_opt = _system(**sched)  # weights restored, momentum and step lost
    fresh_opt.load_state_dict(state["state_dict"])
    _trainer(1).fit(fresh_opt, train_dataloaders=_loader(data[4:]))
    assert weights_sha256(fresh_opt.net) != weights_sha256(straight.net)


def test_step_offset_drives_the_schedule() -> None:
    system = _system(lr_boundaries=[100], lr_values=[0.1, 0.01], step_offset=100)
    assert system.run_step == 100 and system.current_lr() == 0.01


def test_logs_losses_lr_grad_norm_and_throughput() -> None:
    class Keep(pl.loggers.Logger):
        name, version = "keep", "0"
        rows: list[dict] = []

        def log_metrics(self, metrics, step=None) -> None:
            self.rows.append(dict(metrics, step=step))

        def log_hyperparams(self, params, *a, **k) -> None:
            pass

    system = _system()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=Keep(),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=5,
    )
    trainer.fit(system, train_dataloaders=_loader(_batches(10)))
    keys = set().union(*Keep.rows) - {"step", "epoch"}
    assert {
        "loss",
        "loss/value",
        "loss/policy",
        "loss/l2",
        "lr",
        "grad_norm",
        "samples_per_s",
    } <= keys
    steps = sorted({r["step"] for r in Keep.rows if "loss" in r})
    assert steps == [4, 9]


def test_policy_loss_counts_only_full_search_rows() -> None:
    """Playout caps: the policy loss is the mean over the rows that are policy targets, the
    value loss every row's; a batch with none gives a zero policy loss."""
    g = torch.Generator().manual_seed(0)
    logits, value = torch.randn(6, 10, generator=g), torch.rand(6, generator=g) * 2 - 1
    pi = torch.softmax(torch.randn(6, 10, generator=g), 1)
    z = torch.tensor([1.0, -1, 1, -1, 1, -1])
    full = torch.tensor([True, False, True, False, False, True])
    w = [torch.ones(3)]
    v, p, _ = alphago_zero_loss(logits, value, pi, z, w, 0.0, full)
    v_all, _, _ = alphago_zero_loss(logits, value, pi, z, w, 0.0)
    _, p_sub, _ = alphago_zero_loss(logits[full], value[full], pi[full], z[full], w, 0.0)
    assert torch.allclose(v, v_all) and torch.allclose(p, p_sub)
    none = torch.zeros(6, dtype=torch.bool)
    assert alphago_zero_loss(logits, value, pi, z, w, 0.0, none)[1] == 0


def test_auxiliary_loss_known_values_and_scored_rows_only() -> None:
    """Ownership: cross-entropy of (1 + owner) / 2 under (1 + o) / 2, a mean over points;
    score: squared error against margin / M; rows of unscored games count for nothing."""
    from model.system import auxiliary_loss

    owner = torch.tensor([[1, -1, 0, 1], [1, 1, 1, 1]], dtype=torch.int8)
    scored = torch.tensor([True, False])
    half = torch.zeros(2, 4)  # predicts one half everywhere: log 2 per point
    own, score = auxiliary_loss(half, torch.tensor([0.5, 9.0]), owner, torch.tensor([2.0, 0.0]),
                                scored)  # fmt: skip
    assert own.item() == pytest.approx(np.log(2.0), rel=1e-6)
    assert score.item() == pytest.approx((0.5 - 2.0 / 4) ** 2, abs=1e-7)
    sure = owner.float() * 0.999999  # near-certain and right: near zero
    assert auxiliary_loss(sure, torch.zeros(2), owner, torch.zeros(2), scored)[0] < 0.75
    none = torch.zeros(2, dtype=torch.bool)
    assert auxiliary_loss(half, torch.ones(2), owner, torch.zeros(2), none) == (0.0, 0.0)


def test_aux_heads_train_ownership_and_score_and_log_them() -> None:
    """With aux heads the two extra losses fall on a fixed dataset and are logged; play and
    export see the same (logits, value) outputs as a net without them."""
    g = np.random.default_rng(1)
    batches = []
    for planes, pi, z in _batches(1, size=16, one_hot=True):
        owner = torch.from_numpy(g.integers(-1, 2, (16, M)).astype(np.int8))
        margin = torch.from_numpy(g.normal(0, 5, 16).astype(np.float32))
        batches.append((planes, pi, z, torch.ones(16, dtype=torch.bool), owner, margin,
                        torch.ones(16, dtype=torch.bool)))  # fmt: skip
    system = _system(lr_boundaries=[], lr_values=[0.1], aux=True, log_every_n_steps=5)
    assert system.loss_names[-2:] == ("ownership", "score")
    system.training_step(batches[0], 0)
    start = system._window_means()
    system._sums.zero_()
    system._count = 0
    _trainer(1).fit(system, train_dataloaders=_loader(batches * 100))
    final = system.final_losses
    assert final["ownership"] < 0.8 * start["ownership"], (start, final)
    assert final["score"] < 0.5 * start["score"], (start, final)
    x = batches[0][0].float()
    logits, value = system.net(x)
    aux = system.net.forward_aux(x)
    assert torch.equal(aux[0], logits) and torch.equal(aux[1], value)
    assert aux[2].shape == (16, M) and aux[3].shape == (16,)


def test_held_out_losses_are_the_training_losses_in_eval_mode_over_all_rows() -> None:
    """Measured in eval mode without a gradient, the rows of several batches taken as one
    (so unequal batches and the policy mask weigh each row once), the training mode kept."""
    system = _system(fast_row_weight=0.5)
    ((planes, pi, z),) = _batches(1, size=24)
    full = torch.from_numpy(np.arange(24) % 3 == 0)
    whole = system.held_out_losses([(planes, pi, z, full)])
    parts = [(planes[a:b], pi[a:b], z[a:b], full[a:b]) for a, b in ((0, 16), (16, 24))]
    split = system.held_out_losses(parts)
    assert system.training and split.keys() == {"value", "policy", "l2", "total"}
    assert split == pytest.approx(whole, rel=1e-5)
    system.eval()
    with torch.no_grad():
        logits, value = system(planes.float())
        terms = alphago_zero_loss(logits, value, pi, z, list(system.parameters()), 1e-4, full, 0.5)
    assert [whole[k] for k in ("value", "policy", "l2")] == pytest.approx(
        [float(t) for t in terms], rel=1e-5
    )
    assert whole["total"] == pytest.approx(sum(float(t) for t in terms), rel=1e-5)


def test_row_weights_weigh_every_term() -> None:
    """A row's weight (a decided game's, KataGo's 0.1) scales its share of the value and
    policy terms (weighted means); weights of 1 give the paper's plain means."""
    g = torch.Generator().manual_seed(3)
    logits, value = torch.randn(4, 10, generator=g), torch.rand(4, generator=g) * 2 - 1
    pi = torch.softmax(torch.randn(4, 10, generator=g), 1)
    z = torch.tensor([1.0, -1, 1, -1])
    w, ones = [torch.ones(3)], torch.ones(4)
    plain = alphago_zero_loss(logits, value, pi, z, w, 0.0)
    same = weighted_loss(logits, value, pi, z, w, 0.0, ones, ones)
    assert all(torch.allclose(a, b) for a, b in zip(plain, same, strict=True))
    row = torch.tensor([1.0, 0.1, 1.0, 0.1])
    v, p, _ = weighted_loss(logits, value, pi, z, w, 0.0, row, row)
    se = (value - z) ** 2
    cross = -(pi * torch.log_softmax(logits, 1)).sum(1)
    assert v.item() == pytest.approx(float((se * row).sum() / row.sum()), rel=1e-6)
    assert p.item() == pytest.approx(float((cross * row).sum() / row.sum()), rel=1e-6)


def test_a_batch_with_row_weights_trains_on_them() -> None:
    """The system reads a batch's weights (last, after the policy mask): weights of 1 give the
    unweighted terms, a small weight on some rows changes them."""
    system = _system()
    ((planes, pi, z),) = _batches(1, size=12)
    full = torch.ones(12, dtype=torch.bool)
    plain = system.held_out_losses([(planes, pi, z)])
    ones = system.held_out_losses([(planes, pi, z, full, torch.ones(12))])
    assert ones == pytest.approx(plain, rel=1e-5)
    row = torch.where(torch.arange(12) % 2 == 0, 1.0, 0.1)
    weighted = system.held_out_losses([(planes, pi, z, full, row)])
    assert weighted["value"] != pytest.approx(plain["value"], rel=1e-4)
