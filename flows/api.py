"""The Prefect API a run's flows report to: ``pipeline.prefect_api_url``, else Prefect's own
setting (``PREFECT_API_URL``, a profile), else a temporary server of this process.

Prefect reads its settings once, when it is imported, so the configured URL is applied as a
settings context (`prefect_api`), not by changing the environment afterwards.

Prefect starts its own temporary server in the caller's process group. Ctrl-C in a terminal (or
a ``kill`` of the group) then stops that server as well as the run, and the run, unwinding, waits
minutes on a dead API before it exits. The server started here runs in its own session, so it
sees no signal meant for the run; it stops when the process exits (``atexit``, after Prefect's
own exit handlers have sent their last events) or, on Linux, when the process dies
(``PR_SET_PDEATHSIG``), so that a SIGKILL leaves no server behind. Its CPU-seconds count in the
run's budget like any child's (`tasks.run.cputime`).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpx

from tabula.errors import TabulaError, UsageError

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class TemporaryServer:
    """A Prefect API server (no UI) on a free local port, in a session of its own; `stop`
    terminates it. The command and environment are those of Prefect's temporary server."""

    def __init__(self) -> None:
        """Start the server (`wait_healthy` waits until it answers)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))  # the server inherits the bound socket: no port race
        # uvicorn takes an inherited socket for a Unix one and leaves Nagle's algorithm on for
        # the connections it accepts: each response's body then waits ~40 ms for the client's
        # delayed ACK. Accepted sockets inherit the option from the listener.
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = listener.getsockname()[1]
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", "--factory",
                "prefect.server.api.server:create_app", "--fd", str(listener.fileno()),
                "--log-level", "error", "--lifespan", "on",
            ],
            env=_server_environment(),
            pass_fds=(listener.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with(os.getpid()),
        )  # fmt: skip
        listener.close()
        self.healthy = False

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def wait_healthy(self, timeout_s: float) -> None:
        """Return once the server answers (at once after the first time); TabulaError when it
        exits first, or gives no answer within ``timeout_s``."""
        if self.healthy:
            return
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise TabulaError(
                        f"the temporary Prefect server exited with code "
                        f"{self.process.returncode} before it answered (its error is above)"
                    )
                try:
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        self.healthy = True
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise TabulaError(
            f"the temporary Prefect server did not answer within {timeout_s:.0f} s "
            "(raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, or set PREFECT_API_URL)"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


_server: TemporaryServer | None = None

_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def _named_api(url: str | None) -> str | None:
    """``url``, else Prefect's own setting; None: the flows report to this process's temporary
    server."""
    from prefect.settings import PREFECT_API_URL

    return url or PREFECT_API_URL.value() or None


def require_api_for(url: str | None, dask_address: str | None) -> None:
    """Refuse a Dask scheduler on another machine when the flows would report to this
    process's temporary server: it listens on 127.0.0.1, which the Dask workers, handed the
    flow's settings, would take for their own machine. Checked before the run makes anything."""
    if not dask_address or _named_api(url):
        return
    host = urlsplit(dask_address if "://" in dask_address else f"tcp://{dask_address}").hostname
    if host is not None and host not in _LOOPBACK:
        raise UsageError(
            f"the Dask scheduler {dask_address} is not on this machine, so its workers cannot "
            "reach this run's temporary Prefect server: start a Prefect server they can reach "
            "and name it in PREFECT_API_URL or pipeline.prefect_api_url (docs/scaling-out.md)"
        )


def start_server_for(url: str | None) -> None:
    """Start this process's temporary server now when the flows will report to it (``url``
    and Prefect's own setting name no API), without waiting for it to answer: a run's checks
    and start go on while it starts (`prefect_api` waits for it). Nothing when one runs."""
    global _server
    if _named_api(url) is None and (_server is None or _server.process.poll() is not None):
        _server = TemporaryServer()
        atexit.register(_server.stop)


def start_api_for(url: str | None, dask_address: str | None) -> None:
    """What a run does about its Prefect API first: refuse a Dask scheduler that this
    process's temporary server could not serve (`require_api_for`), then start that server when
    the flows will report to it (`start_server_for`), so that it starts while the run goes on."""
    require_api_for(url, dask_address)
    start_server_for(url)


@contextmanager
def prefect_api(url: str | None) -> Iterator[str]:
    """Run the body's flows against ``url``; None: Prefect's own setting, else this process's
    temporary server (`start_server_for`: started on first use, or before, and stopped at
    exit). Yields the API URL."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    url = _named_api(url)
    if url is None:
        start_server_for(None)
        assert _server is not None
        _server.wait_healthy(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
        url = _server.api_url
    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield url


def _server_environment() -> dict[str, str]:
    from prefect.settings import get_current_settings

    return {
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # unless the user's environment says
        **os.environ,
        **get_current_settings().to_environment_variables(exclude_unset=True),
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
    }


def _die_with(parent: int):
    """A ``preexec_fn``: the child gets SIGTERM when ``parent`` dies (Linux; elsewhere it
    outlives a SIGKILL of the run). libc is loaded here, before the fork."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # died before the prctl took hold
            os._exit(1)

    return preexec
