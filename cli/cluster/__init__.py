"""``tabula cluster up|down|status|restart|rotate-password|exec``: the layout of
docs/scaling-out.md on one machine.

Every server a cluster needs, each on its own address of a private network, as separate hosts
would be:

=================  ==================  ==========================================================
host (namespace)   address             what runs there
=================  ==================  ==========================================================
(this machine)     10.77.0.1           PostgreSQL; the MLflow tracking server on it, serving the
                                       artifacts, with MLflow's basic-auth app; the Prefect
                                       server on it, with its API auth string; a process work
                                       pool's worker, which runs the flows
``tabula-dask``    10.77.0.10          the Dask scheduler, TLS only
``tabula-w1/w2``   10.77.0.11, .12     one single-threaded Dask worker each (self-play)
``tabula-host2``   10.77.0.20          nothing: "another host" to clone and reproduce from
=================  ==================  ==========================================================

The hosts are network namespaces joined to a bridge (``tabula0``) by veth pairs; they share
this machine's file system, which stands in for the shared project folder and the shared DVC
remote (``DIR/dvc-remote``). Every server binds to the bridge's address only.

The folder ``DIR`` must be the cluster user's own: every command refuses, in one line and
before it makes or starts anything, one that another user could change (`cli.cluster.folder`).
The credentials live in ``DIR/secrets.env`` (mode 0600, made at the first ``up`` with random
values; a variable of the same name in the environment wins), outside the repository. They
reach the servers and clients as environment variables, never as arguments, so no command line,
config, frozen ``params.yaml``, MLflow param or log shows them. Dask has no passwords: its
scheduler, workers and clients show certificates of the cluster's own authority instead
(`cli.cluster.tls`). ``DIR/client.env`` holds what a client needs; ``tabula cluster exec --
CMD`` runs CMD with it.

Root runs the namespaces only: the servers and the Dask scheduler run as a system user of
their own, the pool's worker, the flows and the Dask workers as the project's owner
(`cli.cluster.users`). ``rotate-password`` gives MLflow's user a new password, after which the
old one gets 401.

The parts: `cli.cluster.layout` (addresses, the folder, credentials), `cli.cluster.folder`
(whose the folder may be; private files and logs), `cli.cluster.users` (whom each process runs
as), `cli.cluster.system` (namespaces, processes, probes), `cli.cluster.tls`,
`cli.cluster.servers` (each server's start) and `cli.cluster.control` (up, down, restart,
rotate-password, status); this module holds the commands.

``down`` stops every process, the flows first while the Prefect server can still record how
they ended, and removes the namespaces and the bridge; the data (the databases, artifacts, DVC
remote) stay in DIR for the next ``up`` (``down --purge`` removes DIR).
Needs root (namespaces) and Debian's ``postgresql`` package.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from cli.cluster.control import (
    RESTARTABLE,
    cluster_at,
    down,
    need_root,
    restart,
    rotate_mlflow_password,
    run_command,
    status,
    up,
)
from cli.cluster.layout import (
    DEFAULT_DIR,
    USER,
    dashboard_address,
    dask_address,
    mlflow_url,
    prefect_url,
    read_env,
)
from cli.cluster.system import forwarding_warning
from cli.common import expected_errors
from tabula.errors import UsageError

app = typer.Typer(
    help="A local cluster (PostgreSQL, MLflow and Prefect servers, Dask workers on their own "
    "addresses) to run the pipeline through its deployment.",
    no_args_is_help=True,
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
    dashboard: Annotated[
        bool,
        typer.Option(help="Start the Dask scheduler's dashboard too (plain HTTP, no login)."),
    ] = False,  # fmt: skip
) -> None:
    """Start the cluster and register the pipeline's deployment on it."""
    cluster = up(folder, Path.cwd(), config, name, dashboard)
    warning = forwarding_warning()
    if warning:
        typer.echo(warning, err=True)
    typer.echo(f"cluster up in {cluster.folder} (logs in {cluster.logs})")
    typer.echo(
        f"  MLflow UI:   {mlflow_url()}   (user {USER}, password in {cluster.folder}/secrets.env)"
    )
    typer.echo(f"  Prefect UI:  {prefect_url()}   (same user, its own password)")
    board = f"  dashboard http://{dashboard_address()}" if dashboard else ""
    typer.echo(f"  Dask:        {dask_address()}{board}")
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
    need_root()
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


@app.command("rotate-password")
@expected_errors
def rotate_password_command(folder: FolderOpt = None) -> None:
    """Give MLflow's user a new password (the old one gets 401 from then on); start no run
    meanwhile."""
    rotate_mlflow_password(folder)
    typer.echo(f"MLflow password changed (in {cluster_at(folder).folder}/secrets.env)")


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@expected_errors
def exec_command(ctx: typer.Context, folder: FolderOpt = None) -> None:
    """Run a command with the cluster's addresses and credentials in its environment, e.g.
    ``tabula cluster exec -- prefect deployment run ...``."""
    if not ctx.args:
        raise UsageError("tabula cluster exec: give a command after --")
    cluster = cluster_at(folder)
    if not (cluster.folder / "client.env").is_file():
        raise UsageError(f"no cluster in {cluster.folder}: tabula cluster up first")
    env = {**os.environ, **read_env(cluster.folder / "client.env")}
    path = shutil.which(ctx.args[0], path=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    if path is None:
        raise UsageError(f"tabula cluster exec: no command {ctx.args[0]!r}")
    os.execve(path, [path, *ctx.args[1:]], env)  # a bare argv[0] would lose a venv
