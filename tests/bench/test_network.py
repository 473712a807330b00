"""bench.network's int8 option: a seeded laptop-shaped network, quantized on its own games."""

from __future__ import annotations

import torch

from bench.network import INT8_POSITIONS, int8_agreement, int8_network, int8_paths, own_positions
from model.network import NetworkShape, PolicyValueNet, fold_batch_norm


def _net() -> PolicyValueNet:
    torch.manual_seed(0)
    return PolicyValueNet(NetworkShape(9, 2, 16, aux=True, liberties=True, ladders=True)).eval()


def test_own_positions_are_the_networks_inputs_and_follow_the_seed() -> None:
    net = _net()
    x = own_positions(net, seed=0)
    assert x.shape[1:] == (net.shape.inputs.planes, 9, 9)
    assert 16 < len(x) <= INT8_POSITIONS
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(x, own_positions(net, seed=0))
    assert not torch.equal(x[: len(x) // 2], own_positions(net, seed=1)[: len(x) // 2])


def test_int8_lies_near_fp32_and_agreement_measures_the_distance() -> None:
    net = _net()
    folded = fold_batch_norm(net).to(memory_format=torch.channels_last)
    x = own_positions(net, seed=1)
    same = int8_agreement(folded, folded, x)
    assert same["top1_agreement"] == 1.0 and same["value_max"] == 0.0
    assert abs(same["kl"]) < 1e-6
    q = int8_network(net, own_positions(net, seed=0))
    near = int8_agreement(folded, q, x)
    assert near["top1_agreement"] >= 0.8 and near["kl"] < 0.05 and near["value_mae"] < 0.05
    assert 0.0 < near["value_max"]  # int8 is another network, a little off


def test_int8_paths_time_one_batch_each() -> None:
    paths, agreement = int8_paths(_net(), batch=64)
    assert set(agreement) == {"top1_agreement", "kl", "value_mae", "value_max"}
    for run, compile_s in paths.values():
        logits, values = run()
        assert logits.shape == (64, 82) and values.shape == (64,) and compile_s is None
