"""What the cluster asks of this machine: commands, the network of namespaces, processes
marked as the cluster's, and probes of its ports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cli.cluster.folder import make_private, open_log
from cli.cluster.layout import (
    BRIDGE,
    HOST,
    HOSTS,
    MARK,
    START_TIMEOUT_S,
    Cluster,
    ClusterError,
    basic_auth,
    namespace,
)
from cli.cluster.users import Account

_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def sh(*argv: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    # Without the cluster's mark, unless given: `down` stops what carries it by signals of its
    # own, and PostgreSQL (started through here) by pg_ctl.
    kwargs.setdefault("env", {k: v for k, v in os.environ.items() if k != MARK})
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if check and done.returncode != 0:
        raise ClusterError(f"{' '.join(argv[:4])} failed: {done.stderr.strip()[-300:]}")
    return done


def console_script(name: str) -> str:
    """A console script of this Python's environment (prefect, dask, mlflow)."""
    return str(Path(sys.executable).parent / name)


def postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise ClusterError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    return found[-1].parent


# --- the network --------------------------------------------------------------------------


def network_up() -> None:
    """The bridge and one namespace per host, each reached over a veth pair."""
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{HOST}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for host, address in HOSTS.items():
        ns, veth = namespace(host), f"tbl-{host}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", HOST)


def network_down() -> None:
    for host in HOSTS:
        ns = namespace(host)
        for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
            kill(int(pid), signal.SIGKILL)
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", f"tbl-{host}", check=False)
    sh("ip", "link", "del", BRIDGE, check=False)


def network_exists() -> bool:
    return sh("ip", "link", "show", BRIDGE, check=False).returncode == 0


IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def forwarding_warning(setting: Path = IP_FORWARD) -> str | None:
    """A line of warning when this machine forwards IP packets (``setting`` reads 1): then
    another machine that routes 10.77.0.0/24 through this one reaches the cluster's servers,
    which bind to the bridge only to be out of reach from outside."""
    if not setting.is_file() or setting.read_text().strip() == "0":
        return None
    return (
        f"warning: IP forwarding is on ({setting} is 1): machines that route {HOST}/24 "
        f"through this one reach the cluster's servers; turn it off "
        "(sysctl net.ipv4.ip_forward=0) or firewall the bridge " + BRIDGE
    )


# --- processes ----------------------------------------------------------------------------


#: The processes this process started, so that one that exits is seen at once (not a zombie).
_CHILDREN: dict[int, subprocess.Popen] = {}


def start(
    cluster: Cluster,
    name: str,
    argv: list[str],
    env: dict[str, str],
    host: str | None = None,
    umask: int = 0o077,
    account: Account | None = None,
) -> int:
    """Start ``argv`` in its own session (in ``host``'s namespace when given), as ``account``
    (`cli.cluster.users`; this process's user when not given), marked with `MARK`, its output
    in ``logs/NAME.log`` (opened here, root's), what it makes readable by its owner only
    unless ``umask`` (-1: this process's) says otherwise; record and return its pid."""
    make_private(cluster.logs)
    prefix = ["ip", "netns", "exec", namespace(host)] if host else []
    user = account.prefix() if account else []
    with open_log(cluster.logs / f"{name}.log") as log:
        proc = subprocess.Popen(
            prefix + user + argv,
            env={**env, **(account.env() if account else {}), MARK: str(cluster.folder)},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=env.get("TABULA_PROJECT", "/"),
            umask=umask,
        )
    _CHILDREN[proc.pid] = proc
    cluster.remember(name, proc.pid)
    return proc.pid


def alive(pid: int) -> bool:
    if pid in _CHILDREN:
        return _CHILDREN[pid].poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def marked_processes(cluster: Cluster) -> list[int]:
    """The pids of the processes that carry this cluster's `MARK` (this process and its
    ancestors aside)."""
    mine, pid = set(), os.getpid()
    while pid > 1:
        mine.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    mark = f"{MARK}={cluster.folder}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        if mark in environ:
            found.append(int(entry.name))
    return found


def kill(pid: int, sig: int = signal.SIGTERM) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_process(pid: int, grace_s: float = 15.0) -> None:
    """SIGTERM to the process group of ``pid``, SIGKILL after ``grace_s``."""
    stop_groups({pid}, grace_s)


def stop_groups(leaders: set[int], grace_s: float = 15.0) -> None:
    """SIGTERM to each process group (named by its leader's pid), all at once; SIGKILL to
    those whose leader still runs after ``grace_s``."""
    for pid in leaders:
        kill(pid)
    deadline = time.monotonic() + grace_s
    while any(alive(pid) for pid in leaders) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in leaders:
        kill(pid, signal.SIGKILL)


def process_groups(pids: list[int]) -> set[int]:
    """The process groups (their leaders' pids) of ``pids``, those gone aside."""
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    return groups


def wait_for(
    what: str, ready, log: Path, pid: int | None = None, timeout_s: float = START_TIMEOUT_S
) -> None:
    """Wait until ``ready()``; fail with the last line of ``log`` when process ``pid`` ends
    or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (pid is None or alive(pid)):
        if ready():
            return
        time.sleep(0.5)
    tail = log.read_text()[-400:].strip().splitlines()[-1:] if log.is_file() else []
    why = "exited" if pid is not None and not alive(pid) else f"is not up after {timeout_s:.0f} s"
    raise ClusterError(f"{what} {why} ({log}: {' '.join(tail)})")


def http_ok(url: str, auth: tuple[str, str] | None = None) -> bool:
    request = urllib.request.Request(url, headers=basic_auth(*auth) if auth else {})
    try:
        with _LOCAL.open(request, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def post_json(url: str, body: dict, auth: tuple[str, str]) -> Any:
    """POST ``body`` as JSON with basic auth; the answer's JSON (None for an empty one).
    Raises OSError (urllib's errors among them) when the server does not answer 2xx."""
    headers = {**basic_auth(*auth), "Content-Type": "application/json"}
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    with _LOCAL.open(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text.strip() else None


def port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False
