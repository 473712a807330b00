"""Fixtures for the end-to-end UI test: a tracking store, the MLflow server on it, a browser.

The store comes in two ways, and the test does not care which:

* default: ``pipeline_store`` runs the real pipeline (Prefect, DVC, MLflow) twice, two runs of
  two short iterations in one fresh user repository, and serves the store they leave (the
  experiment ``tabula``, a parent run per pipeline run with its iteration children, losses by
  global step, Elo by iteration, DVC datasets as inputs, model versions and the ``champion``
  alias);
* ``TABULA_UI_STORE=DIR``: an existing store, where ``DIR`` holds ``mlflow.db`` (and
  ``artifacts/``) or is a project whose ``mlflow/`` does, e.g. after ``make run``.

Everything the test checks is read back from the store itself.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli.clone import empty_project
from tests.conftest import TINY

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


#: A short real run: the tests/flows TINY config with 10-step training stages (one loss point
#: each at the 10-step logging interval, so the curves have real steps 9 and 19) and a gate (the
#: quick start has none; the UI shows the gate's win rate too) that promotes a candidate winning
#: any of its games, so that two iterations leave loss curves and a champion for the UI to show.
UI_RUN = [
    *TINY,
    "pipeline.name=ui",
    "training.steps=10",
    "training.checkpoint_every=10",
    "evaluation.gating=true",
    "evaluation.gating_threshold=0.01",
]
UI_ITERATIONS = 2
UI_SECOND_RUN = "ui-b"


def pipeline_store(root: Path) -> UiStore:
    """The store that a real two-iteration ``tabula run`` (Prefect, DVC, MLflow) leaves in a
    fresh user repository under ``root``. Needs a Prefect API (the ``prefect_server`` fixture).
    """
    from flows.pipeline import run_pipeline
    from tabula.config import load_config

    project = empty_project(root / "project")
    rows = run_pipeline(load_config(None, UI_RUN), project, iterations=UI_ITERATIONS)
    # The UI must show a champion alias; with a fixed seed the gates decide the same each time.
    assert any(r.promoted for r in rows), f"no promotion in the UI run: {rows}"
    assert all(r.win_rate is not None for r in rows)  # gated: the UI shows the gate's chart
    # A second run of the project, to compare with the first (its Elo beside the first's).
    second = load_config(None, [*UI_RUN, f"pipeline.name={UI_SECOND_RUN}", "pipeline.seed=1"])
    run_pipeline(second, project, iterations=UI_ITERATIONS)
    return UiStore(
        f"sqlite:///{project / 'mlflow' / 'mlflow.db'}", project / "mlflow" / "artifacts"
    )


def existing_store(spec: str) -> UiStore:
    """The store named by ``TABULA_UI_STORE``: a folder with ``mlflow.db`` or a project."""
    base = Path(spec).expanduser().resolve()
    for folder in (base, base / "mlflow"):
        if (folder / "mlflow.db").is_file():
            return UiStore(f"sqlite:///{folder / 'mlflow.db'}", folder / "artifacts")
    raise pytest.UsageError(f"TABULA_UI_STORE={spec}: no mlflow.db there or in its mlflow/")


@pytest.fixture(scope="module")
def ui_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> UiStore:
    """The store the UI test looks at (see the module docstring)."""
    spec = os.environ.get("TABULA_UI_STORE")
    if spec:
        return existing_store(spec)
    request.getfixturevalue("prefect_server")
    return pipeline_store(tmp_path_factory.mktemp("ui-run"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_url(ui_store: UiStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of an MLflow server on ``ui_store`` (the same server ``tabula ui`` runs)."""
    from cli.ui import start_ui, stop_ui, ui_url

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
