"""Where a cluster lives: its addresses, ports and names, its folder and its credentials.

Nothing here starts anything: `cli.cluster.control` does, with `cli.cluster.servers`.
"""

from __future__ import annotations

import json
import os
import secrets
from base64 import b64encode
from dataclasses import dataclass
from pathlib import Path

from cli.cluster.folder import read_env, write_private
from tabula.errors import TabulaError

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
#: Root's, in no folder that others may write in (as /var/tmp is): `cli.cluster.folder`.
DEFAULT_DIR = Path("/var/lib/tabula-cluster")
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


def dashboard_address() -> str:
    """The Dask scheduler's dashboard (``up --dashboard`` only)."""
    return f"{HOSTS['dask']}:{PORTS['dashboard']}"


def dask_address() -> str:
    """The scheduler's address: TLS only (`cli.cluster.tls`)."""
    return f"tls://{HOSTS['dask']}:{PORTS['dask']}"


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

    @property
    def tls(self) -> Path:
        """The Dask network's certificates (`cli.cluster.tls`): root's, readable by the
        servers' group."""
        return self.folder / "tls"

    @property
    def service_home(self) -> Path:
        """The servers' user's ``HOME`` (a system user has none): that user's own."""
        return self.folder / "service"

    @property
    def owner_home(self) -> Path:
        """The project owner's: its Dask certificate, and its processes' ``HOME`` when the
        owner has none of their own (`cli.cluster.users`)."""
        return self.folder / "owner"

    def kept(self) -> tuple[list[Path], list[Path]]:
        """The folders and the files that the cluster keeps in its folder and reads back:
        each must be its user's own (`cli.cluster.folder.check_folder`)."""
        folders = [self.tls, self.logs]
        names = ("cluster.json", "secrets.env", "client.env", "mlflow-auth.ini")
        return folders, [self.folder / n for n in names] + list(self.tls_files())

    def shared(self) -> list[Path]:
        """The folders in it that belong to another user than root: PostgreSQL's, the
        servers' user's (the artifacts, its home), the project owner's (the DVC remote, which
        the flows push to, and its own folder)."""
        return [self.postgres, self.artifacts, self.service_home, self.dvc_remote,
                self.owner_home]  # fmt: skip

    def tls_files(self) -> tuple[Path, Path, Path]:
        """The authority's certificate, the members' certificate and the members' key: the
        servers' (and root's clients')."""
        return self.tls / "ca.pem", self.tls / "member.pem", self.tls / "member.key"

    def owner_tls_files(self) -> tuple[Path, Path, Path]:
        """The same for the project owner's processes (the flows, the Dask workers): a
        certificate and key of their own, signed by the same authority."""
        home = self.owner_home
        return home / "dask-ca.pem", home / "dask-member.pem", home / "dask-member.key"

    def dask_env(self, files: tuple[Path, Path, Path] | None = None) -> dict[str, str]:
        """Dask's configuration for a client or worker of this cluster, as environment
        variables: the certificates to show and check (``files``, by default `tls_files`),
        and TLS only."""
        ca, cert, key = files or self.tls_files()
        prefix = "DASK_DISTRIBUTED__COMM__"
        return {
            f"{prefix}REQUIRE_ENCRYPTION": "True",
            f"{prefix}TLS__CA_FILE": str(ca),
            **{f"{prefix}TLS__{role}__CERT": str(cert) for role in ("CLIENT", "WORKER")},
            **{f"{prefix}TLS__{role}__KEY": str(key) for role in ("CLIENT", "WORKER")},
        }

    def read_state(self) -> dict:
        return json.loads(self.state.read_text()) if self.state.is_file() else {}

    def write_state(self, state: dict) -> None:
        write_private(self.state, json.dumps(state, indent=2) + "\n")

    def remember(self, name: str, pid: int) -> None:
        """Record process ``name``'s pid (``down`` stops it first, before the rest)."""
        state = self.read_state()
        state.setdefault("pids", {})[name] = pid
        self.write_state(state)

    def secrets(self) -> dict[str, str]:
        """The credentials in ``secrets.env`` (mode 0600)."""
        return read_env(self.folder / "secrets.env")

    def make_secrets(self) -> dict[str, str]:
        """The credentials for ``up``: the environment's where it sets them, else those of
        ``secrets.env``, else new random ones; all written back to ``secrets.env``, which the
        other commands read."""
        path = self.folder / "secrets.env"
        stored = read_env(path) if path.is_file() else {}
        values = {
            name: os.environ.get(name) or stored.get(name) or secrets.token_urlsafe(24)
            for name in SECRET_NAMES
        }
        if values != stored:
            self.write_secrets(values)
        return values

    def write_secrets(self, values: dict[str, str]) -> None:
        write_private(self.folder / "secrets.env", "".join(f"{k}={v}\n" for k, v in values.items()))

    def write_client_env(self) -> None:
        """``client.env``: what `client_env` gives, for ``tabula cluster exec``."""
        text = "".join(f"{k}={v}\n" for k, v in self.client_env().items())
        write_private(self.folder / "client.env", text)

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
            **self.dask_env(),
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


def basic_auth(user: str, password: str) -> dict[str, str]:
    """The HTTP header of basic authentication (MLflow's auth app, Prefect's auth string)."""
    token = b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
