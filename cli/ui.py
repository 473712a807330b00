"""The MLflow UI on the project's tracking store: ``tabula ui`` and the line a run prints.

The server is MLflow's own (``python -m mlflow server``), run as a child process on the embedded
store (``sqlite:///mlflow/mlflow.db`` and ``mlflow/artifacts`` by default), bound to 127.0.0.1
so that nothing outside the machine can reach it, with MLflow's usage telemetry switched off.
One worker is enough for one person and starts faster on a small machine.

``start_ui`` returns the running process once the server answers (the end-to-end test drives
it with a browser); ``serve_ui`` runs it in the foreground until Ctrl-C; ``ui_command`` is the
equivalent shell line.

``experiment_links`` gives the two pages a newcomer wants, the runs table of the project's
experiment and its charts, as URLs that open on them in any browser (``experiment_lines``: the
lines that ``tabula ui`` and the end of ``tabula run`` print). A bare experiment URL does not:
MLflow 3 opens an experiment on its GenAI overview ("Traces 0") unless the browser remembers the
"Model training" choice of its sidebar, whatever the experiment's kind.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from tabula.config import without_password, without_userinfo
from tabula.errors import TabulaError
from tasks.tracking import TAG_KIND, experiment_name, find_experiment, is_uri, resolve_uri

# The server is local: never ask an HTTP proxy from the environment for it.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# MLflow 3 reports usage to its own servers unless told not to (MLflow docs, "Telemetry"), and
# starts a job runner with two pools of five workers for its GenAI judges and scheduled tasks:
# a training pipeline's UI needs neither, and on a small machine they double the start-up time.
QUIET_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}


class UiError(TabulaError):
    """The UI cannot start: no store, a busy port, or a server that exits early."""


#: The query parameter that sets the sidebar of MLflow 3's UI (3.17) to "Model training" for the
#: page it opens: the UI reads it before the choice a browser remembers (local storage
#: ``mlflow.workflowType``), which is "GenAI" in a fresh browser. Under "GenAI" an experiment
#: opens on its overview of traces.
TRAINING_VIEW = {"workflowType": "machine_learning"}
#: The runs the charts compare: the pipeline runs, each with its metrics by iteration. An
#: iteration's own run logs Elo too (one point); expanded in the table, it would add a line to
#: every chart.
PIPELINE_RUNS = f"tags.`{TAG_KIND}` = 'pipeline'"


@dataclass(frozen=True)
class ExperimentLinks:
    """The MLflow UI's pages of one experiment (hash routes of MLflow 3.17's single-page app)."""

    runs: str  # the runs table: each pipeline run, its iterations nested under it
    charts: str  # the chart view of the pipeline runs: Elo, losses, win rates by iteration


def ui_url(host: str = "127.0.0.1", port: int = 5000) -> str:
    return f"http://{host}:{port}"


def experiment_links(experiment_id: str, base: str | None = None) -> ExperimentLinks:
    """The runs table and the charts of experiment ``experiment_id`` on the UI at ``base``
    (default: ``ui_url()``), both in the "Model training" view.

    Each link sets the runs' search filter (empty for the table): a URL without one restores
    the filter the browser used last, so after a visit to the charts the table would show
    theirs. ``compareRunsMode=CHART`` is the runs page's chart view.
    """
    root = f"{(base or ui_url()).rstrip('/')}/#/experiments/{quote(experiment_id, safe='')}/runs"

    def link(**params: str) -> str:
        return f"{root}?{urlencode({**params, **TRAINING_VIEW}, quote_via=quote)}"

    return ExperimentLinks(
        runs=link(searchFilter=""),
        charts=link(compareRunsMode="CHART", searchFilter=PIPELINE_RUNS),
    )


def experiment_lines(
    tracking_uri: str,
    base: str | None = None,
    project: Path | None = None,
    run: str | None = None,
) -> list[str]:
    """Two lines with the runs and charts links of the experiment
    (`tasks.tracking.find_experiment`: ``run``'s, else the project's) on the UI at ``base``
    (default: the tracking server itself when the store is one, else ``ui_url()``), or one
    line saying there is no experiment yet."""
    found = find_experiment(tracking_uri, project, run)
    if found is None:
        return [f"no experiment {experiment_name()!r} in the store yet: run the pipeline first"]
    name, experiment_id = found
    if base is None:
        uri = resolve_uri(tracking_uri, project)
        base = uri if uri.startswith(("http://", "https://")) else ui_url()
    links = experiment_links(experiment_id, without_userinfo(base))
    return [
        f"runs of experiment {name!r}:  {links.runs}",
        f"their charts (Elo, losses by iteration):  {links.charts}",
    ]


def server_argv(
    tracking_uri: str,
    artifact_root: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 5000,
    project: Path | None = None,
    python: str | None = None,
) -> list[str]:
    """The ``mlflow server`` command line for the store at ``tracking_uri``.

    A relative ``sqlite:///`` URI and a relative ``artifact_root`` are taken from ``project``
    (default: the current directory), so the command works from any folder.
    """
    store = ["--backend-store-uri", resolve_uri(tracking_uri, project)]
    if artifact_root is not None:
        root = str(artifact_root)
        if not is_uri(root):
            root = str(((project or Path.cwd()) / root).resolve())
        store += ["--default-artifact-root", root]
    network = ["--host", host, "--port", str(port), "--workers", "1"]
    return [python or sys.executable, "-m", "mlflow", "server", *store, *network]


def ui_command(
    tracking_uri: str,
    artifact_root: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 5000,
    project: Path | None = None,
) -> str:
    """One shell line that serves the UI on this store (printed at the end of a run); a
    password in the store's URI (``MLFLOW_TRACKING_URI`` may hold one) is shown as ``***``."""
    env = " ".join(f"{k}={v}" for k, v in QUIET_ENV.items())
    argv = server_argv(tracking_uri, artifact_root, host, port, project)
    return f"{env} {shlex.join(without_password(a) for a in argv)}"


def start_ui(
    tracking_uri: str,
    artifact_root: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 5000,
    project: Path | None = None,
    timeout_s: float = 60.0,
    log: Path | None = None,
) -> subprocess.Popen:
    """Start the server and return it once ``/health`` answers; the caller stops it.

    Raises ``UiError`` when the SQLite store does not exist, the port is taken, or the server
    exits (or stays silent for ``timeout_s``) before answering. Its output goes to ``log``
    (default: discarded, MLflow logs every request).
    """
    uri = resolve_uri(tracking_uri, project)
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        raise UiError(
            f"no MLflow store at {uri.removeprefix('sqlite:///')}: run the pipeline "
            "first (make run)"
        )
    _check_port_free(host, port)
    argv = server_argv(tracking_uri, artifact_root, host, port, project)
    sink = open(log, "ab") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        argv,
        stdout=sink,
        stderr=subprocess.STDOUT,
        env={**os.environ, **QUIET_ENV},
        start_new_session=True,
    )
    if log is not None:
        sink.close()  # the child holds its own handle
    try:
        _wait_ready(proc, ui_url(host, port), timeout_s)
    except BaseException:
        stop_ui(proc)
        raise
    return proc


def stop_ui(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Stop a server from ``start_ui`` and its workers (they share its process group)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def serve_ui(
    tracking_uri: str,
    host: str = "127.0.0.1",
    port: int = 5000,
    artifact_root: str | Path | None = None,
    project: Path | None = None,
) -> int:
    """Serve the UI in the foreground until Ctrl-C or the server exits; its exit code.

    Prints its URL, then the links to the project experiment's runs and charts
    (`experiment_lines`).
    """
    proc = start_ui(tracking_uri, artifact_root, host, port, project)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server too
    try:
        print(f"MLflow UI: {ui_url(host, port)}  (Ctrl-C to stop)", flush=True)
        for line in experiment_lines(tracking_uri, ui_url(host, port), project):
            print(line, flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop_ui(proc)
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the server will: a port left in TIME_WAIT by an earlier server is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise UiError(
                f"cannot serve the UI on {host}:{port} ({exc.strerror}): choose another --port"
            ) from None


def _wait_ready(proc: subprocess.Popen, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UiError(
                f"the MLflow server exited with code {proc.returncode} before answering on {url}"
            )
        try:
            with _LOCAL.open(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise UiError(f"the MLflow server did not answer on {url} within {timeout_s:.0f} s")
