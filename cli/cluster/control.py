"""A cluster's life: ``up``, ``down``, ``restart`` of one part, ``status``."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from cli.cluster.layout import (
    BRIDGE,
    DASK_WORKERS,
    DEFAULT_DIR,
    DEPLOYMENT,
    HOST,
    HOSTS,
    POOL,
    PORTS,
    USER,
    Cluster,
    dask_address,
    mlflow_probe_url,
    mlflow_url,
    prefect_url,
    write_private,
)
from cli.cluster.servers import (
    dask_up,
    dask_worker_up,
    dask_workers,
    deploy,
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
    stop_process,
)
from cli.cluster.tls import make_certificates
from tabula.errors import UsageError


def cluster_at(folder: Path | None) -> Cluster:
    return Cluster(Path(folder or os.environ.get("TABULA_CLUSTER_DIR") or DEFAULT_DIR).resolve())


def up(folder: Path | None, project: Path, config: str, name: str) -> Cluster:
    """Start everything (see `cli.cluster`'s docstring); on a failure, stop what started."""
    need_root()
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
    cluster.folder.mkdir(parents=True, exist_ok=True)
    cluster.folder.chmod(0o711)  # PostgreSQL's own user must reach its data folder
    cluster.dvc_remote.mkdir(exist_ok=True)
    cluster.logs.mkdir(exist_ok=True)
    secret = cluster.make_secrets()
    make_certificates(cluster, [HOST, *HOSTS.values()])
    write_private(
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


def need_root() -> None:
    if os.geteuid() != 0:
        raise UsageError("tabula cluster needs root (it makes and removes network namespaces)")


def _inside(folder: Path, root: Path) -> bool:
    return folder.resolve().is_relative_to(root.resolve())


def down(folder: Path | None, purge: bool = False) -> Cluster:
    """Stop every process of the cluster (the recorded ones first, in reverse order, then
    whatever else carries its `MARK`: the flows a worker started), PostgreSQL last, and remove
    the network; ``purge`` also deletes the folder."""
    cluster = cluster_at(folder)
    state = cluster.read_state()
    marked = set(marked_processes(cluster))
    for pid in reversed(list(state.get("pids", {}).values())):
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
    if component.startswith("dask-"):
        dask_worker_up(cluster, component.removeprefix("dask-"))
    else:
        {"mlflow": mlflow_up, "prefect": prefect_up}[component](cluster, secret)


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
