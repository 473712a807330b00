"""`bench.average`: the weight average of a run's last iterations and its batch-norm statistics."""

from __future__ import annotations

from pathlib import Path

import torch

from bench.average import average_weights, averaged_checkpoint, refresh_batchnorm
from model.checkpoint import load_checkpoint, save_checkpoint
from model.datamodule import synthetic_records
from model.network import make_network
from model.shards import write_shard
from tasks.run.layout import RunLayout


def test_the_average_is_the_mean_of_every_weight() -> None:
    nets = [make_network(5, 1, 8, seed=s, value_hidden=16) for s in (1, 2, 3)]
    avg = average_weights(nets)
    states = [n.state_dict() for n in nets]
    for name, value in avg.state_dict().items():
        if value.is_floating_point():
            expected = sum(s[name] for s in states) / 3
            torch.testing.assert_close(value, expected)
        else:  # batch norm's counts: the last net's
            assert torch.equal(value, states[-1][name])
    assert not avg.training


def test_batchnorm_statistics_are_those_of_the_data() -> None:
    net = make_network(5, 1, 8, seed=4, value_hidden=16)
    first = next(m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d))
    seen: list[torch.Tensor] = []
    conv = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    hook = conv.register_forward_hook(lambda m, i, out: seen.append(out.detach()))
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.rand(32, 17, 5, 5, generator=gen) < 0.3).to(torch.uint8) for _ in range(4)]
    refresh_batchnorm(net, batches)
    hook.remove()
    outputs = torch.cat(seen)  # the first conv's output feeds the first batch norm
    assert len(seen) == 4
    torch.testing.assert_close(first.running_mean, outputs.mean(dim=(0, 2, 3)))
    assert first.momentum == 0.1 and not net.training


def test_an_averaged_checkpoint_names_what_it_averages(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "data", "r")
    for i in (1, 2, 3):
        net = make_network(5, 1, 8, seed=i, value_hidden=16)
        layout.model_dir(i).mkdir(parents=True)
        save_checkpoint(layout.model(i), net, {"model_id": layout.model_id(i), "seed": i,
                                              "global_step": 10 * i, "parent": None})  # fmt: skip
    layout.worker(3, 0).mkdir(parents=True)
    write_shard(layout.worker(3, 0) / "shard.parquet", synthetic_records(5, 20, 30, seed=0))
    out = averaged_checkpoint(layout, 3, 2, tmp_path / "avg.pt")
    net, metadata = load_checkpoint(out, expect_board_size=5)
    assert metadata["model_id"] == "r/avg-2-iter-0003"
    assert metadata["averaged"] == ["r/iter-0002", "r/iter-0003"]
    assert metadata["global_step"] == 30
    plain = [load_checkpoint(layout.model(i))[0].state_dict() for i in (2, 3)]
    name = next(k for k in plain[0] if k.endswith("weight"))  # a weight, not a statistic
    torch.testing.assert_close(net.state_dict()[name], (plain[0][name] + plain[1][name]) / 2)
