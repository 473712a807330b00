"""The batched evaluator: the search's contract, random symmetries mapped back, precisions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model.evaluator import (
    INVERSE,
    Evaluator,
    EvaluatorInputError,
    UniformEvaluator,
    transform_planes,
    transform_policy,
)
from model.network import NetworkShape, PolicyValueNet, make_network, seeded_network, weights_sha256
from tabula.features import Inputs, symmetry_permutations, with_liberties
from tabula.inputs import with_inputs


class SymmetrisedNet(PolicyValueNet):
    """Equivariant by construction: the mean over the 8 transforms of d_k^-1 f(d_k x)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        perm = torch.from_numpy(symmetry_permutations(self.board_size).copy())
        logits, value = 0.0, 0.0
        for k in range(8):
            xk = torch.rot90(x, k % 4, dims=(-2, -1))
            xk = torch.flip(xk, dims=(-1,)) if k >= 4 else xk
            lk, vk = super().forward(xk)
            logits = logits + lk[:, perm[INVERSE[k]]]
            value = value + vk
        return logits / 8, value / 8


def _planes(b: int, n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random((b, 17, n, n)) < 0.3).astype(np.uint8)


def _fp32(net: PolicyValueNet) -> Evaluator:
    return Evaluator(net, device="cpu", precision="fp32", compile=False)


def test_contract_shapes_dtypes_ranges() -> None:
    ev = _fp32(make_network(9, 2, 16, seed=0))
    priors, values = ev(_planes(10, 9, 0))
    assert priors.shape == (10, 82) and priors.dtype == np.float32
    assert values.shape == (10,) and values.dtype == np.float32
    np.testing.assert_allclose(priors.sum(axis=1), 1.0, rtol=1e-5)
    assert (priors >= 0).all() and (np.abs(values) <= 1).all()


def test_matches_the_plain_network_for_uint8_and_float32() -> None:
    net = make_network(7, 2, 8, seed=1)
    net.stem[1].running_mean.uniform_(-1, 1)  # non-trivial BN, folded by the evaluator
    net.eval()
    planes = _planes(6, 7, 1)
    with torch.no_grad():
        logits, value = net(torch.from_numpy(planes).float())
    ev = _fp32(net)
    for x in (planes, planes.astype(np.float32)):
        priors, values = ev(x)
        np.testing.assert_allclose(priors, torch.softmax(logits, 1).numpy(), atol=1e-5)
        np.testing.assert_allclose(values, value.numpy(), atol=1e-5)


@pytest.mark.parametrize(
    "inputs", [Inputs(liberties=True), Inputs(True, True), Inputs(ladders=True)]
)
def test_a_network_with_derived_planes_gets_them_from_the_17(inputs: Inputs) -> None:
    shape = NetworkShape(7, 1, 8, liberties=inputs.liberties, ladders=inputs.ladders)
    net = seeded_network(shape, 2).eval()
    assert net.stem[0].in_channels == inputs.planes
    planes = _planes(5, 7, 2)
    planes[:, 8] &= 1 - planes[:, 0]  # (no point holds both colours)
    with torch.no_grad():
        logits, value = net(torch.from_numpy(with_inputs(planes, inputs)).float())
    priors, values = _fp32(net)(planes)  # the search's 17 planes
    np.testing.assert_allclose(priors, torch.softmax(logits, 1).numpy(), atol=1e-5)
    np.testing.assert_allclose(values, value.numpy(), atol=1e-5)
    with pytest.raises(EvaluatorInputError, match="17"):
        _fp32(net)(with_liberties(planes))


def test_callers_network_is_left_alone() -> None:
    net = make_network(5, 1, 4, seed=2)
    h = weights_sha256(net)
    net.train()
    _fp32(net)(_planes(3, 5, 2))
    assert net.training and weights_sha256(net) == h
    assert net.stem[0].weight.is_contiguous()  # not switched to channels_last


@pytest.mark.parametrize("n", [5, 9])
def test_symmetries_map_back_for_an_equivariant_network(n: int) -> None:
    net = SymmetrisedNet(NetworkShape(n, blocks=1, filters=8, value_hidden=16))
    ev = _fp32(net)
    one = _planes(1, n, 3)
    batch = np.repeat(one, 64, axis=0)
    ks = np.random.default_rng(4).integers(0, 8, size=64)
    assert set(ks) == set(range(8))  # every transform is exercised below
    plain_p, plain_v = ev(batch)
    sym_p, sym_v = ev(batch, np.random.default_rng(4))
    # fp32 sums in another order (oneDNN picks kernels by load): 2e-6 failed once on a busy machine
    np.testing.assert_allclose(sym_p, plain_p, atol=1e-5)
    np.testing.assert_allclose(sym_v, plain_v, atol=1e-5)
    # The check has teeth: the network's raw answer on a transformed board is a moved policy.
    moved, _ = ev(transform_planes(batch, ks))
    assert not np.allclose(moved[ks == 1], plain_p[ks == 1], atol=1e-4)


def test_each_position_gets_its_drawn_transform_undone() -> None:
    # Contract: ks = rng.integers(0, 8, size=B); policy_b = d_k^-1 f(d_k s_b).
    net = make_network(9, 1, 8, seed=5)
    ev = _fp32(net)
    planes = _planes(32, 9, 5)
    ks = np.random.default_rng(6).integers(0, 8, size=32)
    raw_p, raw_v = ev(transform_planes(planes, ks))
    priors, values = ev(planes, np.random.default_rng(6))
    np.testing.assert_allclose(priors, transform_policy(raw_p, INVERSE[ks]), atol=1e-6)
    np.testing.assert_allclose(values, raw_v, atol=1e-6)
    again, _ = ev(planes, np.random.default_rng(6))
    np.testing.assert_array_equal(again, priors)  # same seed, same answer


def test_empty_batch_and_bad_input() -> None:
    ev = _fp32(make_network(9, 1, 4, seed=0))
    priors, values = ev(np.zeros((0, 17, 9, 9), np.uint8))
    assert priors.shape == (0, 82) and values.shape == (0,)
    for bad in (
        np.zeros((2, 17, 7, 7), np.uint8),
        np.zeros((2, 16, 9, 9), np.uint8),
        np.zeros((17, 9, 9), np.uint8),
        np.zeros((1, 17, 9, 9), np.int64),
    ):
        with pytest.raises(EvaluatorInputError) as err:
            ev(bad)
        assert "\n" not in str(err.value)


def test_bf16_is_close_to_fp32() -> None:
    net = make_network(9, 2, 16, seed=7)
    planes = _planes(16, 9, 7)
    p32, v32 = _fp32(net)(planes)
    p16, v16 = Evaluator(net, device="cpu", precision="bf16", compile=False)(planes)
    np.testing.assert_allclose(p16.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(p16, p32, atol=2e-2)
    np.testing.assert_allclose(v16, v32, atol=5e-2)


def test_auto_settings_resolve() -> None:
    ev = Evaluator(make_network(5, 1, 4, seed=0))
    assert ev.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert ev.compiled is False
    with pytest.raises(ValueError, match="precision"):
        Evaluator(make_network(5, 1, 4, seed=0), precision="fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compile"):
        Evaluator(make_network(5, 1, 4, seed=0), compile="yes")  # type: ignore[arg-type]


def test_uniform_evaluator() -> None:
    priors, values = UniformEvaluator()(_planes(3, 5, 0), np.random.default_rng(0))
    np.testing.assert_array_equal(priors, np.full((3, 26), 1 / 26, np.float32))
    np.testing.assert_array_equal(values, np.zeros(3, np.float32))
    with pytest.raises(EvaluatorInputError):
        UniformEvaluator()(np.zeros((3, 9, 9)))


@pytest.mark.slow
def test_compiled_matches_eager_with_padded_batches() -> None:
    net = make_network(9, 1, 8, seed=8)
    eager = _fp32(net)
    compiled = Evaluator(net, device="cpu", precision="fp32", compile=True)
    for b in (5, 16):
        planes = _planes(b, 9, b)
        pe, ve = eager(planes, np.random.default_rng(b))
        pc, vc = compiled(planes, np.random.default_rng(b))
        assert pc.shape == (b, 82)
        np.testing.assert_allclose(pc, pe, atol=1e-5)
        np.testing.assert_allclose(vc, ve, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:
    net = make_network(9, 2, 16, seed=9)
    planes = _planes(64, 9, 9)
    pc, vc = _fp32(net)(planes, np.random.default_rng(0))
    pg, vg = Evaluator(net, device="cuda", precision="fp32", compile=False)(
        planes, np.random.default_rng(0)
    )
    np.testing.assert_allclose(pg, pc, atol=1e-4)
    np.testing.assert_allclose(vg, vc, atol=1e-4)
    pb, _ = Evaluator(net, device="cuda", precision="auto", compile=False)(planes)
    np.testing.assert_allclose(pb.sum(axis=1), 1.0, rtol=1e-5)


def test_a_score_utility_mixes_the_score_heads_margin_into_the_values() -> None:
    """score_utility w: values = (v + w 2/pi atan(score / (scale N))) / (1 + w), v and score
    the network's own (`evaluate_aux`); priors unchanged; a network without the score head
    gives its value alone."""
    net = make_network(7, 2, 8, seed=2, aux=True)
    with torch.no_grad():
        net.score_fc.bias.fill_(0.3)  # margins of about 0.3 * 49 points: far from zero
    planes = _planes(6, 7, 3)
    plain = _fp32(net)
    scored = Evaluator(net, device="cpu", precision="fp32", compile=False, score_utility=0.4)
    priors, values, _, score = plain.evaluate_aux(planes)
    got_priors, got_values = scored(planes)
    share = 2 / np.pi * np.arctan(score / (2.0 * 7))
    np.testing.assert_allclose(got_values, (values + 0.4 * share) / 1.4, atol=1e-5)
    np.testing.assert_allclose(got_priors, priors, atol=1e-6)
    assert (np.abs(got_values) <= 1).all() and not np.allclose(got_values, values, atol=1e-3)
    np.testing.assert_array_equal(plain(planes)[1], values)
    no_head = make_network(7, 2, 8, seed=2)
    ev = Evaluator(no_head, device="cpu", precision="fp32", compile=False, score_utility=0.4)
    assert ev.score_utility == 0.0
    np.testing.assert_array_equal(ev(planes)[1], _fp32(no_head)(planes)[1])
    with pytest.raises(ValueError, match="score_utility"):
        Evaluator(net, device="cpu", score_utility=-0.1)
