"""Shared by the evaluation tests: a 5x5 config and a tiny checkpoint for network players."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tabula.config import Config, load_config


def _config5(*overrides: str) -> Config:
    base = ["rules.board_size=5", "rules.komi=0.5", "evaluation.simulations=8"]
    return load_config(None, [*base, *overrides])


@pytest.fixture(scope="session")
def config5() -> Callable[..., Config]:
    """5x5, komi 0.5 (so neither colour wins by komi alone), tiny searches; plus overrides."""
    return _config5


@pytest.fixture(scope="session")
def fake_gtp() -> Path:
    """A GTP engine script that misbehaves on purpose (its docstring lists the modes)."""
    return Path(__file__).parent / "fake_engines" / "fake_gtp.py"


@pytest.fixture(scope="module")
def cfg5() -> Config:
    return _config5()


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny networks at small batches: a second thread only adds contention (10x slower on a
    loaded 2-core machine), so network players run torch on one thread, restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None) -> Path:
    """A freshly initialised 1-block, 8-filter 5x5 network (its raw policy passes early)."""
    from model.checkpoint import save_checkpoint
    from model.network import make_network

    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    net = make_network(5, blocks=1, filters=8, seed=0, value_hidden=16)
    save_checkpoint(path, net, {"model_id": "tiny"})
    return path
