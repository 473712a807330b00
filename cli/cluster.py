"""``tabula cluster up|down|status|restart|exec``: the layout of docs/scaling-out.md on one machine.

Every server a cluster needs, each on its own address of a private network, as separate hosts
would be:

=================  ==================  ==========================================================
host (namespace)   address             what runs there
=================  ==================  ==========================================================
(this machine)     10.77.0.1           PostgreSQL; the MLflow tracking server on it, serving the
                                       artifacts, with MLflow's basic-auth app; the Prefect
                                       server on it, with its API auth string; a process work
                                       pool's worker, which runs the flows
``tabula-dask``    10.77.0.10          the Dask scheduler
``tabula-w1/w2``   10.77.0.11, .12     one single-threaded Dask worker each (self-play)
``tabula-host2``   10.77.0.20          nothing: "another host" to clone and reproduce from
=================  ==================  ==========================================================

The hosts are network namespaces joined to a bridge (``tabula0``) by veth pairs; they share
this machine's file system, which stands in for the shared project folder and the shared DVC
remote (``DIR/dvc-remote``). Every server binds to the bridge's address only.

The credentials live in ``DIR/secrets.env`` (mode 0600, made at the first ``up`` with random
values; a variable of the same name in the environment wins), outside the repository. They
reach the servers and clients as environment variables, never as arguments, so no command line,
config, frozen ``params.yaml``, MLflow param or log shows them. ``DIR/client.env`` holds what a
client needs; ``tabula cluster exec -- CMD`` runs CMD with it.

``down`` stops every process and removes the namespaces and the bridge; the data (the
databases, artifacts, DVC remote) stay in DIR for the next ``up`` (``down --purge`` removes DIR).
Needs root (namespaces) and Debian's ``postgresql`` package.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from cli.common import QUIET_DEFAULTS, expected_errors
from tabula.errors import TabulaError, UsageError

BRIDGE = "tabula0"
NETWORK = "10.77.0"
HOST = f"{NETWORK}.1"
#: The other hosts: name (namespace ``tabula-NAME``, veth end ``tbl-NAME``) -> address.
HOSTS = {
    "dask": f"{NETWORK}.10",
    "w1": f"{NETWORK}.11",
    "w2": f"{NETWORK}.12",
    "host2": f"{NETWORK}.20",
}
DASK_WORKERS = ("w1", "w2")
PORTS = {"postgres": 5432, "mlflow": 5000, "prefect": 4200, "dask": 8786, "dashboard": 8787}
USER = "tabula"  # the PostgreSQL role, the MLflow admin and the Prefect API user
DATABASES = ("mlflow", "mlflow_auth", "prefect")
POOL = "tabula-process"  # prefect.yaml's work pool
DEPLOYMENT = "tabula-scheduled-pipeline/cluster"
DEFAULT_DIR = Path("/var/tmp/tabula-cluster")
SECRET_NAMES = (
    "TABULA_CLUSTER_DB_PASSWORD",
    "TABULA_CLUSTER_MLFLOW_PASSWORD",
    "TABULA_CLUSTER_MLFLOW_SECRET_KEY",
    "TABULA_CLUSTER_PREFECT_PASSWORD",
)
#: Every process of a cluster carries its folder in this variable: ``down`` finds them by it
#: (the flows a Prefect worker starts run in sessions of their own), and never kills another.
MARK = "TABULA_CLUSTER_DIR"
#: How long a server may take to answer after its start (a first start migrates its database).
START_TIMEOUT_S = 240.0
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))

app = typer.Typer(
    help="A local cluster (PostgreSQL, MLflow and Prefect servers, Dask workers on their own "
    "addresses) to run the pipeline through its deployment.",
    no_args_is_help=True,
)


class ClusterError(TabulaError):
    """The cluster cannot start, or is not there."""


def namespace(host: str) -> str:
    return f"tabula-{host}"


def mlflow_url() -> str:
    return f"http://{HOST}:{PORTS['mlflow']}"


def mlflow_probe_url() -> str:
    """A cheap MLflow request that needs the credentials: up answers it once the server is."""
    return f"{mlflow_url()}/api/2.0/mlflow/experiments/search?max_results=1"


def prefect_url() -> str:
    return f"http://{HOST}:{PORTS['prefect']}"


def dask_address() -> str:
    return f"tcp://{HOSTS['dask']}:{PORTS['dask']}"


@dataclass(frozen=True)
class Cluster:
    """A cluster's folder and what it holds."""

    folder: Path

    @property
    def state(self) -> Path:
        return self.folder / "cluster.json"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    @property
    def postgres(self) -> Path:
        return self.folder / "postgres"

    @property
    def dvc_remote(self) -> Path:
        return self.folder / "dvc-remote"

    @property
    def artifacts(self) -> Path:
        return self.folder / "mlflow-artifacts"

    def read_state(self) -> dict:
        return json.loads(self.state.read_text()) if self.state.is_file() else {}

    def write_state(self, state: dict) -> None:
        _write_private(self.state, json.dumps(state, indent=2) + "\n")

    def remember(self, name: str, pid: int) -> None:
        """Record process ``name``'s pid (``down`` stops it first, before the rest)."""
        state = self.read_state()
        state.setdefault("pids", {})[name] = pid
        self.write_state(state)

    def secrets(self) -> dict[str, str]:
        """The credentials in ``secrets.env`` (mode 0600)."""
        return _read_env(self.folder / "secrets.env")

    def make_secrets(self) -> dict[str, str]:
        """The credentials for ``up``: the environment's where it sets them, else those of
        ``secrets.env``, else new random ones; all written back to ``secrets.env``, which the
        other commands read."""
        path = self.folder / "secrets.env"
        stored = _read_env(path) if path.is_file() else {}
        values = {
            name: os.environ.get(name) or stored.get(name) or secrets.token_urlsafe(24)
            for name in SECRET_NAMES
        }
        if values != stored:
            _write_private(path, "".join(f"{k}={v}\n" for k, v in values.items()))
        return values

    def client_env(self, project: Path | None = None) -> dict[str, str]:
        """What a client of the cluster needs in its environment (``client.env``)."""
        s = self.secrets()
        env = {
            "PREFECT_API_URL": f"{prefect_url()}/api",
            "PREFECT_API_AUTH_STRING": f"{USER}:{s['TABULA_CLUSTER_PREFECT_PASSWORD']}",
            "MLFLOW_TRACKING_URI": mlflow_url(),
            "MLFLOW_TRACKING_USERNAME": USER,
            "MLFLOW_TRACKING_PASSWORD": s["TABULA_CLUSTER_MLFLOW_PASSWORD"],
            MARK: str(self.folder),
        }
        if project is not None:
            env["TABULA_PROJECT"] = str(project)
        return env

    def overrides(self) -> list[str]:
        """The ``--set`` items that point a run at this cluster's services."""
        return [
            f"pipeline.mlflow_tracking_uri={mlflow_url()}",
            "pipeline.mlflow_artifact_root=mlflow-artifacts:/tabula",
            f"pipeline.dvc_remote={self.dvc_remote}",
            f"selfplay.workers={len(DASK_WORKERS)}",
        ]


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only, whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _sh(*argv: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if check and done.returncode != 0:
        raise ClusterError(f"{' '.join(argv[:4])} failed: {done.stderr.strip()[-300:]}")
    return done


def _bin(name: str) -> str:
    """A console script of this Python's environment (prefect, dask, mlflow)."""
    return str(Path(sys.executable).parent / name)


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise ClusterError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    return found[-1].parent


# --- the network --------------------------------------------------------------------------


def network_up() -> None:
    """The bridge and one namespace per host, each reached over a veth pair."""
    _sh("ip", "link", "add", BRIDGE, "type", "bridge")
    _sh("ip", "addr", "add", f"{HOST}/24", "dev", BRIDGE)
    _sh("ip", "link", "set", BRIDGE, "up")
    for host, address in HOSTS.items():
        ns, veth = namespace(host), f"tbl-{host}"
        _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        _sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "-n", ns, "route", "add", "default", "via", HOST)


def network_down() -> None:
    for host in HOSTS:
        ns = namespace(host)
        for pid in _sh("ip", "netns", "pids", ns, check=False).stdout.split():
            _kill(int(pid), signal.SIGKILL)
        _sh("ip", "netns", "del", ns, check=False)
        _sh("ip", "link", "del", f"tbl-{host}", check=False)
    _sh("ip", "link", "del", BRIDGE, check=False)


def network_exists() -> bool:
    return _sh("ip", "link", "show", BRIDGE, check=False).returncode == 0


# --- processes ----------------------------------------------------------------------------


#: The processes this process started, so that one that exits is seen at once (not a zombie).
_CHILDREN: dict[int, subprocess.Popen] = {}


def _start(
    cluster: Cluster, name: str, argv: list[str], env: dict[str, str], host: str | None = None
) -> int:
    """Start ``argv`` in its own session (in ``host``'s namespace when given), marked with
    `MARK`, its output in ``logs/NAME.log``; record and return its pid."""
    cluster.logs.mkdir(parents=True, exist_ok=True)
    prefix = ["ip", "netns", "exec", namespace(host)] if host else []
    with open(cluster.logs / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            prefix + argv,
            env={**env, MARK: str(cluster.folder)},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=env.get("TABULA_PROJECT", "/"),
        )
    _CHILDREN[proc.pid] = proc
    cluster.remember(name, proc.pid)
    return proc.pid


def _alive(pid: int) -> bool:
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


def _kill(pid: int, sig: int = signal.SIGTERM) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_process(pid: int, grace_s: float = 15.0) -> None:
    """SIGTERM to the process group of ``pid``, SIGKILL after ``grace_s``."""
    _kill(pid)
    deadline = time.monotonic() + grace_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    _kill(pid, signal.SIGKILL)


def _wait_for(
    what: str, ready, log: Path, pid: int | None = None, timeout_s: float = START_TIMEOUT_S
) -> None:
    """Wait until ``ready()``; fail with the last line of ``log`` when process ``pid`` ends
    or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (pid is None or _alive(pid)):
        if ready():
            return
        time.sleep(0.5)
    tail = log.read_text()[-400:].strip().splitlines()[-1:] if log.is_file() else []
    why = "exited" if pid is not None and not _alive(pid) else f"is not up after {timeout_s:.0f} s"
    raise ClusterError(f"{what} {why} ({log}: {' '.join(tail)})")


def _http_ok(url: str, auth: tuple[str, str] | None = None) -> bool:
    request = urllib.request.Request(url)
    if auth:
        token = b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with _LOCAL.open(request, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


# --- the servers --------------------------------------------------------------------------


def _base_env() -> dict[str, str]:
    from cli.ui import QUIET_ENV

    env = {**os.environ, **QUIET_DEFAULTS, **QUIET_ENV}
    clients = ("PREFECT_API_AUTH_STRING", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
    for name in SECRET_NAMES + clients:
        env.pop(name, None)
    env.pop("PREFECT_API_URL", None)
    return env


def postgres_up(cluster: Cluster, secret: dict[str, str]) -> None:
    """Initialise (once) and start PostgreSQL on the bridge's address, with a password role
    that owns the MLflow and Prefect databases; only the cluster's network may connect."""
    pg = _postgres_bin()
    data, run = cluster.postgres / "data", cluster.postgres / "run"
    as_postgres = ["runuser", "-u", "postgres", "--"]
    cluster.postgres.mkdir(exist_ok=True)
    run.mkdir(exist_ok=True)
    shutil.chown(cluster.postgres, "postgres")
    shutil.chown(run, "postgres")
    fresh = not (data / "PG_VERSION").is_file()
    if fresh:
        _sh(*as_postgres, str(pg / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
            "--auth-local=peer", "--auth-host=scram-sha-256", "--no-locale")  # fmt: skip
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all {USER} {NETWORK}.0/24 scram-sha-256\n")
    options = (
        f"-c listen_addresses={HOST} -c port={PORTS['postgres']} -c unix_socket_directories={run}"
    )
    log = cluster.postgres / "postgres.log"  # written by PostgreSQL's own user
    _sh(*as_postgres, str(pg / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
        "-w", "-t", "120", "start")  # fmt: skip
    psql = [*as_postgres, str(pg / "psql"), "-h", str(run), "-d", "postgres", "-qtA",
            "-v", "ON_ERROR_STOP=1"]  # fmt: skip
    have = set(_sh(*psql, "-c", "SELECT rolname FROM pg_roles UNION ALL "
                   "SELECT datname FROM pg_database").stdout.split())  # fmt: skip
    # The password goes through stdin, never on a command line; it is set on every start, so
    # the role's password is always the one in secrets.env (or the environment).
    password = secret["TABULA_CLUSTER_DB_PASSWORD"].replace("'", "''")
    verb = "ALTER" if USER in have else "CREATE"
    sql = f"{verb} ROLE {USER} LOGIN PASSWORD '{password}';\n" + "".join(
        f"CREATE DATABASE {db} OWNER {USER};\n" for db in DATABASES if db not in have
    )
    _sh(*psql, "-f", "-", input=sql)


def postgres_down(cluster: Cluster) -> None:
    data = cluster.postgres / "data"
    if (data / "postmaster.pid").is_file():
        pg = _postgres_bin()
        _sh("runuser", "-u", "postgres", "--", str(pg / "pg_ctl"), "-D", str(data),
            "-m", "fast", "-w", "stop", check=False)  # fmt: skip


def mlflow_up(cluster: Cluster, secret: dict[str, str]) -> int:
    """MLflow's tracking server on PostgreSQL, serving the artifacts, behind basic auth."""
    ini = cluster.folder / "mlflow-auth.ini"
    db = f"postgresql+psycopg2://{USER}@{HOST}:{PORTS['postgres']}"
    ini.write_text(
        "[mlflow]\n"
        "default_permission = NO_PERMISSIONS\n"
        f"database_uri = {db}/mlflow_auth\n"
        f"admin_username = {USER}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        # A password check (PBKDF2) costs about 0.3 s of this machine's CPU, on every
        # request: the cache makes it once a minute per user (MLflow's basic_auth.ini).
        "auth_cache_ttl_seconds = 60\n"
    )
    env = {
        **_base_env(),
        "PGPASSWORD": secret["TABULA_CLUSTER_DB_PASSWORD"],  # libpq reads it: not in the URI
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_AUTH_ADMIN_PASSWORD": secret["TABULA_CLUSTER_MLFLOW_PASSWORD"],
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secret["TABULA_CLUSTER_MLFLOW_SECRET_KEY"],
    }
    cluster.artifacts.mkdir(exist_ok=True)
    argv = [
        sys.executable, "-m", "mlflow", "server",
        "--host", HOST, "--port", str(PORTS["mlflow"]), "--workers", "1",
        "--backend-store-uri", f"{db}/mlflow",
        "--serve-artifacts", "--artifacts-destination", str(cluster.artifacts),
        "--app-name", "basic-auth",
        "--allowed-hosts", f"{HOST}:{PORTS['mlflow']},{HOST}",
        "--cors-allowed-origins", mlflow_url(),  # the UI's own requests come from there
    ]  # fmt: skip
    pid = _start(cluster, "mlflow", argv, env)
    auth = (USER, secret["TABULA_CLUSTER_MLFLOW_PASSWORD"])
    log = cluster.logs / "mlflow.log"
    _wait_for("the MLflow server", lambda: _http_ok(mlflow_probe_url(), auth), log, pid)
    return pid


def prefect_up(cluster: Cluster, secret: dict[str, str]) -> int:
    """The Prefect server on PostgreSQL, its API behind the auth string."""
    env = {
        **_base_env(),
        "PREFECT_SERVER_DATABASE_DRIVER": "postgresql+asyncpg",
        "PREFECT_SERVER_DATABASE_HOST": HOST,
        "PREFECT_SERVER_DATABASE_PORT": str(PORTS["postgres"]),
        "PREFECT_SERVER_DATABASE_USER": USER,
        "PREFECT_SERVER_DATABASE_NAME": "prefect",
        "PREFECT_SERVER_DATABASE_PASSWORD": secret["TABULA_CLUSTER_DB_PASSWORD"],
        "PREFECT_SERVER_API_AUTH_STRING": f"{USER}:{secret['TABULA_CLUSTER_PREFECT_PASSWORD']}",
        "PREFECT_UI_API_URL": f"{prefect_url()}/api",
    }
    argv = [_bin("prefect"), "server", "start", "--host", HOST, "--port", str(PORTS["prefect"])]
    pid = _start(cluster, "prefect", argv, env)
    auth = (USER, secret["TABULA_CLUSTER_PREFECT_PASSWORD"])
    _wait_for(
        "the Prefect server",
        lambda: _http_ok(f"{prefect_url()}/api/health", auth),
        cluster.logs / "prefect.log",
        pid,
    )
    return pid


def dask_up(cluster: Cluster) -> dict[str, int]:
    """The Dask scheduler and its single-threaded workers, each in its own namespace."""
    env = _dask_env(cluster)
    dashboard = f"{HOSTS['dask']}:{PORTS['dashboard']}"
    scheduler = [_bin("dask"), "scheduler", "--host", HOSTS["dask"], "--port",
                 str(PORTS["dask"]), "--dashboard-address", dashboard]  # fmt: skip
    pids = {"dask-scheduler": _start(cluster, "dask-scheduler", scheduler, env, host="dask")}
    _wait_for(
        "the Dask scheduler",
        lambda: port_open(HOSTS["dask"], PORTS["dask"]),
        cluster.logs / "dask-scheduler.log",
        pids["dask-scheduler"],
    )
    for host in DASK_WORKERS:
        pids[f"dask-{host}"] = dask_worker_up(cluster, host)
    _wait_for(
        "the Dask workers",
        lambda: len(dask_workers()) == len(DASK_WORKERS),
        cluster.logs / f"dask-{DASK_WORKERS[0]}.log",
    )
    return pids


def _client_process_env(cluster: Cluster) -> dict[str, str]:
    """The environment of a cluster process that is a client (Dask worker, Prefect worker,
    the ``prefect`` CLI): the quiet defaults and the cluster's addresses and credentials,
    the checkout as ``TABULA_PROJECT``."""
    return {**_base_env(), **cluster.client_env(_source())}


def _dask_env(cluster: Cluster) -> dict[str, str]:
    return _client_process_env(cluster) | {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def dask_worker_up(cluster: Cluster, host: str) -> int:
    """One single-threaded Dask worker in ``host``'s namespace."""
    worker = [_bin("dask"), "worker", dask_address(), "--nthreads", "1", "--nworkers", "1",
              "--host", HOSTS[host], "--name", host, "--no-dashboard"]  # fmt: skip
    return _start(cluster, f"dask-{host}", worker, _dask_env(cluster), host=host)


def dask_workers() -> dict[str, str]:
    """The Dask workers the scheduler knows: name -> address ({} when it does not answer)."""
    from distributed import Client

    try:
        with Client(dask_address(), timeout=5) as client:
            info = client.scheduler_info(n_workers=-1)["workers"]
    except (OSError, TimeoutError):
        return {}
    return {str(w["name"]): address for address, w in info.items()}


def prefect_cli(cluster: Cluster, *args: str, timeout: int = 300) -> str:
    """Run ``prefect ARGS`` against the cluster, in the checkout (prefect.yaml's
    ``$TABULA_PROJECT``, resolved when a deployment is made, is the checkout too)."""
    env = _client_process_env(cluster)
    done = _sh(_bin("prefect"), *args, cwd=_source(), env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ClusterError(f"prefect {' '.join(args[:3])} failed: {done.stdout[-300:]}")
    return done.stdout


def _source() -> Path:
    """The checkout that holds prefect.yaml and the code the workers run."""
    return Path(__file__).resolve().parents[1]


def deploy(cluster: Cluster, project: Path, config: str, name: str) -> None:
    """The process work pool, the ``cluster`` deployment of prefect.yaml with this cluster's
    addresses as its parameters, and one worker of the pool, on this machine."""
    prefect_cli(cluster, "work-pool", "create", POOL, "--type", "process", "--overwrite")
    params = {
        "config": config,
        "name": name,
        "more": 1,
        "dask_address": dask_address(),
        "overrides": cluster.overrides(),
        "project": str(project),
    }
    prefect_cli(cluster, "--no-prompt", "deploy", "--name", "cluster",
                "--params", json.dumps(params))  # fmt: skip


def worker_up(cluster: Cluster) -> int:
    """A worker of the process pool on this machine: it runs the flows in the checkout."""
    env = _client_process_env(cluster) | {"OMP_WAIT_POLICY": "PASSIVE"}
    argv = [_bin("prefect"), "worker", "start", "--pool", POOL, "--name", "tabula-flows"]
    return _start(cluster, "prefect-worker", argv, env)


# --- the commands -------------------------------------------------------------------------


def _cluster(folder: Path | None) -> Cluster:
    return Cluster(Path(folder or os.environ.get("TABULA_CLUSTER_DIR") or DEFAULT_DIR).resolve())


def up(folder: Path | None, project: Path, config: str, name: str) -> Cluster:
    """Start everything (see the module's docstring); on a failure, stop what started."""
    _need_root()
    cluster = _cluster(folder)
    if _inside(cluster.folder, project) or _inside(cluster.folder, _source()):
        raise UsageError(
            f"{cluster.folder} is inside the project: the cluster's folder holds its "
            "credentials and must lie outside the repository"
        )
    if _inside(project, cluster.folder) or (
        cluster.folder.is_dir() and any(cluster.folder.iterdir()) and not cluster.state.is_file()
    ):
        raise UsageError(f"{cluster.folder} holds other files: give an empty or new folder")
    if network_exists() or marked_processes(cluster):
        raise UsageError(f"a cluster is already up (bridge {BRIDGE}): tabula cluster down first")
    _postgres_bin()
    cluster.folder.mkdir(parents=True, exist_ok=True)
    cluster.folder.chmod(0o711)  # PostgreSQL's own user must reach its data folder
    cluster.dvc_remote.mkdir(exist_ok=True)
    cluster.logs.mkdir(exist_ok=True)
    secret = cluster.make_secrets()
    _write_private(
        cluster.folder / "client.env",
        "".join(f"{k}={v}\n" for k, v in cluster.client_env().items()),
    )
    cluster.write_state({"project": str(project), "config": config, "name": name, "pids": {}})
    try:
        network_up()
        postgres_up(cluster, secret)
        mlflow_up(cluster, secret)
        prefect_up(cluster, secret)
        dask_up(cluster)
        deploy(cluster, project, config, name)
        worker_up(cluster)
    except BaseException:
        down(cluster.folder)
        raise
    return cluster


def _need_root() -> None:
    if os.geteuid() != 0:
        raise UsageError("tabula cluster needs root (it makes and removes network namespaces)")


def _inside(folder: Path, root: Path) -> bool:
    return folder.resolve().is_relative_to(root.resolve())


def down(folder: Path | None, purge: bool = False) -> Cluster:
    """Stop every process of the cluster (the recorded ones first, in reverse order, then
    whatever else carries its `MARK`: the flows a worker started), PostgreSQL last, and remove
    the network; ``purge`` also deletes the folder."""
    cluster = _cluster(folder)
    state = cluster.read_state()
    marked = set(marked_processes(cluster))
    for pid in reversed(list(state.get("pids", {}).values())):
        if pid in marked:
            stop_process(pid)
    for pid in marked_processes(cluster):
        _kill(pid, signal.SIGKILL)
    postgres_down(cluster)
    network_down()
    if state:
        cluster.write_state({**state, "pids": {}})
    if purge and cluster.state.is_file():
        shutil.rmtree(cluster.folder)
    return cluster


RESTARTABLE = ("postgres", "mlflow", "prefect", *(f"dask-{h}" for h in DASK_WORKERS))


def restart(folder: Path | None, component: str) -> None:
    """Start one part of a cluster that is up again (after a crash, or a stop to test one):
    ``postgres``, ``mlflow``, ``prefect`` or a Dask worker (``dask-w1``)."""
    _need_root()
    if component not in RESTARTABLE:
        raise UsageError(f"no component {component!r}: one of {', '.join(RESTARTABLE)}")
    cluster = _cluster(folder)
    state = cluster.read_state()
    if not state.get("pids") or not network_exists():
        raise UsageError(f"no cluster up in {cluster.folder}: tabula cluster up first")
    secret = cluster.secrets()
    if component == "postgres":
        postgres_down(cluster)
        postgres_up(cluster, secret)
        return
    if state["pids"].get(component) in marked_processes(cluster):
        stop_process(state["pids"][component])
    if component.startswith("dask-"):
        dask_worker_up(cluster, component.removeprefix("dask-"))
    else:
        {"mlflow": mlflow_up, "prefect": prefect_up}[component](cluster, secret)


def status(folder: Path | None) -> list[tuple[str, str, bool]]:
    """(component, address, answering) for each part of the cluster."""
    cluster = _cluster(folder)
    secret = cluster.secrets() or None
    mlflow_auth = (USER, secret["TABULA_CLUSTER_MLFLOW_PASSWORD"]) if secret else None
    prefect_auth = (USER, secret["TABULA_CLUSTER_PREFECT_PASSWORD"]) if secret else None
    workers = dask_workers() if network_exists() else {}
    pids = cluster.read_state().get("pids", {})
    return [
        ("network", f"{BRIDGE} {HOST}/24", network_exists()),
        ("postgres", f"{HOST}:{PORTS['postgres']}", port_open(HOST, PORTS["postgres"])),
        ("mlflow", mlflow_url(), _http_ok(mlflow_probe_url(), mlflow_auth)),
        ("prefect", prefect_url(), _http_ok(f"{prefect_url()}/api/admin/version", prefect_auth)),
        ("dask-scheduler", dask_address(), port_open(HOSTS["dask"], PORTS["dask"])),
        *((f"dask-{h}", HOSTS[h], h in workers) for h in DASK_WORKERS),
        (
            "prefect-worker",
            f"pool {POOL}",
            _alive(pids["prefect-worker"]) if "prefect-worker" in pids else False,
        ),  # fmt: skip
    ]


def run_command(iterations: int = 2) -> str:
    return (
        f"tabula cluster exec -- prefect deployment run {DEPLOYMENT} "
        f"--param iterations={iterations} --watch"
    )


FolderOpt = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help=f"The cluster's folder, outside the repository (default: $TABULA_CLUSTER_DIR or "
        f"{DEFAULT_DIR}).",
    ),
]


@app.command("up")
@expected_errors
def up_command(
    folder: FolderOpt = None,
    config: Annotated[
        str, typer.Option(help="The deployment's config, relative to the checkout.")
    ] = "configs/quickstart.yaml",
    name: Annotated[str, typer.Option(help="The deployment's run name.")] = "cluster",
) -> None:
    """Start the cluster and register the pipeline's deployment on it."""
    cluster = up(folder, Path.cwd(), config, name)
    typer.echo(f"cluster up in {cluster.folder} (logs in {cluster.logs})")
    typer.echo(
        f"  MLflow UI:   {mlflow_url()}   (user {USER}, password in {cluster.folder}/secrets.env)"
    )
    typer.echo(f"  Prefect UI:  {prefect_url()}   (same user, its own password)")
    typer.echo(
        f"  Dask:        {dask_address()}  dashboard http://{HOSTS['dask']}:{PORTS['dashboard']}"
    )
    typer.echo(f"  DVC remote:  {cluster.dvc_remote}")
    typer.echo("run the pipeline through the deployment:")
    typer.echo(f"  {run_command()}")


@app.command("down")
@expected_errors
def down_command(
    folder: FolderOpt = None,
    purge: Annotated[
        bool,
        typer.Option(help="Also delete the folder: databases, artifacts, DVC remote, credentials."),
    ] = False,  # fmt: skip
) -> None:
    """Stop every process of the cluster and remove its network."""
    _need_root()
    cluster = down(folder, purge)
    typer.echo(f"cluster down ({cluster.folder}{' removed' if purge else ' kept'})")


@app.command("status")
@expected_errors
def status_command(folder: FolderOpt = None) -> None:
    """Which parts of the cluster answer."""
    rows = status(folder)
    for component, address, ok in rows:
        typer.echo(f"{component:15} {'up' if ok else 'DOWN':5} {address}")
    if not all(ok for _, _, ok in rows):
        raise typer.Exit(1)


@app.command("restart")
@expected_errors
def restart_command(
    component: Annotated[str, typer.Argument(help=", ".join(RESTARTABLE))],
    folder: FolderOpt = None,
) -> None:
    """Start one part of the cluster again (stopping it first if it still runs)."""
    restart(folder, component)
    typer.echo(f"{component} restarted")


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@expected_errors
def exec_command(ctx: typer.Context, folder: FolderOpt = None) -> None:
    """Run a command with the cluster's addresses and credentials in its environment, e.g.
    ``tabula cluster exec -- prefect deployment run ...``."""
    if not ctx.args:
        raise UsageError("tabula cluster exec: give a command after --")
    cluster = _cluster(folder)
    if not (cluster.folder / "client.env").is_file():
        raise UsageError(f"no cluster in {cluster.folder}: tabula cluster up first")
    env = {**os.environ, **_read_env(cluster.folder / "client.env")}
    path = shutil.which(ctx.args[0], path=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    if path is None:
        raise UsageError(f"tabula cluster exec: no command {ctx.args[0]!r}")
    os.execve(path, [path, *ctx.args[1:]], env)  # a bare argv[0] would lose a venv
