"""The root of the tests (a package: ``tests/__init__.py``), loaded before every directory's own
conftest. Being here puts the repository root on ``sys.path``, so every test imports shared
code the same way, whatever its directory: ``tests.helpers.*`` (board diagrams and the
reference Go, the network-free evaluators and tree recounts of the search tests, numba's
compile checks; `tests.helpers`), and the code under test itself, ``bench`` included (its
tests are ``tests/bench``'s).

The folders mirror the code (``docs/testing.md``): ``tests/tasks`` tests ``tasks/``,
``tests/flows`` ``flows/``, ``tests/bench`` ``bench/``, ``tests/model`` ``model/``, and the
``tabula`` layer's tests are by subject (``tests/go``, ``tests/mcts``, ``tests/eval``, ...).
Fixtures used by one folder stay in its conftest (``tests/model``, ``tests/e2e``); fixtures
shared across folders belong here: the pipeline's (a real Prefect server, a temp git repo
standing in for a user's clone, ``TINY``: the config whose iteration takes seconds), used by
``tests/flows``, ``tests/tasks`` and ``tests/e2e``; and 5x5 games with a tiny network (configs,
a checkpoint, one torch thread, a misbehaving GTP engine), used by ``tests/eval`` and
``tests/tasks``. Everything is real: Prefect's test harness server (SQLite), MLflow on SQLite
in the temp repo, DVC with a local directory remote; only the sizes shrink.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cli.clone import empty_project
from tabula.config import Config, load_config

TINY = [
    "rules.board_size=5",
    "network.blocks=1",
    "network.filters=8",
    "network.value_hidden=16",
    "search.simulations=4",
    "search.leaves_per_game=2",
    "selfplay.games=4",
    "selfplay.workers=2",
    # Threads, not the default's two processes (each imports torch): the same bytes
    # (tests/tasks/test_workers.py), and tests/flows/test_resume.py runs processes too.
    "selfplay.processes=false",
    "selfplay.concurrent_games=2",
    "selfplay.sgf_sample=1",
    "selfplay.batch_size=8",
    "training.batch_size=16",
    "training.steps=4",
    "training.samples_per_row=null",  # a fixed 4 steps an iteration, which the tests count on
    "training.lr_boundaries=[6]",
    "training.lr_values=[0.01,0.001]",
    "training.checkpoint_every=4",
    "evaluation.gating_games=2",
    "evaluation.simulations=4",
    "evaluation.anchor_games=2",
    "evaluation.anchors=[]",  # GnuGo's games are tests/flows/test_anchors.py's
    "evaluation.anchor_every=1",  # the random player's games every iteration
    "pipeline.hours=null",  # runs of the iterations asked, not the quick start's wall clock
    "pipeline.budget_overshoot=null",
    "pipeline.name=tiny",
]


@pytest.fixture(scope="session")
def prefect_server():
    """One real Prefect API (the test harness's temporary SQLite server) for the session;
    the value is its URL, for ``tabula run`` subprocesses and workers."""
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        url = str(PREFECT_API_URL.value())  # read here: Prefect's settings context is per thread
        assert url.startswith("http"), url
        yield url


@pytest.fixture
def tiny_config() -> Config:
    return load_config(None, TINY)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A temp git repo standing in for a user's clone (DVC is initialised by the pipeline)."""
    return empty_project(tmp_path / "project")


# -- 5x5 games and a tiny network: the arena, gating, player and engine tests ----------------


def _config5(*overrides: str) -> Config:
    base = ["rules.board_size=5", "rules.komi=0.5", "evaluation.simulations=8"]
    return load_config(None, [*base, *overrides])


@pytest.fixture(scope="session")
def config5() -> Callable[..., Config]:
    """5x5, komi 0.5 (so neither colour wins by komi alone), tiny searches; plus overrides."""
    return _config5


@pytest.fixture(scope="module")
def cfg5() -> Config:
    return _config5()


@pytest.fixture(scope="session")
def fake_gtp() -> Path:
    """A GTP engine script that misbehaves on purpose (its docstring lists the modes)."""
    return Path(__file__).parent / "helpers" / "fake_gtp.py"


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
