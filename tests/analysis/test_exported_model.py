"""A checkpoint's MLflow model gives what analysis reads: the ownership and score heads of a
network that has them (the score in points), and a network without them (an older one) the
policy and value alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model.checkpoint import save_checkpoint
from model.network import make_network
from tabula.features import NUM_PLANES
from tasks.tracking.registry import save_pytorch_model


@pytest.mark.parametrize("aux", [True, False])
def test_the_exported_model_has_the_heads_of_its_network(tmp_path, aux):
    import mlflow.models
    import mlflow.pytorch

    net = make_network(5, 1, 8, 0, 16, aux=aux).eval()
    checkpoint = save_checkpoint(tmp_path / "model.pt", net, {"model_id": "m"})
    folder = save_pytorch_model(checkpoint, tmp_path / "mlflow-model", {})
    names = ["policy", "value", "ownership", "score"][: 4 if aux else 2]
    info = mlflow.models.Model.load(str(folder))
    assert [s.name for s in info.signature.outputs.inputs] == names
    loaded = mlflow.pytorch.load_model(str(folder))
    x = torch.from_numpy(np.random.default_rng(0).random((3, NUM_PLANES, 5, 5), np.float32))
    with torch.no_grad():
        got = loaded(x)
        expected = net.forward_aux(x) if aux else net(x)
    assert len(got) == len(names)
    for name, a, b in zip(names, got, expected, strict=True):
        scale = 25 if name == "score" else 1  # the margin in points, not divided by N*N
        assert torch.allclose(a, b * scale, atol=1e-5), name
