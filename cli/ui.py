"""The MLflow UI on the project's tracking store: ``tabula ui`` and the line a run prints.

The server is MLflow's own (``python -m mlflow server``), run as a child process on the embedded
store (``sqlite:///mlflow/mlflow.db`` and ``mlflow/artifacts`` by default), bound to 127.0.0.1
so that nothing outside the machine can reach it, with MLflow's usage telemetry switched off.
One worker is enough for one person and starts faster on a small machine.

``start_ui`` returns the running process once the server answers (the end-to-end test drives
it with a browser); ``serve_ui`` runs it in the foreground until Ctrl-C; ``ui_command`` is the
equivalent shell line.
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
from pathlib import Path

from tabula.errors import TabulaError
from tasks.tracking import resolve_uri

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


def ui_url(host: str = "127.0.0.1", port: int = 5000) -> str:
    return f"http://{host}:{port}"


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
        if "://" not in root:
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
    """One shell line that serves the UI on this store (printed at the end of a run)."""
    env = " ".join(f"{k}={v}" for k, v in QUIET_ENV.items())
    argv = server_argv(tracking_uri, artifact_root, host, port, project)
    return f"{env} {shlex.join(argv)}"


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
    """Serve the UI in the foreground until Ctrl-C or the server exits; its exit code."""
    proc = start_ui(tracking_uri, artifact_root, host, port, project)
    print(f"MLflow UI: {ui_url(host, port)}  (Ctrl-C to stop)", flush=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server too
    try:
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
