"""The dual-head ResNet: shapes, ranges, seeded initialisation, BN folding, weight hashes."""

from __future__ import annotations

import pytest
import torch

from model.network import (
    GlobalPoolingBlock,
    NetworkShape,
    PolicyValueNet,
    count_parameters,
    deepened,
    fold_batch_norm,
    make_network,
    weights_sha256,
)


def _randomise_bn(net: PolicyValueNet, seed: int) -> None:
    """Non-trivial BN statistics and affine terms, so folding is really exercised."""
    g = torch.Generator().manual_seed(seed)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g))
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.randn(m.num_features, generator=g))
            m.bias.data.copy_(torch.randn(m.num_features, generator=g))


@pytest.mark.parametrize(
    ("n", "blocks", "filters"), [(5, 0, 4), (9, 2, 16), (13, 1, 8), (19, 1, 8)]
)
def test_output_shapes_and_ranges(n: int, blocks: int, filters: int) -> None:
    net = make_network(n, blocks, filters, seed=1, value_hidden=32).eval()
    x = (torch.rand(3, 17, n, n) < 0.5).float()
    logits, value = net(x)
    assert logits.shape == (3, n * n + 1)
    assert value.shape == (3,)
    assert (value.abs() <= 1).all()
    p = torch.softmax(logits, dim=1)
    torch.testing.assert_close(p.sum(dim=1), torch.ones(3))


def test_value_saturates_inside_minus_one_one() -> None:
    net = make_network(5, 1, 4, seed=0, value_hidden=8).eval()
    with torch.no_grad():
        net.value_fc2.bias.fill_(1e4)
        assert net(torch.ones(2, 17, 5, 5))[1].max() <= 1.0
        net.value_fc2.bias.fill_(-1e4)
        assert net(torch.ones(2, 17, 5, 5))[1].min() >= -1.0


def test_architecture_follows_the_paper() -> None:
    net = PolicyValueNet(NetworkShape(9, blocks=3, filters=16, value_hidden=256))
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 2 * 3 + 2  # stem, two per residual block, the two heads
    assert all(c.bias is None for c in convs)  # every conv is followed by BN
    assert net.policy_conv[0].out_channels == 2 and net.value_conv[0].out_channels == 1
    assert net.policy_fc.out_features == 82 and net.value_fc1.out_features == 256
    assert net.shape.to_entry() == {
        "board_size": 9,
        "blocks": 3,
        "filters": 16,
        "value_hidden": 256,
    }
    assert count_parameters(net) > 0


def test_channels_last_gives_the_same_outputs() -> None:
    net = make_network(9, 2, 8, seed=3).eval()
    x = (torch.rand(4, 17, 9, 9) < 0.5).float()
    ref = net(x)
    cl = net.to(memory_format=torch.channels_last)
    out = cl(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(out[0], ref[0])
    torch.testing.assert_close(out[1], ref[1])


def test_bad_shape_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="board_size"):
        NetworkShape(4, 1, 8)
    with pytest.raises(ValueError, match="filters"):
        NetworkShape(9, 1, 0)


def test_make_network_is_seeded_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = make_network(9, 2, 8, seed=7)
    assert torch.equal(torch.rand(1), before)  # the global stream did not move
    b = make_network(9, 2, 8, seed=7)
    c = make_network(9, 2, 8, seed=8)
    assert weights_sha256(a) == weights_sha256(b)
    assert weights_sha256(a) != weights_sha256(c)


def test_weights_hash_sees_every_bit_and_buffer() -> None:
    net = make_network(5, 1, 4, seed=0)
    h = weights_sha256(net)
    assert h == weights_sha256(net.state_dict())
    assert len(h) == 64
    with torch.no_grad():
        net.tower[0].conv1.weight.view(-1)[0] += 1e-7  # one ulp-ish change
    assert weights_sha256(net) != h
    net2 = make_network(5, 1, 4, seed=0)
    net2.stem[1].running_mean += 1.0  # buffers count too
    assert weights_sha256(net2) != h
    bf = {
        k: v.to(torch.bfloat16)
        for k, v in make_network(5, 1, 4, seed=0).state_dict().items()
        if v.is_floating_point()
    }
    assert len(weights_sha256(bf)) == 64  # dtypes numpy lacks hash as well


def test_fold_batch_norm_computes_the_same_function() -> None:
    net = make_network(9, 3, 16, seed=5)
    _randomise_bn(net, seed=6)
    net.train()  # the copy must be in eval mode whatever the original was
    folded = fold_batch_norm(net)
    assert net.training  # original untouched
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    net.eval()
    x = (torch.rand(8, 17, 9, 9) < 0.4).float()
    with torch.no_grad():
        ref, got = net(x), folded(x)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[1], ref[1], rtol=1e-4, atol=1e-4)


def test_global_pooling_blocks_see_the_whole_board() -> None:
    # Two blocks reach 5 points from the stem's: the opposite corner of 9x9 is 8 away. With
    # global pooling, block 2 adds biases pooled over the board, so every point sees it.
    x = torch.zeros(1, 17, 9, 9)
    far = x.clone()
    far[0, 0, 8, 8] = 1.0  # one own stone in the opposite corner
    for pooling in (False, True):
        net = make_network(9, 2, 8, seed=3, value_hidden=16, global_pooling=pooling).eval()
        assert [type(b) is GlobalPoolingBlock for b in net.tower] == [False, pooling]
        with torch.no_grad():
            near, moved = (net.tower(net.stem(t))[0, :, 0, 0] for t in (x, far))
        assert torch.equal(near, moved) is not pooling
    assert net.shape.to_entry()["global_pooling"] == 1
    assert "global_pooling" not in make_network(9, 2, 8, seed=3).shape.to_entry()


def test_fold_batch_norm_with_global_pooling_computes_the_same_function() -> None:
    net = make_network(9, 4, 16, seed=5, global_pooling=True)
    _randomise_bn(net, seed=6)
    folded = fold_batch_norm(net.eval())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    x = (torch.rand(8, 17, 9, 9) < 0.4).float()
    with torch.no_grad():
        ref, got = net(x), folded(x)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[1], ref[1], rtol=1e-4, atol=1e-4)


def test_the_value_comes_back_in_fp32_under_bf16_autocast() -> None:
    """Self-play's evaluator runs the net under bf16 autocast where bf16 is native: the tower
    and policy stay bf16, the value head's last layer is fp32, as in fp32 from its hidden
    layer, so values and the root value target keep fp32's resolution."""
    net = make_network(5, blocks=1, filters=8, seed=0, value_hidden=16, aux=True).eval()
    x = torch.randint(0, 2, (4, 17, 5, 5)).float()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits, value = net(x)
        _, aux_value, *_ = net.forward_aux(x)
        _, _, hidden = net._body(x)
    assert logits.dtype == torch.bfloat16 and value.dtype == aux_value.dtype == torch.float32
    with torch.no_grad():
        expected = torch.tanh(net.value_fc2(hidden.float())).squeeze(1)
    assert torch.equal(value, expected)


@pytest.mark.parametrize("pooling", [False, True])
def test_a_deepened_network_computes_what_it_grew_from(pooling: bool) -> None:
    """Blocks appended as the identity: the same outputs, heads included, in evaluation and in
    training; the new blocks' last scale gets a gradient, so training grows them."""
    net = make_network(9, 2, 16, seed=1, value_hidden=32, aux=True, global_pooling=pooling,
                       liberties=True)  # fmt: skip
    _randomise_bn(net, 0)
    grown = deepened(net, 5, seed=3)
    assert grown.shape.blocks == 5 and grown.shape.grows_from(net.shape)
    assert not net.shape.grows_from(grown.shape) and not grown.shape.grows_from(grown.shape)
    x = (torch.rand(4, 23, 9, 9) < 0.5).float()
    for training in (False, True):
        net.train(training)
        grown.train(training)
        for a, b in zip(net.forward_aux(x), grown.forward_aux(x), strict=True):
            assert torch.equal(a, b)
    logits, value = grown(x)
    (logits.logsumexp(dim=1).sum() + value.sum()).backward()
    assert grown.tower[4].bn2.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="more than 2 blocks to deepen"):
        deepened(net, 2, seed=0)
