"""A cluster's life: ``up``, ``down``, ``restart`` of one part, ``status``."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
from importlib.util import find_spec
from pathlib import Path

from cli.cluster.folder import check_folder, hand_over, make_private
from cli.cluster.layout import (
    BRIDGE,
    DASK_WORKERS,
    DEFAULT_DIR,
    DEPLOYMENT,
    HOST,
    HOSTS,
    MARK,
    POOL,
    PORTS,
    USER,
    Cluster,
    dask_address,
    mlflow_probe_url,
    mlflow_url,
    prefect_url,
)
from cli.cluster.servers import (
    dask_up,
    dask_worker_up,
    dask_workers,
    deploy,
    end_orphaned_runs,
    mlflow_up,
    postgres_down,
    postgres_up,
    prefect_up,
    source,
    worker_up,
)
from cli.cluster.system import (
    alive,
    http_ok,
    kill,
    marked_processes,
    network_down,
    network_exists,
    network_up,
    port_open,
    postgres_bin,
    process_groups,
    stop_groups,
    stop_process,
)
from cli.cluster.tls import make_certificates
from cli.cluster.users import Account, owner_account, service_account
from tabula.errors import UsageError


def cluster_at(folder: Path | None) -> Cluster:
    """The cluster in ``folder`` (else ``$TABULA_CLUSTER_DIR``, else `DEFAULT_DIR`), once the
    folder has passed `check_folder`: every command's first step."""
    given = Path(os.path.abspath(folder or os.environ.get(MARK) or DEFAULT_DIR))
    cluster = Cluster(given.resolve())
    check_folder(given, *cluster.kept(), shared=cluster.shared())
    return cluster


def up(
    folder: Path | None, project: Path, config: str, name: str, dashboard: bool = False
) -> Cluster:
    """Start everything (see `cli.cluster`'s docstring), the Dask dashboard only when asked
    for; on a failure, stop what started."""
    need_root()
    need_extras()
    cluster = cluster_at(folder)
    if _inside(cluster.folder, project) or _inside(cluster.folder, source()):
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
    postgres_bin()
    service, owner = accounts(cluster, project)
    _make_folders(cluster, service, owner)
    secret = cluster.make_secrets()
    make_certificates(cluster, [HOST, *HOSTS.values()], service, owner)
    cluster.write_client_env()
    cluster.write_state({"project": str(project), "config": config, "name": name, "pids": {}})
    try:
        network_up()
        postgres_up(cluster, secret)
        mlflow_up(cluster, secret, service)
        prefect_up(cluster, secret, service)
        dask_up(cluster, service, owner, dashboard)
        deploy(cluster, project, config, name)
        worker_up(cluster, owner)
    except BaseException:
        down(cluster.folder)
        raise
    return cluster


def accounts(cluster: Cluster, project: Path) -> tuple[Account, Account]:
    """Whom the cluster's processes run as (`cli.cluster.users`): the servers' user, made
    where missing, and the owner of ``project``."""
    return service_account(cluster.service_home), owner_account(project, cluster.owner_home)


def _make_folders(cluster: Cluster, service: Account, owner: Account) -> None:
    """The folder and its subfolders, each its owner's only; an older cluster's are made so
    (what its processes left as root's is given to the user who now runs them)."""
    # Others may pass through, to what is theirs (PostgreSQL's user to its data folder, the
    # servers' and the project owner's to theirs), but not list it.
    make_private(cluster.folder, 0o711)
    make_private(cluster.logs)
    hand_over(cluster.artifacts, service.uid, service.gid)
    hand_over(cluster.service_home, service.uid, service.gid)
    # The flows push to the DVC remote, as the project's owner.
    hand_over(cluster.dvc_remote, owner.uid, owner.gid)
    hand_over(cluster.owner_home, owner.uid, owner.gid)


def need_root() -> None:
    if os.geteuid() != 0:
        raise UsageError("tabula cluster needs root (it makes and removes network namespaces)")


#: What `tabula cluster` starts beyond the pipeline: MLflow's server on PostgreSQL (its
#: driver) with its basic-auth app (Flask-WTF); the ``cluster`` extra of pyproject.toml.
EXTRAS = {"psycopg2": "psycopg2-binary", "flask_wtf": "flask-wtf"}


def need_extras() -> None:
    """Refuse in one line, before anything starts, when the cluster's extra packages are not
    installed (``make run`` installs the pipeline's runtime only)."""
    missing = [package for module, package in EXTRAS.items() if find_spec(module) is None]
    if missing:
        raise UsageError(
            f"tabula cluster needs {', '.join(missing)}: install its extra with "
            "`.venv/bin/pip install -c constraints.txt -e '.[cluster]'` (make test does)"
        )


def _inside(folder: Path, root: Path) -> bool:
    return folder.resolve().is_relative_to(root.resolve())


def down(folder: Path | None, purge: bool = False) -> Cluster:
    """Stop every process of the cluster and remove the network; ``purge`` also deletes the
    folder. The Prefect worker goes first, then the flows it started (each in a session of its
    own, found by the cluster's `MARK`), while the Prefect server still answers: a flow stopped
    by SIGTERM records its run as Crashed, and `end_orphaned_runs` ends the runs of those that
    did not in their grace; killed after the servers, they stayed RUNNING. Then the other
    recorded processes, in reverse order of their start, whatever still carries the mark, and
    PostgreSQL last."""
    cluster = cluster_at(folder)
    state = cluster.read_state()
    pids: dict[str, int] = state.get("pids", {})
    marked = set(marked_processes(cluster))
    if pids.get("prefect-worker") in marked:
        stop_process(pids["prefect-worker"])
    flows = set(marked_processes(cluster))
    # A group whose leader carries no mark is not the cluster's: a shell's job that runs
    # `tabula cluster exec -- ...` (its process is stopped with the rest, below).
    stop_groups((process_groups(list(flows)) & flows) - set(pids.values()))
    if pids.get("prefect") in marked and cluster.secrets():
        end_orphaned_runs(cluster)
    for pid in reversed(list(pids.values())):
        if pid in marked:
            stop_process(pid)
    for pid in marked_processes(cluster):
        kill(pid, signal.SIGKILL)
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
    need_root()
    if component not in RESTARTABLE:
        raise UsageError(f"no component {component!r}: one of {', '.join(RESTARTABLE)}")
    cluster = cluster_at(folder)
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
    service, owner = accounts(cluster, Path(state["project"]))
    if component.startswith("dask-"):
        dask_worker_up(cluster, component.removeprefix("dask-"), owner)
    else:
        {"mlflow": mlflow_up, "prefect": prefect_up}[component](cluster, secret, service)


#: The variable of the MLflow user's password (`cli.cluster.layout.SECRET_NAMES`).
MLFLOW_PASSWORD = "TABULA_CLUSTER_MLFLOW_PASSWORD"


def rotate_mlflow_password(folder: Path | None) -> Cluster:
    """Give the MLflow user a new random password: written to ``secrets.env`` and
    ``client.env``, set in the auth app's database by the MLflow server's restart (which also
    forgets the old one it had cached), and given to the pool's worker by its restart. From
    then on the old password gets 401. A flow that runs keeps the old one, and fails at its
    next MLflow call; started again, it resumes."""
    need_root()
    if os.environ.get(MLFLOW_PASSWORD):
        raise UsageError(
            f"{MLFLOW_PASSWORD} is set in the environment, where it wins over secrets.env: "
            "change it there and run tabula cluster up again"
        )
    cluster = cluster_at(folder)
    state = cluster.read_state()
    if not state.get("pids") or not network_exists():
        raise UsageError(f"no cluster up in {cluster.folder}: tabula cluster up first")
    cluster.write_secrets({**cluster.secrets(), MLFLOW_PASSWORD: secrets.token_urlsafe(24)})
    cluster.write_client_env()
    service, owner = accounts(cluster, Path(state["project"]))
    for name in ("mlflow", "prefect-worker"):
        if state["pids"].get(name) in marked_processes(cluster):
            stop_process(state["pids"][name])
    mlflow_up(cluster, cluster.secrets(), service)
    worker_up(cluster, owner)
    return cluster


def status(folder: Path | None) -> list[tuple[str, str, bool]]:
    """(component, address, answering) for each part of the cluster."""
    cluster = cluster_at(folder)
    secret = cluster.secrets() or None
    mlflow_auth = (USER, secret["TABULA_CLUSTER_MLFLOW_PASSWORD"]) if secret else None
    prefect_auth = (USER, secret["TABULA_CLUSTER_PREFECT_PASSWORD"]) if secret else None
    workers = dask_workers(cluster) if network_exists() else {}
    pids = cluster.read_state().get("pids", {})
    return [
        ("network", f"{BRIDGE} {HOST}/24", network_exists()),
        ("postgres", f"{HOST}:{PORTS['postgres']}", port_open(HOST, PORTS["postgres"])),
        ("mlflow", mlflow_url(), http_ok(mlflow_probe_url(), mlflow_auth)),
        ("prefect", prefect_url(), http_ok(f"{prefect_url()}/api/admin/version", prefect_auth)),
        ("dask-scheduler", dask_address(), port_open(HOSTS["dask"], PORTS["dask"])),
        *((f"dask-{h}", HOSTS[h], h in workers) for h in DASK_WORKERS),
        (
            "prefect-worker",
            f"pool {POOL}",
            alive(pids["prefect-worker"]) if "prefect-worker" in pids else False,
        ),  # fmt: skip
    ]


def run_command(iterations: int = 2) -> str:
    return (
        f"tabula cluster exec -- prefect deployment run {DEPLOYMENT} "
        f"--param iterations={iterations} --watch"
    )
