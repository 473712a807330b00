"""The cluster's servers, each started and awaited: PostgreSQL, the MLflow and Prefect servers
on it, the Dask scheduler and workers in their namespaces, the work pool's worker and the
deployment it runs."""

from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path

from cli.cluster.folder import append_nofollow, hand_over, make_private, write_private
from cli.cluster.layout import (
    DASK_WORKERS,
    DATABASES,
    HOST,
    HOSTS,
    NETWORK,
    POOL,
    PORTS,
    SECRET_NAMES,
    USER,
    Cluster,
    ClusterError,
    dashboard_address,
    dask_address,
    mlflow_probe_url,
    mlflow_url,
    prefect_url,
)
from cli.cluster.system import (
    console_script,
    http_ok,
    port_open,
    post_json,
    postgres_bin,
    sh,
    start,
    wait_for,
)
from cli.cluster.tls import cli_args as tls_cli_args
from cli.cluster.tls import security
from cli.cluster.users import Account
from cli.common import QUIET_DEFAULTS


def server_env() -> dict[str, str]:
    """This process's environment, quiet, without any client's address or credentials."""
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
    pg = postgres_bin()
    data, run = cluster.postgres / "data", cluster.postgres / "run"
    as_postgres = ["runuser", "-u", "postgres", "--"]
    make_private(cluster.postgres)
    run.mkdir(mode=0o700, exist_ok=True)
    user = pwd.getpwnam("postgres")
    for folder in (cluster.postgres, run):  # PostgreSQL's user may have made run/ a link
        os.chown(folder, user.pw_uid, user.pw_gid, follow_symlinks=False)
    fresh = not (data / "PG_VERSION").is_file()
    if fresh:
        sh(*as_postgres, str(pg / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
            "--auth-local=peer", "--auth-host=scram-sha-256", "--no-locale")  # fmt: skip
        append_nofollow(data / "pg_hba.conf", f"host all {USER} {NETWORK}.0/24 scram-sha-256\n")
    options = (
        f"-c listen_addresses={HOST} -c port={PORTS['postgres']} -c unix_socket_directories={run}"
    )
    log = cluster.postgres / "postgres.log"  # written by PostgreSQL's own user
    sh(*as_postgres, str(pg / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
        "-w", "-t", "120", "start")  # fmt: skip
    psql = [*as_postgres, str(pg / "psql"), "-h", str(run), "-d", "postgres", "-qtA",
            "-v", "ON_ERROR_STOP=1"]  # fmt: skip
    have = set(sh(*psql, "-c", "SELECT rolname FROM pg_roles UNION ALL "
                   "SELECT datname FROM pg_database").stdout.split())  # fmt: skip
    # The password goes through stdin, never on a command line; it is set on every start, so
    # the role's password is always the one in secrets.env (or the environment).
    password = secret["TABULA_CLUSTER_DB_PASSWORD"].replace("'", "''")
    verb = "ALTER" if USER in have else "CREATE"
    sql = f"{verb} ROLE {USER} LOGIN PASSWORD '{password}';\n" + "".join(
        f"CREATE DATABASE {db} OWNER {USER};\n" for db in DATABASES if db not in have
    )
    sh(*psql, "-f", "-", input=sql)


def postgres_down(cluster: Cluster) -> None:
    data = cluster.postgres / "data"
    if (data / "postmaster.pid").is_file():
        pg = postgres_bin()
        sh("runuser", "-u", "postgres", "--", str(pg / "pg_ctl"), "-D", str(data),
            "-m", "fast", "-w", "stop", check=False)  # fmt: skip


def mlflow_up(cluster: Cluster, secret: dict[str, str], service: Account) -> int:
    """MLflow's tracking server on PostgreSQL, serving the artifacts, behind basic auth; as
    the servers' user, which reads its settings (root's file, its group's to read) and owns
    the artifacts' folder."""
    ini = cluster.folder / "mlflow-auth.ini"
    db = f"postgresql+psycopg2://{USER}@{HOST}:{PORTS['postgres']}"
    write_private(
        ini,
        "[mlflow]\n"
        "default_permission = NO_PERMISSIONS\n"
        f"database_uri = {db}/mlflow_auth\n"
        f"admin_username = {USER}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        # A password check (PBKDF2) costs about 0.3 s of this machine's CPU, on every
        # request: the cache makes it once a minute per user (MLflow's basic_auth.ini).
        "auth_cache_ttl_seconds = 60\n",
        gid=service.gid,
        mode=0o640,
    )
    env = {
        **server_env(),
        "PGPASSWORD": secret["TABULA_CLUSTER_DB_PASSWORD"],  # libpq reads it: not in the URI
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_AUTH_ADMIN_PASSWORD": secret["TABULA_CLUSTER_MLFLOW_PASSWORD"],
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secret["TABULA_CLUSTER_MLFLOW_SECRET_KEY"],
    }
    hand_over(cluster.artifacts, service.uid, service.gid)
    set_mlflow_password(env, service)
    argv = [
        sys.executable, "-m", "mlflow", "server",
        "--host", HOST, "--port", str(PORTS["mlflow"]), "--workers", "1",
        "--backend-store-uri", f"{db}/mlflow",
        "--serve-artifacts", "--artifacts-destination", str(cluster.artifacts),
        "--app-name", "basic-auth",
        "--allowed-hosts", f"{HOST}:{PORTS['mlflow']},{HOST}",
        "--cors-allowed-origins", mlflow_url(),  # the UI's own requests come from there
    ]  # fmt: skip
    pid = start(cluster, "mlflow", argv, env, account=service)
    auth = (USER, secret["TABULA_CLUSTER_MLFLOW_PASSWORD"])
    log = cluster.logs / "mlflow.log"
    wait_for("the MLflow server", lambda: http_ok(mlflow_probe_url(), auth), log, pid)
    return pid


#: Sets the MLflow user's password in the auth app's database to the one of the environment
#: (the auth app sets it only when it makes the user, at the first start).
_SET_PASSWORD = """
import os
from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore
store = SqlAlchemyStore()
store.init_db(os.environ["TABULA_AUTH_DB"])
name, password = os.environ["TABULA_AUTH_USER"], os.environ["MLFLOW_AUTH_ADMIN_PASSWORD"]
if store.has_user(name) and not store.authenticate_user(name, password):
    store.update_user(name, password=password)
"""


def set_mlflow_password(env: dict[str, str], service: Account) -> None:
    """Give the MLflow user the password of ``env`` (the server's environment) before the
    server starts, where the user exists: a password changed in ``secrets.env`` (or the
    environment) after the first ``up`` then works, and the old one gets 401. Through the
    environment, as the servers' user."""
    db = f"postgresql+psycopg2://{USER}@{HOST}:{PORTS['postgres']}/mlflow_auth"
    sh(*service.prefix(), sys.executable, "-c", _SET_PASSWORD, cwd="/",
       env=env | service.env() | {"TABULA_AUTH_DB": db, "TABULA_AUTH_USER": USER})  # fmt: skip


def prefect_up(cluster: Cluster, secret: dict[str, str], service: Account) -> int:
    """The Prefect server on PostgreSQL, its API behind the auth string, as the servers'
    user."""
    env = {
        **server_env(),
        "PREFECT_SERVER_DATABASE_DRIVER": "postgresql+asyncpg",
        "PREFECT_SERVER_DATABASE_HOST": HOST,
        "PREFECT_SERVER_DATABASE_PORT": str(PORTS["postgres"]),
        "PREFECT_SERVER_DATABASE_USER": USER,
        "PREFECT_SERVER_DATABASE_NAME": "prefect",
        "PREFECT_SERVER_DATABASE_PASSWORD": secret["TABULA_CLUSTER_DB_PASSWORD"],
        "PREFECT_SERVER_API_AUTH_STRING": f"{USER}:{secret['TABULA_CLUSTER_PREFECT_PASSWORD']}",
        "PREFECT_UI_API_URL": f"{prefect_url()}/api",
        # The UI, with its API address written in, goes to the servers' user's folder (by
        # default it is written into the installed package).
        "PREFECT_UI_STATIC_DIRECTORY": str(cluster.service_home / "prefect-ui"),
    }
    argv = [
        console_script("prefect"),
        "server",
        "start",
        "--host",
        HOST,
        "--port",
        str(PORTS["prefect"]),
    ]
    pid = start(cluster, "prefect", argv, env, account=service)
    auth = (USER, secret["TABULA_CLUSTER_PREFECT_PASSWORD"])
    wait_for(
        "the Prefect server",
        lambda: http_ok(f"{prefect_url()}/api/health", auth),
        cluster.logs / "prefect.log",
        pid,
    )
    return pid


def dask_up(
    cluster: Cluster, service: Account, owner: Account, dashboard: bool = False
) -> dict[str, int]:
    """The Dask scheduler (as the servers' user) and its single-threaded workers (as the
    project's owner: they write its shards), each in its own namespace; the scheduler's
    dashboard only when asked for (plain HTTP, no login: whoever reaches the bridge would see
    it)."""
    env = _dask_env(cluster)
    # Without the dashboard, Dask still serves its worker pages, metrics and a proxy over
    # HTTP: on the namespace's own loopback, out of everyone's reach.
    board = (
        ["--dashboard-address", dashboard_address()]
        if dashboard
        else ["--no-dashboard", "--dashboard-address", f"127.0.0.1:{PORTS['dashboard']}"]
    )
    scheduler = [console_script("dask"), "scheduler", "--host", HOSTS["dask"], "--port",
                 str(PORTS["dask"]), *board, *tls_cli_args(cluster.tls_files())]  # fmt: skip
    pids = {
        "dask-scheduler": start(
            cluster, "dask-scheduler", scheduler, env, host="dask", account=service
        )
    }
    wait_for(
        "the Dask scheduler",
        lambda: port_open(HOSTS["dask"], PORTS["dask"]),
        cluster.logs / "dask-scheduler.log",
        pids["dask-scheduler"],
    )
    for host in DASK_WORKERS:
        pids[f"dask-{host}"] = dask_worker_up(cluster, host, owner)
    wait_for(
        "the Dask workers",
        lambda: len(dask_workers(cluster)) == len(DASK_WORKERS),
        cluster.logs / f"dask-{DASK_WORKERS[0]}.log",
    )
    return pids


def client_process_env(cluster: Cluster, owner: bool = False) -> dict[str, str]:
    """The environment of a cluster process that is a client (Dask worker, Prefect worker,
    the ``prefect`` CLI): the quiet defaults and the cluster's addresses and credentials,
    the checkout as ``TABULA_PROJECT``; the project ``owner``'s Dask certificate for a
    process of that user's, else the servers' (root's clients)."""
    env = {**server_env(), **cluster.client_env(source())}
    return env | (cluster.dask_env(cluster.owner_tls_files()) if owner else {})


def _dask_env(cluster: Cluster, owner: bool = False) -> dict[str, str]:
    """A Dask member's environment: a client's without MLflow's address and password, which
    self-play never uses (only the flow's process logs to MLflow)."""
    env = client_process_env(cluster, owner)
    env = {k: v for k, v in env.items() if not k.startswith("MLFLOW_")}
    return env | {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def dask_worker_up(cluster: Cluster, host: str, owner: Account) -> int:
    """One single-threaded Dask worker in ``host``'s namespace, as the project's ``owner``."""
    worker = [console_script("dask"), "worker", dask_address(), "--nthreads", "1",
              "--nworkers", "1", "--host", HOSTS[host], "--name", host, "--no-dashboard",
              "--dashboard-address", "127.0.0.1:0",  # its metrics: as the scheduler's pages
              *tls_cli_args(cluster.owner_tls_files())]  # fmt: skip
    # This umask, not 077: a worker writes its shards into the user's project.
    env = _dask_env(cluster, owner=True)
    return start(cluster, f"dask-{host}", worker, env, host=host, umask=-1, account=owner)


def dask_workers(cluster: Cluster) -> dict[str, str]:
    """The Dask workers the scheduler knows: name -> address ({} when it does not answer)."""
    from distributed import Client

    try:
        with Client(dask_address(), security=security(cluster), timeout=5) as client:
            info = client.scheduler_info(n_workers=-1)["workers"]
    except (OSError, TimeoutError):
        return {}
    return {str(w["name"]): address for address, w in info.items()}


#: A flow run's state once no process runs it any more: what each unfinished state becomes.
_ENDED = {"RUNNING": "CRASHED", "PENDING": "CRASHED", "CANCELLING": "CANCELLED"}


def end_orphaned_runs(cluster: Cluster) -> int:
    """Give every flow run that the Prefect server still holds for unfinished (running,
    pending or cancelling) its end state, and return how many there were: called once the
    cluster's flows are stopped, when no process runs them any more. A flow stopped by
    SIGTERM records its end itself; one that has not by the end of its grace was killed."""
    auth = (USER, cluster.secrets()["TABULA_CLUSTER_PREFECT_PASSWORD"])
    api, ended = f"{prefect_url()}/api/flow_runs", 0
    query = {"flow_runs": {"state": {"type": {"any_": list(_ENDED)}}}, "limit": 200}
    try:
        while runs := post_json(f"{api}/filter", query, auth):
            for run in runs:
                end = _ENDED[run["state"]["type"]]
                state = {"type": end, "message": "its process was stopped by tabula cluster down"}
                post_json(f"{api}/{run['id']}/set_state", {"state": state, "force": True}, auth)
                ended += 1
    except OSError:
        pass  # the server is gone already: nothing to record the end in
    return ended


def prefect_cli(cluster: Cluster, *args: str, timeout: int = 300) -> str:
    """Run ``prefect ARGS`` against the cluster, in the checkout (prefect.yaml's
    ``$TABULA_PROJECT``, resolved when a deployment is made, is the checkout too)."""
    env = client_process_env(cluster)
    done = sh(console_script("prefect"), *args, cwd=source(), env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ClusterError(f"prefect {' '.join(args[:3])} failed: {done.stdout[-300:]}")
    return done.stdout


def source() -> Path:
    """The checkout that holds prefect.yaml and the code the workers run."""
    return Path(__file__).resolve().parents[2]


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


def worker_up(cluster: Cluster, owner: Account) -> int:
    """A worker of the process pool on this machine, as the project's ``owner``: it runs the
    flows in the checkout, which write that user's project."""
    env = client_process_env(cluster, owner=True) | {"OMP_WAIT_POLICY": "PASSIVE"}
    argv = [console_script("prefect"), "worker", "start", "--pool", POOL, "--name", "tabula-flows"]
    # This umask, not 077: the flows write the user's project (its data/, git and DVC records),
    # which keeps the permissions its owner gives it.
    return start(cluster, "prefect-worker", argv, env, umask=-1, account=owner)
