"""The root of the tests (a package: ``tests/__init__.py``), loaded before every directory's own
conftest. Being here puts the repository root on ``sys.path``, so every test imports shared
code the same way, whatever its directory:

- ``tests.helpers.go`` / ``tests.helpers.mcts``: board diagrams, the reference Go, and the
  network-free evaluators and tree recounts of the search tests (`tests.helpers`);
- ``bench.playout``: the benchmarks' incremental engine, which its tests check.

Fixtures used by one layer stay in that layer's conftest (``tests/model``, ``tests/eval``,
``tests/e2e``); fixtures shared across layers belong here: the pipeline's (a real Prefect
server, a temp git repo standing in for a user's clone, ``TINY``: the config whose iteration
takes seconds), used by ``tests/flows`` and ``tests/e2e``. Everything is real: Prefect's test
harness server (SQLite), MLflow on SQLite in the temp repo, DVC with a local directory remote;
only the sizes shrink.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tabula.config import Config, load_config
from tests.repos import make_user_repo

TINY = [
    "rules.board_size=5",
    "network.blocks=1",
    "network.filters=8",
    "network.value_hidden=16",
    "search.simulations=4",
    "search.leaves_per_game=2",
    "selfplay.games=4",
    "selfplay.workers=2",
    "selfplay.concurrent_games=2",
    "selfplay.sgf_sample=1",
    "selfplay.batch_size=8",
    "training.batch_size=16",
    "training.steps=4",
    "training.lr_boundaries=[6]",
    "training.lr_values=[0.01,0.001]",
    "training.checkpoint_every=4",
    "evaluation.gating_games=2",
    "evaluation.simulations=4",
    "evaluation.anchor_games=2",
    "evaluation.anchors=[]",  # GnuGo's games are tests/flows/test_anchors.py's
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
    return make_user_repo(tmp_path / "project")
