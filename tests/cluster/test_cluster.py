"""The cluster of docs/scaling-out.md, for real: ``tabula cluster up`` on this machine, the
pipeline run through its deployment with ``prefect deployment run``, and what a user then
finds.

PostgreSQL holds the MLflow and Prefect servers' data; the servers ask for credentials; the
Dask workers that play the games sit in network namespaces of their own; the DVC remote is a
shared path; a fresh clone on "another host" (a namespace too) pulls the lineage and
reproduces a checkpoint against the same servers, and the deployment's schedule adds an
iteration: once for the 9x9 quick start (fewer games and steps), once for the paper's 19x19
config shrunk to a tiny network, so that the paper's board passes through every stage. Then
the faults of docs/scaling-out.md ("What a fault does"), each against an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cli.clone import empty_project
from cli.cluster import control, servers, system, tls, users
from cli.cluster import layout as cl
from cli.cluster.folder import read_env
from tasks.run.layout import RunLayout, read_json
from tasks.tracking.registry import logged_model_id

pytestmark = [
    pytest.mark.slow,
    pytest.mark.cluster,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="network namespaces need root and iproute2",
    ),
]

TABULA = str(Path(sys.executable).parent / "tabula")
#: The quick start, with fewer games and steps: two iterations in a few minutes.
QUICK = [
    "selfplay.games=64",
    "training.steps=100",
    "evaluation.anchor_games=4",
    "evaluation.anchor_every=1",  # GnuGo's games in both iterations
]
#: configs/19x19-paper.yaml at a size that plays in seconds: every stage, the paper's board.
PAPER_TINY = [
    "network.blocks=1",
    "network.filters=8",
    "network.value_hidden=16",
    "search.simulations=8",
    "search.leaves_per_game=2",
    "selfplay.games=4",
    "selfplay.concurrent_games=2",
    "selfplay.batch_size=8",
    "selfplay.sgf_sample=1",
    "training.batch_size=32",
    "training.steps=4",
    "training.checkpoint_every=4",
    "training.num_workers=0",
    "training.bf16=auto",
    "evaluation.gating_games=2",
    "evaluation.simulations=8",
    "evaluation.anchor_games=0",
]


#: What git needs to read, as root, a project of another user's (the flows' user).
SAFE_GIT = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.directory",
    "GIT_CONFIG_VALUE_0": "*",
}
#: The user who owns the projects the flows run in: not root, and with no home of its own.
OWNER = "nobody"
#: The projects made by `owned_project`, removed at the end of the module.
_PROJECTS: list[Path] = []


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without any Prefect or MLflow address of the test session."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    return {**env, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **SAFE_GIT, **extra}


def owned_project() -> Path:
    """An empty project of `OWNER`'s, where that user reaches it (pytest's folders are
    root's only)."""
    import pwd

    folder = Path(tempfile.mkdtemp(prefix="tabula-project-", dir="/var/tmp"))
    _PROJECTS.append(folder)
    project = empty_project(folder / "project")
    user = pwd.getpwnam(OWNER)
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    folder.chmod(0o755)
    return project


def _snapshot(*roots: Path) -> dict[str, tuple]:
    """Every path under ``roots`` (links not followed): its type, mode, owner and content."""
    found: dict[str, tuple] = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            st = path.lstat()
            if path.is_symlink():
                body: object = os.readlink(path)
            else:
                body = path.read_bytes() if path.is_file() else None
            found[str(path)] = (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, body)
    return found


def _network() -> str:
    """The namespaces and links of this machine."""
    return "".join(
        subprocess.run(argv, capture_output=True, text=True).stdout
        for argv in (["ip", "netns", "list"], ["ip", "-o", "link", "show"])
    )


def test_up_refuses_a_folder_of_another_user_and_touches_nothing(tmp_path):
    """A folder planted by another user, made to look like a cluster's, with a link where the
    passwords' temporary file would go: refused in one line naming its owner, before
    anything is made or started."""
    folder = tmp_path / "planted"
    folder.mkdir(mode=0o755)
    (folder / "cluster.json").write_text("{}\n")
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    (folder / "secrets.env.tmp").symlink_to(victim)
    for path in (folder, folder / "cluster.json", folder / "secrets.env.tmp"):
        os.chown(path, 65534, 65534, follow_symlinks=False)  # nobody
    project = tmp_path / "project"
    project.mkdir()
    before, network = _snapshot(folder, victim, project), _network()
    started = time.monotonic()
    done = subprocess.run([TABULA, "cluster", "up", "--dir", str(folder)], cwd=project,
                          env=_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"tabula: {folder} belongs to nobody, not to root who runs tabula cluster: give a "
        "folder of your own"
    ), done.stderr
    assert done.stdout == ""
    assert _snapshot(folder, victim, project) == before
    assert _network() == network
    assert system.marked_processes(cl.Cluster(folder)) == []
    assert time.monotonic() - started < 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[cl.Cluster, Path]]:
    """A cluster up for this module, its project the shared folder; down (purged) after."""
    if system.network_exists():
        pytest.fail(f"a cluster is already up (bridge {cl.BRIDGE}): tabula cluster down")
    folder = Path(tempfile.mkdtemp(prefix="tabula-cluster-", dir="/var/tmp"))
    project = owned_project()
    # The scheduler service looks for due runs every 5 s instead of 60 s.
    env = _env(PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="5")
    try:
        up = subprocess.run([TABULA, "cluster", "up", "--dir", str(folder)], cwd=project,
                            env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert up.returncode == 0, up.stderr[-3000:]
        assert control.run_command() in up.stdout
        forwarding = system.IP_FORWARD.read_text().strip() != "0"
        assert ("warning: IP forwarding is on" in up.stderr) == forwarding, up.stderr
        yield cl.Cluster(folder), project
    finally:
        down = subprocess.run([TABULA, "cluster", "down", "--dir", str(folder), "--purge"],
                              env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert down.returncode == 0, down.stderr
        assert not system.network_exists() and not folder.exists()
        for made in _PROJECTS:
            shutil.rmtree(made, ignore_errors=True)


def deployment_run(c: cl.Cluster, timeout: int = 900, **params) -> str:
    """``prefect deployment run ... --watch`` as ``up`` prints it; the final state's line."""
    argv = [TABULA, "cluster", "exec", "--dir", str(c.folder), "--", "prefect", "deployment",
            "run", cl.DEPLOYMENT, "--params", json.dumps(params), "--watch"]  # fmt: skip
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=timeout)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_servers_refuse_whoever_has_no_credentials(cluster):
    c, _ = cluster
    s = c.secrets()
    search = cl.mlflow_probe_url()
    assert _status(search) == 401
    assert _status(search, cl.basic_auth(cl.USER, "wrong")) == 401
    assert _status(search, cl.basic_auth(cl.USER, s["TABULA_CLUSTER_MLFLOW_PASSWORD"])) == 200
    version = f"{cl.prefect_url()}/api/admin/version"  # (/api/health stays open, for probes)
    assert _status(version) == 401
    assert _status(version, cl.basic_auth(cl.USER, s["TABULA_CLUSTER_PREFECT_PASSWORD"])) == 200

    import psycopg2

    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(host=cl.HOST, user=cl.USER, password="wrong", dbname="mlflow")
    # Bound to the cluster's network only: nothing answers on loopback.
    for port in (cl.PORTS["mlflow"], cl.PORTS["prefect"], cl.PORTS["postgres"]):
        assert not system.port_open("127.0.0.1", port)
    for path in (c.folder / "secrets.env", c.folder / "client.env", *c.owner_tls_files()):
        assert path.stat().st_mode & 0o077 == 0
    # The servers' certificate and MLflow's settings: root's, the servers' user's to read.
    service = pwd.getpwnam(users.SERVICE_USER)
    for path in (c.tls, *c.tls_files(), c.folder / "mlflow-auth.ini"):
        assert path.stat().st_uid == 0 and path.stat().st_gid == service.pw_gid, path
        assert path.stat().st_mode & 0o027 == 0, path
    # Others pass through the folder to what is theirs, but may not list it.
    assert stat.S_IMODE(c.folder.stat().st_mode) == 0o711
    owner = pwd.getpwnam(OWNER)
    for folder, uid in ((c.logs, 0), (c.artifacts, service.pw_uid), (c.service_home,
                        service.pw_uid), (c.dvc_remote, owner.pw_uid), (c.owner_home,
                        owner.pw_uid)):  # fmt: skip
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        assert folder.stat().st_uid == uid, folder
    for path in c.logs.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert path.stat().st_uid == 0, path


def _umask_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Umask")), 8)


def test_the_servers_make_their_files_private_and_dask_gets_no_mlflow_password(cluster):
    c, _ = cluster
    pids = c.read_state()["pids"]
    for name in ("mlflow", "prefect", "dask-scheduler"):
        assert _umask_of(pids[name]) == 0o077, name
    password = c.secrets()["TABULA_CLUSTER_MLFLOW_PASSWORD"].encode()
    members = [int(pid) for host in ("dask", *cl.DASK_WORKERS) for pid in subprocess.run(
        ["ip", "netns", "pids", cl.namespace(host)], capture_output=True, text=True
    ).stdout.split()]  # fmt: skip
    assert len(members) >= 1 + len(cl.DASK_WORKERS)
    for pid in members:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert password not in environ and b"MLFLOW_TRACKING_" not in environ, pid
    worker = Path(f"/proc/{pids['prefect-worker']}/environ").read_bytes()
    assert password in worker  # the flows log to MLflow


def test_the_dask_scheduler_refuses_whoever_has_no_certificate(cluster, tmp_path):
    from distributed import Client, Security

    c, _ = cluster
    with Client(cl.dask_address(), security=tls.security(c), timeout=10) as client:
        assert len(client.scheduler_info(n_workers=-1)["workers"]) == len(cl.DASK_WORKERS)
    plain = cl.dask_address().replace("tls://", "tcp://")
    with pytest.raises((OSError, TimeoutError)):
        Client(plain, timeout=5, security=Security(require_encryption=False))
    # A certificate of another authority, however well made, is refused in the handshake.
    other = cl.Cluster(tmp_path / "other")
    other.folder.mkdir()
    tls.make_certificates(other, [cl.HOST])
    with pytest.raises((OSError, TimeoutError)):
        Client(cl.dask_address(), security=tls.security(other), timeout=5)
    # Only the cluster's network reaches the scheduler, and nothing in the folder can sign.
    assert not system.port_open("127.0.0.1", cl.PORTS["dask"])
    # No dashboard unless asked for, nor Dask's other HTTP pages: on the cluster's network,
    # the scheduler serves its TLS port only, and each worker its own and its nanny's.
    for host, ports in (("dask", 1), *((h, 2) for h in cl.DASK_WORKERS)):
        listening = subprocess.run(["ip", "netns", "exec", cl.namespace(host), "ss", "-ltnH"],
                                   capture_output=True, text=True, check=True).stdout  # fmt: skip
        mine = [line.split()[3] for line in listening.splitlines()]
        outside = [a for a in mine if a.startswith(cl.HOSTS[host])]
        assert len(outside) == ports, (host, mine)
        assert all(a.startswith((cl.HOSTS[host], "127.0.0.1:")) for a in mine), (host, mine)
    assert sorted(p.name for p in c.tls.iterdir()) == ["ca.pem", "member.key", "member.pem"]
    assert "PRIVATE KEY" not in (c.tls / "ca.pem").read_text()


#: The two runs: the deployment's parameters besides the cluster's own overrides.
RUNS = {
    "9x9": {"config": "configs/quickstart.yaml", "name": "cluster", "overrides": QUICK},
    "19x19": {"config": "configs/19x19-paper.yaml", "name": "paper19", "overrides": PAPER_TINY},
}


def _parameters(c: cl.Cluster, board: str) -> dict:
    run = RUNS[board]
    return {**run, "overrides": c.overrides() + run["overrides"]}


#: The processes the pool's worker started during each run (the flows), seen while it ran:
#: board -> {pid: (its uids, its command line)}.
SEEN: dict[str, dict[int, tuple[set[int], str]]] = {}


@pytest.fixture(scope="module", params=list(RUNS))
def ran(cluster, request) -> tuple[cl.Cluster, Path, RunLayout, str]:
    """Two iterations of the 9x9 quick start, then of the paper's 19x19 config shrunk,
    started through the deployment; whom the flows ran as is watched meanwhile."""
    c, project = cluster
    seen = SEEN.setdefault(request.param, {})
    ended = threading.Event()

    def watch() -> None:
        while not ended.wait(0.5):
            for pid in _descendants(c.read_state()["pids"]["prefect-worker"]):
                try:
                    seen_now = (_uids(pid), Path(f"/proc/{pid}/cmdline").read_text())
                except OSError:
                    continue  # ended meanwhile
                if not seen.get(pid, (None, ""))[1]:  # (an ending process shows no command)
                    seen[pid] = seen_now

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        final = deployment_run(c, iterations=2, **_parameters(c, request.param))
    finally:
        ended.set()
        watcher.join()
    assert "Completed" in final, (final, _tail(c.logs / "prefect-worker.log"))
    return c, project, RunLayout(project, "data", RUNS[request.param]["name"]), request.param


def _uids(pid: int) -> set[int]:
    """The real, effective, saved and file-system uids of process ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {int(u) for u in next(line for line in status if line.startswith("Uid:")).split()[1:]}


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (its children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def _netns_pids(host: str) -> list[int]:
    listed = subprocess.run(["ip", "netns", "pids", cl.namespace(host)], capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    return [int(pid) for pid in listed.split()]


def test_no_server_dask_member_or_flow_runs_as_root(ran):
    """The servers and the Dask scheduler run as the servers' user; the pool's worker, the
    flows and the Dask workers as the project's owner, who is left with no file of root's."""
    c, project, _, board = ran
    service, owner = pwd.getpwnam(users.SERVICE_USER), pwd.getpwnam(OWNER)
    pids = c.read_state()["pids"]
    for name in ("mlflow", "prefect"):
        assert _uids(pids[name]) == {service.pw_uid}, name
    for pid in _netns_pids("dask"):
        assert _uids(pid) == {service.pw_uid}, pid
    workers = [pid for host in cl.DASK_WORKERS for pid in _netns_pids(host)]
    assert len(workers) >= len(cl.DASK_WORKERS)
    for pid in [pids["prefect-worker"], *workers]:
        assert _uids(pid) == {owner.pw_uid}, pid
    flows = SEEN[board]
    # The flow's own Python (Prefect's engine, or the supervisor of its workspace) and what
    # it starts (GnuGo for the anchor games).
    assert any("-m\0prefect." in command for _, command in flows.values()), flows
    assert {uid for uids, _ in flows.values() for uid in uids} == {owner.pw_uid}, flows
    rooted = [p for p in [project, *project.rglob("*")] if p.lstat().st_uid == 0]
    assert rooted == []
    assert all(p.lstat().st_uid == owner.pw_uid for p in c.dvc_remote.rglob("*"))


def test_a_new_mlflow_password_works_and_the_old_one_gets_401(cluster):
    """``tabula cluster rotate-password`` after the first ``up``: clients that read the new
    password from client.env get in (the runs after this test too, through the restarted
    pool's worker), the old one is refused."""
    c, _ = cluster
    old = c.secrets()["TABULA_CLUSTER_MLFLOW_PASSWORD"]
    done = subprocess.run([TABULA, "cluster", "rotate-password", "--dir", str(c.folder)],
                          env=_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    new = c.secrets()["TABULA_CLUSTER_MLFLOW_PASSWORD"]
    assert new != old
    assert read_env(c.folder / "client.env")["MLFLOW_TRACKING_PASSWORD"] == new
    search = cl.mlflow_probe_url()
    assert _status(search, cl.basic_auth(cl.USER, new)) == 200
    assert _status(search, cl.basic_auth(cl.USER, old)) == 401
    worker = Path(f"/proc/{c.read_state()['pids']['prefect-worker']}/environ").read_bytes()
    assert new.encode() in worker and old.encode() not in worker
    assert old not in done.stdout + done.stderr and new not in done.stdout + done.stderr


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text()[-n:] if path.is_file() else ""


def test_two_iterations_with_selfplay_on_the_other_hosts(ran):
    c, project, layout, board = ran
    for i in (1, 2):
        for stage in ("selfplay", "train", "evaluate", "promote"):
            assert layout.marker(i, stage).exists(), (i, stage)
    size = yaml.safe_load(layout.params.read_text())["rules"]["board_size"]
    assert size == {"9x9": 9, "19x19": 19}[board]
    assert not layout.marker(3, "promote").exists()
    # Each self-play task ran in a Dask worker's process, inside that worker's namespace.
    in_workers = {
        int(pid)
        for host in cl.DASK_WORKERS
        for pid in subprocess.run(
            ["ip", "netns", "pids", cl.namespace(host)], capture_output=True, text=True
        ).stdout.split()  # fmt: skip
    }
    ran_in = {read_json(layout.marker(i, f"selfplay-w{w:02d}"))["pid"] for i in (1, 2)
              for w in range(len(cl.DASK_WORKERS))}  # fmt: skip
    assert ran_in <= in_workers, (ran_in, in_workers)


def test_mlflow_on_postgres_holds_the_runs_and_serves_the_models(ran, monkeypatch):
    c, _, layout, _ = ran
    for name, value in c.client_env().items():
        monkeypatch.setenv(name, value)
    import mlflow.pytorch
    import psycopg2
    from mlflow.exceptions import MlflowException

    from mlflow import MlflowClient

    client = MlflowClient(cl.mlflow_url())
    model = f"tabula-{layout.run}"
    versions = client.search_model_versions(f"name = '{model}'")
    assert versions
    marks = [read_json(layout.marker(i, "promote")) for i in (1, 2)]
    promoted = [mark["version"] for mark in marks if mark["promoted"]]
    if promoted:
        champion = client.get_model_version_by_alias(model, "champion")
        assert champion.version == promoted[-1]
        uri = f"models:/{model}@champion"
    else:  # the paper's gate kept the initial network, which is not registered
        with pytest.raises(MlflowException, match="alias champion not found"):
            client.get_model_version_by_alias(model, "champion")
        champion = max(versions, key=lambda v: int(v.version))
        uri = f"models:/{model}/{champion.version}"
    loaded = mlflow.pytorch.load_model(uri)  # over HTTP
    assert sum(p.numel() for p in loaded.parameters()) > 0
    # the version is the checkpoint's logged model, its files served by the tracking server
    logged = client.get_logged_model(logged_model_id(champion))
    assert champion.source == f"models:/{logged.model_id}"
    assert logged.artifact_location.startswith("mlflow-artifacts:")
    assert list(c.artifacts.rglob("MLmodel"))  # stored by the server, in its folder

    with psycopg2.connect(host=cl.HOST, user=cl.USER, dbname="mlflow",
                          password=c.secrets()["TABULA_CLUSTER_DB_PASSWORD"]) as db:  # fmt: skip
        cursor = db.cursor()
        cursor.execute("SELECT count(*) FROM runs WHERE status = 'FINISHED'")
        assert cursor.fetchone()[0] >= 3  # the run and its two iterations
        cursor.execute("SELECT count(*) FROM model_versions WHERE name = %s", (model,))
        assert cursor.fetchone()[0] == len(versions)


def test_no_credential_is_written_where_a_run_keeps_its_records(ran):
    c, project, layout, _ = ran
    secrets = list(c.secrets().values())
    written = [p for p in project.rglob("*") if p.is_file() and ".git" not in p.parts]
    history = subprocess.run(["git", "log", "--all", "-p"], cwd=project, capture_output=True,
                             text=True, check=True, env=_env()).stdout  # fmt: skip
    log_files = [*c.logs.glob("*.log"), c.postgres / "postgres.log"]
    logs = [p.read_text(errors="replace") for p in log_files]
    for secret in secrets:
        assert secret not in history
        assert not any(secret in log for log in logs)
        assert not [p for p in written if secret.encode() in p.read_bytes()]
    params = yaml.safe_load(layout.params.read_text())
    assert params["pipeline"]["mlflow_tracking_uri"] == cl.mlflow_url()


def test_no_credential_is_kept_by_the_servers(ran, monkeypatch):
    """Nor where the servers keep what a run gives them: MLflow's params and tags of every
    run, its artifact store, the DVC remote, Prefect's flow-run parameters and logs, and a
    dump of both databases."""
    c, _, _, _ = ran
    secrets = [value.encode() for value in c.secrets().values()]
    for name, value in c.client_env().items():
        monkeypatch.setenv(name, value)
    from mlflow import MlflowClient

    client = MlflowClient(cl.mlflow_url())
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, max_results=5000)
    assert runs
    recorded = [f"{k}={v}" for r in runs for k, v in (*r.data.params.items(), *r.data.tags.items())]
    kept = {"mlflow params and tags": "\n".join(recorded).encode()}
    for root in (c.artifacts, c.dvc_remote):
        files = [p for p in root.rglob("*") if p.is_file()]
        assert files, root
        kept |= {str(p): p.read_bytes() for p in files}
    kept |= _prefect_runs_and_logs(c)
    pg = system.postgres_bin()
    for db in cl.DATABASES:
        dump = subprocess.run(["runuser", "-u", "postgres", "--", str(pg / "pg_dump"), "-h",
                               str(c.postgres / "run"), "-d", db], capture_output=True,
                              check=True, timeout=300).stdout  # fmt: skip
        assert len(dump) > 1000, db
        kept[f"pg_dump {db}"] = dump
    for secret in secrets:
        assert [where for where, body in kept.items() if secret in body] == []


def _prefect_runs_and_logs(c: cl.Cluster) -> dict[str, bytes]:
    """Every flow run's parameters and every log line the Prefect server holds."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    env = c.client_env()
    settings = {
        PREFECT_API_URL: env["PREFECT_API_URL"],
        PREFECT_API_AUTH_STRING: env["PREFECT_API_AUTH_STRING"],
    }
    with temporary_settings(updates=settings), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(limit=200)
        logs, offset = [], 0
        while batch := client.read_logs(limit=200, offset=offset):
            logs += [log.message for log in batch]
            offset += len(batch)
    assert runs and logs
    return {
        "prefect flow-run parameters": json.dumps([r.parameters for r in runs]).encode(),
        "prefect logs": "\n".join(logs).encode(),
    }


def test_a_fresh_clone_on_another_host_reproduces_a_checkpoint(ran, tmp_path):
    c, project, layout, _ = ran
    host2 = ["ip", "netns", "exec", cl.namespace("host2")]
    fresh = tmp_path / "elsewhere"
    # The project is its owner's: root's git reads it only where told it may, in the
    # upload-pack it starts too (which does not get the environment's settings).
    pack = ["--upload-pack", "git -c safe.directory=* upload-pack"]
    subprocess.run([*host2, "git", "clone", "-q", "-b", "main", *pack, str(project), str(fresh)],
                   check=True, env=_env())  # fmt: skip
    lineage = "refs/heads/tabula/*:refs/heads/tabula/*"
    subprocess.run([*host2, "git", "fetch", "-q", *pack, "origin", lineage], cwd=fresh,
                   check=True, env=_env())  # fmt: skip
    argv = [*host2, TABULA, "cluster", "exec", "--dir", str(c.folder), "--", "tabula",
            "reproduce", f"{layout.run}/2", "--set", f"pipeline.name={layout.run}",
            *(f"--set={item}" for item in c.overrides())]  # fmt: skip
    done = subprocess.run(argv, cwd=fresh, env=_env(), capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "MATCH" in done.stdout


def test_both_uis_show_the_run_to_whoever_signs_in(ran, monkeypatch):
    """What a new user sees in headless Chromium after the printed command: MLflow's runs
    table (basic auth) with the run and its iterations' runs nested under it, Prefect's runs
    page (after its login) with the iterations' flow runs, Completed; without credentials,
    MLflow's page does not open and Prefect's shows its login only."""
    from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect, sync_playwright

    from cli.ui import experiment_links
    from mlflow import MlflowClient

    c, _, layout, _ = ran
    for name, value in c.client_env().items():
        monkeypatch.setenv(name, value)
    client = MlflowClient(cl.mlflow_url())
    experiments = [e.experiment_id for e in client.search_experiments()]
    (parent,) = client.search_runs(experiments, f"attributes.run_name = '{layout.run}'")
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    assert len(children) == 2
    s = c.secrets()
    expect.set_options(timeout=60_000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            stranger = browser.new_page()  # asked for credentials, and has none to give
            with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
                stranger.goto(cl.mlflow_url())
            signed_in = browser.new_context(
                http_credentials={"username": cl.USER,
                                  "password": s["TABULA_CLUSTER_MLFLOW_PASSWORD"]},
                viewport={"width": 1600, "height": 1000},
            )  # fmt: skip
            page = signed_in.new_page()
            page.goto(experiment_links(parent.info.experiment_id, cl.mlflow_url()).runs)
            grid = page.locator(".ag-root")
            expect(grid.get_by_role("link", name=layout.run, exact=True)).to_be_visible()
            grid.get_by_role("gridcell").filter(
                has=page.get_by_role("link", name=layout.run, exact=True)
            ).get_by_role("button").click()  # its iterations, nested under it
            for child in children:
                name = child.info.run_name
                expect(grid.get_by_role("link", name=name, exact=True).first).to_be_visible()

            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{cl.prefect_url()}/runs")
            password = page.locator("input[type=password]")
            expect(password).to_be_visible()  # the login, and no runs behind it
            expect(page.get_by_text(f"{layout.run}-iter-1")).to_have_count(0)
            password.fill(f"{cl.USER}:{s['TABULA_CLUSTER_PREFECT_PASSWORD']}")
            password.press("Enter")
            for i in (1, 2):
                row = page.get_by_text(f"{layout.run}-iter-{i}", exact=True).first
                expect(row).to_be_visible()
            expect(page.get_by_text("Completed").first).to_be_visible()
        finally:
            browser.close()


def test_the_deployments_schedule_adds_one_iteration(ran):
    c, project, layout, board = ran
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    env = c.client_env()
    settings = {
        PREFECT_API_URL: env["PREFECT_API_URL"],
        PREFECT_API_AUTH_STRING: env["PREFECT_API_AUTH_STRING"],
    }
    with temporary_settings(updates=settings), get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(cl.DEPLOYMENT)
        assert deployment.parameters["more"] == 1
        # What `prefect deployment schedule create ... --cron` makes: a run every minute, with
        # this run's parameters and no `iterations`, so the deployment's `more: 1` applies.
        client.create_deployment_schedules(
            deployment.id,
            [(CronSchedule(cron="* * * * *"), True)],
            max_scheduled_runs=1,
            parameters=_parameters(c, board),
        )
        started = _first_scheduled_run_running(client, deployment.id, layout.run)
        # One scheduled run is enough: deleting the schedule deletes the runs still waiting.
        for schedule in client.read_deployment_schedules(deployment.id):
            client.delete_deployment_schedule(deployment.id, schedule.id)
        _drop_late_scheduled_runs(client, deployment.id)
        state = _final_state(client, started)
        runs = _runs_seen(client, deployment.id)
    assert state.is_completed(), (state, _tail(c.logs / "prefect-worker.log"))
    assert layout.marker(3, "promote").exists(), runs
    assert not layout.marker(4, "promote").exists(), runs


def _deployment_only(deployment_id):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    return DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))


def _state(run) -> str | None:
    """A flow run's state type (``RUNNING``, ``SCHEDULED``, ...), None before it has one."""
    return run.state.type.value if run.state else None


def _first_scheduled_run_running(client, deployment_id, name: str, timeout_s: float = 300):
    """The first run a schedule started for the pipeline run ``name`` once it is running (an
    earlier board's schedule may have left a run of its own, which says another name)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run in client.read_flow_runs(deployment_filter=_deployment_only(deployment_id)):
            if (
                run.auto_scheduled
                and run.parameters.get("name") == name
                and _state(run) == "RUNNING"
            ):
                return run.id
        time.sleep(1)
    raise AssertionError(f"the schedule started no run of {name}")


def _drop_late_scheduled_runs(client, deployment_id, settle_s: float = 10) -> None:
    """Delete the runs a schedule left waiting after it was deleted: Prefect's scheduler may
    have read the schedule just before and insert its next run just after the deletion removed
    those waiting. Such a run would start a minute later, beside the next test's."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        for run in client.read_flow_runs(deployment_filter=_deployment_only(deployment_id)):
            if run.auto_scheduled and _state(run) == "SCHEDULED":
                client.delete_flow_run(run.id)
        time.sleep(1)


def _runs_seen(client, deployment_id) -> list[tuple[str, str | None, str, str | None]]:
    """The deployment's runs: each one's pipeline run, how it was started, its state."""
    return [
        (
            run.name,
            run.parameters.get("name"),
            "scheduled" if run.auto_scheduled else "by hand",
            _state(run),
        )
        for run in client.read_flow_runs(deployment_filter=_deployment_only(deployment_id))
    ]


def _final_state(client, run_id, timeout_s: float = 900):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = client.read_flow_run(run_id).state
        if state is not None and state.is_final():
            return state
        time.sleep(2)
    raise AssertionError(f"flow run {run_id} did not finish")


# --- faults: each ends with the same bytes as an uninterrupted run ---------------------------

#: The quick start at a size where self-play lasts long enough to be hit (about 10 s a worker).
FAULT = ["selfplay.games=128", "training.steps=60", "evaluation.anchor_games=2"]


def start_run(c: cl.Cluster, project: Path, experiment: str) -> subprocess.Popen:
    """One iteration of the fault config through the deployment, in ``project``, logged to
    its own MLflow experiment (a run name is unique per experiment), not waited for."""
    params = {"iterations": 1, "name": "faults", "project": str(project),
              "overrides": c.overrides() + FAULT}  # fmt: skip
    argv = [TABULA, "cluster", "exec", "--dir", str(c.folder), "--", "prefect", "deployment",
            "run", cl.DEPLOYMENT, "--params", json.dumps(params), "--job-variable",
            "env=" + json.dumps({"MLFLOW_EXPERIMENT_NAME": experiment}), "--watch"]  # fmt: skip
    return subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip


def finish(run: subprocess.Popen, timeout: int = 900) -> str:
    out, _ = run.communicate(timeout=timeout)
    return out.strip().splitlines()[-1] if out.strip() else ""


def _stage_outs(layout: RunLayout) -> dict[str, str]:
    lock = yaml.safe_load((layout.iteration(1) / "dvc.lock").read_text())["stages"]
    return {o["path"]: o["md5"] for stage in lock.values() for o in stage.get("outs", [])}


def assert_same_bytes(layout: RunLayout, reference: RunLayout) -> None:
    """The faulted run's self-play and training outputs (DVC hashes, weights) equal the
    reference's, with no shard twice and nothing half-written."""
    assert layout.marker(1, "promote").exists()
    assert _stage_outs(layout) == _stage_outs(reference)
    assert (
        read_json(layout.marker(1, "train"))["weights_sha256"]
        == read_json(reference.marker(1, "train"))["weights_sha256"]
    )
    names = sorted(p.relative_to(layout.root).as_posix() for p in layout.root.rglob("*.parquet"))
    assert names == sorted(
        p.relative_to(reference.root).as_posix() for p in reference.root.rglob("*.parquet")
    )
    assert not [p for p in layout.root.rglob("*") if ".tmp" in p.name]


@pytest.fixture(scope="module")
def reference(cluster, tmp_path_factory) -> RunLayout:
    c, _ = cluster
    project = owned_project()
    final = finish(start_run(c, project, "tabula-reference"))
    assert "Completed" in final, (final, _tail(c.logs / "prefect-worker.log"))
    return RunLayout(project, "data", "faults")


def _wait(condition, timeout_s: float = 600, every_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every_s)


def _processing_on(c: cl.Cluster, host: str) -> bool:
    """Whether the Dask worker in ``host``'s namespace is running a task."""
    from distributed import Client

    with Client(cl.dask_address(), security=tls.security(c), timeout=10) as client:
        return any(_host_of(address) == host and keys
                   for address, keys in client.processing().items())  # fmt: skip


def _host_of(address: str) -> str:
    ip = address.removeprefix("tls://").rsplit(":", 1)[0]
    return next(h for h, a in cl.HOSTS.items() if a == ip)


def test_a_dask_worker_killed_in_self_play(cluster, reference, tmp_path):
    c, _ = cluster
    project = owned_project()
    run = start_run(c, project, "tabula-fault-dask")
    _wait(lambda: _processing_on(c, "w1"))
    for pid in subprocess.run(["ip", "netns", "pids", cl.namespace("w1")], capture_output=True,
                              text=True).stdout.split():  # fmt: skip
        os.kill(int(pid), signal.SIGKILL)  # the host is gone: nanny, worker and its games
    final = finish(run)
    control.restart(c.folder, "dask-w1")
    assert "Completed" in final, (final, _tail(c.logs / "prefect-worker.log"))
    assert_same_bytes(RunLayout(project, "data", "faults"), reference)


def test_the_tracking_server_stopped_for_30_s_in_training(cluster, reference, tmp_path):
    c, _ = cluster
    project = owned_project()
    layout = RunLayout(project, "data", "faults")
    run = start_run(c, project, "tabula-fault-mlflow")
    _wait(lambda: layout.marker(1, "selfplay").exists())  # training begins
    system.stop_process(c.read_state()["pids"]["mlflow"])
    time.sleep(30)
    control.restart(c.folder, "mlflow")
    final = finish(run)
    assert "Completed" in final, (final, _tail(c.logs / "prefect-worker.log"))
    assert_same_bytes(layout, reference)


def test_the_prefect_server_restarted_in_an_iteration(cluster, reference, tmp_path):
    c, _ = cluster
    project = owned_project()
    layout = RunLayout(project, "data", "faults")
    run = start_run(c, project, "tabula-fault-prefect")
    _wait(lambda: layout.marker(1, "plan").exists())  # self-play begins
    control.restart(c.folder, "prefect")
    finish(run)  # (its --watch may end with the server's event stream: the run goes on)
    state = _state_of_the_run_in(c, project)
    assert state.is_completed(), (state, _tail(c.logs / "prefect-worker.log"))
    assert_same_bytes(layout, reference)


def test_postgres_down_for_60_s_in_an_iteration(cluster, reference):
    """PostgreSQL, under both servers, stops for a minute once self-play has begun: the run
    waits it out (the servers answer errors meanwhile, which their clients retry) and ends
    Completed, or fails and a second start resumes it; either way with the reference's
    bytes."""
    c, _ = cluster
    project = owned_project()
    layout = RunLayout(project, "data", "faults")
    run = start_run(c, project, "tabula-fault-postgres")
    _wait(lambda: layout.marker(1, "plan").exists())  # self-play begins
    servers.postgres_down(c)
    try:
        assert not system.port_open(cl.HOST, cl.PORTS["postgres"])
        time.sleep(60)
    finally:
        control.restart(c.folder, "postgres")
    finish(run)  # (its --watch may end with a server error: the run goes on)
    state = _state_of_the_run_in(c, project)
    print(f"\nwith PostgreSQL down 60 s, the run ended {state.type.value}")
    if not state.is_completed():
        again = finish(start_run(c, project, "tabula-fault-postgres"))
        assert "Completed" in again, (again, _tail(c.logs / "prefect-worker.log"))
    assert_same_bytes(layout, reference)


def _state_of_the_run_in(c: cl.Cluster, project: Path, final: bool = True):
    """The state of the deployment's flow run (not its subflows') whose project is
    ``project``: its final state, waited for, unless ``final`` is False."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    env = c.client_env()
    settings = {
        PREFECT_API_URL: env["PREFECT_API_URL"],
        PREFECT_API_AUTH_STRING: env["PREFECT_API_AUTH_STRING"],
    }
    with temporary_settings(updates=settings), get_client(sync_client=True) as client:
        flow_id = client.read_deployment_by_name(cl.DEPLOYMENT).flow_id
        mine = str(project)
        runs = [r for r in client.read_flow_runs()
                if r.flow_id == flow_id and r.parameters.get("project") == mine]  # fmt: skip
        assert len(runs) == 1, runs
        return _final_state(client, runs[0].id) if final else runs[0].state


def test_postgres_unreachable_at_start(cluster, tmp_path):
    c, _ = cluster
    project = empty_project(tmp_path / "project")
    servers.postgres_down(c)
    try:
        argv = [TABULA, "cluster", "exec", "--dir", str(c.folder), "--", "tabula", "run",
                "--iterations", "1", "--set", "pipeline.name=nodb",
                *(f"--set={item}" for item in c.overrides() + FAULT)]  # fmt: skip
        done = subprocess.run(argv, cwd=project, env=_env(), capture_output=True, text=True,
                              timeout=300)  # fmt: skip
    finally:
        control.restart(c.folder, "postgres")
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert cl.mlflow_url() in done.stderr
    assert not (project / "data").exists()
    branches = subprocess.run(["git", "branch", "--list"], cwd=project, capture_output=True,
                              text=True, check=True).stdout.split()  # fmt: skip
    assert branches == ["*", "main"]
    commits = subprocess.run(["git", "rev-list", "--count", "--all"], cwd=project,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert commits.strip() == "1"


def test_down_ends_the_flows_before_the_servers(cluster, tmp_path):
    """``down`` in the middle of a run: the flow stops while the Prefect server still
    answers, so after the next ``up`` its run shows Crashed, not RUNNING for ever."""
    c, shared = cluster
    project = owned_project()
    layout = RunLayout(project, "data", "faults")
    run = start_run(c, project, "tabula-fault-down")
    _wait(lambda: layout.marker(1, "plan").exists())  # self-play begins
    env = _env(PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="5")
    down = subprocess.run([TABULA, "cluster", "down", "--dir", str(c.folder)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert system.marked_processes(c) == [] and not system.network_exists()
    finish(run, timeout=120)  # its --watch ends with the server
    up = subprocess.run([TABULA, "cluster", "up", "--dir", str(c.folder)], cwd=shared, env=env,
                        capture_output=True, text=True, timeout=600)  # fmt: skip
    assert up.returncode == 0, up.stderr[-3000:]
    state = _state_of_the_run_in(c, project, final=False)
    assert state is not None and state.type.value == "CRASHED", state
