"""Fixtures for the end-to-end UI test: a tracking store, the MLflow server on it, a browser.

The store comes in two ways, and the test does not care which:

* default: ``build_store`` writes, through ``tasks.tracking``, the layout a pipeline run leaves
  (experiment ``tabula/<run>``, a parent run with two iteration children, losses by global
  step, Elo by iteration, DVC datasets as inputs, two model versions and a ``champion`` alias);
* ``TABULA_UI_STORE=DIR``: an existing store, where ``DIR`` holds ``mlflow.db`` (and
  ``artifacts/``) or is a project whose ``mlflow/`` does, e.g. after ``make run``.

To use a real short pipeline run in CI, override ``ui_store`` (module scope) in this file or in
the test module to return a ``UiStore`` for that run's store; everything the test checks is read
back from the store itself.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps calling home, and on a closed network
# those refused connections stall it; no sandbox because CI runs as root in a container, and
# no /dev/shm because a container's is 64 MB, too small for the UI's pages.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@dataclass(frozen=True)
class UiStore:
    """An MLflow store to serve: a tracking URI and the artifact root beside it."""

    tracking_uri: str
    artifact_root: Path


def dvc_md5(text: str) -> str:
    """A digest shaped like DVC's hash of a tracked folder (32 hex digits + ``.dir``)."""
    return hashlib.md5(text.encode()).hexdigest() + ".dir"


def build_store(root: Path, run: str = "quickstart", model: str = "tabula-9x9") -> UiStore:
    """Write the tracking store of a two-iteration run of ``run`` under ``root``.

    Calls the same ``tasks.tracking`` functions, with the same names, tags and steps, that the
    pipeline's recording tasks use (``tasks/record.py``).
    """
    from tasks import tracking

    store = UiStore(f"sqlite:///{root / 'mlflow.db'}", root / "artifacts")
    client = tracking.connect(store.tracking_uri)
    exp = tracking.experiment(client, f"tabula/{run}", store.artifact_root)
    params = {
        "rules.board_size": 9,
        "rules.komi": 7.5,
        "search.simulations": 32,
        "training.steps": 100,
        "pipeline.seed": 0,
    }
    parent = tracking.find_or_create_run(
        client, exp, {tracking.TAG_RUN: run, tracking.TAG_KIND: "pipeline"}, run
    )
    tracking.log_params(client, parent, params)
    for i in (1, 2):
        child = _iteration(client, exp, run, i, parent, params, root)
        version = tracking.register_checkpoint(
            client,
            model,
            child,
            _checkpoint(root, i),
            hashlib.sha256(b"%d" % i).hexdigest(),
            {"tabula.iteration": i, "tabula.parent": f"{run}/iter-{i - 1:04d}"},
        )
        if i == 2:  # the promoted network
            tracking.set_alias(client, model, "champion", version)
        tracking.finish(client, child)
    tracking.finish(client, parent)
    return store


def _iteration(client, exp: str, run: str, i: int, parent: str, params: dict, root: Path) -> str:
    from tasks import tracking

    key = {tracking.TAG_RUN: run, tracking.TAG_KIND: "iteration", tracking.TAG_ITERATION: str(i)}
    child = tracking.find_or_create_run(client, exp, key, f"iter-{i:04d}", parent_id=parent)
    tracking.log_params(client, child, params)
    steps = range((i - 1) * 100 + 1, i * 100 + 1, 5)  # the global step: losses carry on
    policy = {s: 4.4 * math.exp(-s / 400) + 1.0 for s in steps}  # decaying, like a real run
    value = {s: 0.9 * math.exp(-s / 300) + 0.1 for s in steps}
    losses = {
        "train/loss": [(s, policy[s] + value[s]) for s in steps],
        "train/policy_loss": list(policy.items()),
        "train/value_loss": list(value.items()),
        "train/lr": [(s, 0.01) for s in steps],
    }
    tracking.log_metric_series(client, child, losses)
    elo = {
        "elo": 150.0 * i,
        "elo_low": 150.0 * i - 60,
        "elo_high": 150.0 * i + 60,
        "win_rate": 0.5 + 0.1 * i,
    }
    for run_id in (child, parent):  # as tasks.record.log_metrics: child and parent
        tracking.log_metrics(client, run_id, elo, step=i)
    for j in range(1, i + 1):  # the training window: every iteration's self-play so far
        tracking.log_dataset(
            client,
            child,
            f"selfplay-iter-{j:04d}",
            f"data/{run}/iter-{j:04d}/selfplay",
            dvc_md5(f"{run}/{j}"),
        )
    return child


def _checkpoint(root: Path, i: int) -> Path:
    path = root / "checkpoints" / f"iter-{i:04d}" / "model.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a real network %d\n" % i)
    return path


def existing_store(spec: str) -> UiStore:
    """The store named by ``TABULA_UI_STORE``: a folder with ``mlflow.db`` or a project."""
    base = Path(spec).expanduser().resolve()
    for folder in (base, base / "mlflow"):
        if (folder / "mlflow.db").is_file():
            return UiStore(f"sqlite:///{folder / 'mlflow.db'}", folder / "artifacts")
    raise pytest.UsageError(f"TABULA_UI_STORE={spec}: no mlflow.db there or in its mlflow/")


@pytest.fixture(scope="module")
def ui_store(tmp_path_factory: pytest.TempPathFactory) -> UiStore:
    """The store the UI test looks at (see the module docstring)."""
    spec = os.environ.get("TABULA_UI_STORE")
    if spec:
        return existing_store(spec)
    return build_store(tmp_path_factory.mktemp("mlflow"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_url(ui_store: UiStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of an MLflow server on ``ui_store`` (the same server ``tabula ui`` runs)."""
    from tasks.ui import start_ui, stop_ui, ui_url

    port = _free_port()
    log = tmp_path_factory.mktemp("mlflow-server") / "server.log"
    proc: subprocess.Popen = start_ui(
        ui_store.tracking_uri, ui_store.artifact_root, port=port, timeout_s=90, log=log
    )
    try:
        yield ui_url("127.0.0.1", port)
    finally:
        stop_ui(proc)


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: ``TABULA_SCREENSHOTS`` if set (kept), else a temporary folder."""
    keep = os.environ.get("TABULA_SCREENSHOTS")
    folder = Path(keep) if keep else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's headless Chromium under Playwright (no browser download)."""
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
