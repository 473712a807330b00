"""Where an experiment keeps its artifacts: under a URI (a tracking server's own store, s3)
or under a local folder, one subfolder per experiment either way (MLflow on SQLite); and the
pre-flight check of a store, which refuses one that cannot be reached in seconds."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tasks import tracking
from tasks.tracking import identity, preflight, runs, store


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        ("mlflow-artifacts:/tabula", "mlflow-artifacts:/tabula/tabula_x"),
        ("s3://bucket/mlflow/", "s3://bucket/mlflow/tabula_x"),
    ],
)
def test_an_artifact_uri_gets_one_folder_per_experiment(tmp_path: Path, root, expected):
    client = tracking.connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    found = client.get_experiment(store.experiment(client, "tabula/x", root))
    assert found.artifact_location == expected


def test_a_local_artifact_root_is_resolved(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    client = tracking.connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    found = client.get_experiment(store.experiment(client, "tabula/x", "mlflow/artifacts"))
    assert Path(found.artifact_location.removeprefix("file://")) == (
        tmp_path / "mlflow" / "artifacts" / "tabula_x"
    )


# -- the pre-flight check of `tabula run`: a store that cannot be reached, in seconds ---------


class _DatabaseDown(http.server.BaseHTTPRequestHandler):
    """A tracking server whose database is down: every request answers 503."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.requests.append(self.path)
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"database unavailable")

    do_POST = do_GET

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server_without_database(monkeypatch) -> Iterator[tuple[str, list[str]]]:
    """The URL of a server answering 503 to everything, and the paths it was asked for; the
    environment leaves MLflow's HTTP settings unset."""
    for name in preflight.PREFLIGHT_HTTP:
        monkeypatch.delenv(name, raising=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DatabaseDown)
    _DatabaseDown.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", _DatabaseDown.requests
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_answering_5xx_is_one_line_after_bounded_retries(server_without_database):
    url, requests = server_without_database
    start = time.monotonic()
    with pytest.raises(tracking.TrackingStoreError) as refused:
        tracking.require_reachable(url)
    assert time.monotonic() - start < 30  # MLflow's own schedule waits minutes
    assert str(refused.value) == (
        f"MLflow store {url} cannot be reached: too many 503 error responses "
        "(start it, or set pipeline.mlflow_tracking_uri)"
    )
    assert len(requests) == 1 + preflight.PREFLIGHT_HTTP["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
    assert not any(name in os.environ for name in preflight.PREFLIGHT_HTTP)  # restored


def test_fewer_retries_asked_for_are_kept_and_restored(server_without_database, monkeypatch):
    url, requests = server_without_database
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(tracking.TrackingStoreError):
        tracking.require_reachable(url)
    assert len(requests) == 1
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
    assert not any(name in os.environ for name in list(preflight.PREFLIGHT_HTTP)[1:])


def test_a_password_in_the_store_is_not_shown():
    with pytest.raises(tracking.TrackingStoreError) as refused:
        store = f"postgresql+psycopg2://tabula:hunter2@127.0.0.1:{_closed_port()}/mlflow"
        tracking.require_reachable(store)
    assert "hunter2" not in str(refused.value) and "tabula:***@" in str(refused.value)
    assert "Connection refused" in str(refused.value)


def test_a_sqlite_store_is_not_checked_and_not_created(tmp_path: Path):
    tracking.require_reachable("sqlite:///mlflow/mlflow.db", tmp_path)
    assert not any(tmp_path.iterdir())


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- a stop ends the runs of its tabula run ---------------------------------------------------


def test_a_stop_ends_every_run_of_its_tabula_run_and_no_other(tmp_path: Path):
    """The pipeline's stop (`tasks.tracking.fail`, and_running) ends its own run and an
    iteration's that MLflow created before the flow had its id, KILLED for an interrupt; the
    runs of another tabula run in the same experiment stay as they are."""
    from tabula.config import load_config
    from tasks.run.layout import RunLayout
    from tests.conftest import TINY

    cfg = load_config(None, TINY)
    mine = RunLayout(tmp_path, cfg.pipeline.data_dir, cfg.pipeline.name)
    other = RunLayout(tmp_path, cfg.pipeline.data_dir, "other")
    parent = tracking.open_pipeline_run.fn(cfg, mine, {})
    child = tracking.open_iteration_run.fn(cfg, parent, 1, {}).run_id
    theirs = tracking.open_pipeline_run.fn(cfg, other, {}).run_id
    tracking.fail(parent, KeyboardInterrupt(), and_running=True)
    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, tmp_path)
    status = {r: client.get_run(r).info.status for r in (parent.run_id, child, theirs)}
    assert status == {parent.run_id: "KILLED", child: "KILLED", theirs: "RUNNING"}


def test_a_stop_that_interrupts_the_store_mid_statement_still_ends_the_run(tmp_path: Path):
    """A SIGTERM's handler raises between any two lines, the database driver's too: here just
    as a read's first row is fetched. The cursor it stops holds SQLite's lock while the
    traceback keeps it alive; the stop's own writes (`tasks.tracking.fail`) still end the run
    KILLED (MLflow's would wait 20 s for that lock, then fail, and the run stay RUNNING)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from tabula.config import load_config
    from tasks.run.layout import RunLayout
    from tests.conftest import TINY

    cfg = load_config(None, TINY)
    layout = RunLayout(tmp_path, cfg.pipeline.data_dir, cfg.pipeline.name)
    track = tracking.open_pipeline_run.fn(cfg, layout, {})
    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, tmp_path)

    def signal_handler_raises(conn, cursor, statement, *args) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            raise KeyboardInterrupt("signal 15")

    event.listen(Engine, "after_cursor_execute", signal_handler_raises)
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            client.search_runs([track.experiment_id])
    finally:
        event.remove(Engine, "after_cursor_execute", signal_handler_raises)
    tracking.fail(track, stopped.value)
    assert client.get_run(track.run_id).info.status == "KILLED"


def test_the_handle_names_its_runs_and_pickles(tmp_path: Path):
    """An iteration's handle: its run, the pipeline's, or both (the log tasks' ``on``); a
    pipeline's handle names its own run for either; strings only, so it crosses to a Dask
    worker in another process as it is."""
    import pickle

    pipeline = tracking.Tracking("sqlite:////x/mlflow.db", "1", "r", "u", "tabula-r", "p")
    child = pipeline.child("c")
    assert (child.parent_id, child.pipeline_id, child.uid) == ("p", "p", "u")
    assert [child.ids(s) for s in ("iteration", "pipeline", "both")] == [["c"], ["p"], ["c", "p"]]
    assert [pipeline.ids(s) for s in ("iteration", "pipeline", "both")] == [["p"]] * 3
    assert pickle.loads(pickle.dumps(child)) == child


def test_one_client_per_process_and_store(tmp_path: Path):
    """Every task's `connect` of a store, by any thread, gets the process's one client."""
    from concurrent.futures import ThreadPoolExecutor

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with ThreadPoolExecutor(4) as pool:
        clients = list(pool.map(lambda _: tracking.connect(uri), range(8)))
    assert all(c is clients[0] for c in clients)
    assert tracking.connect("sqlite:///mlflow.db", tmp_path) is clients[0]  # (resolved alike)


# -- two projects, one store: each run finds only its own ------------------------------------


def _shared(tmp_path: Path, project: str):
    """The tiny config logging to one store that two projects share, and a project's layout."""
    from tabula.config import load_config
    from tasks.run.layout import RunLayout
    from tests.conftest import TINY

    store = f"pipeline.mlflow_tracking_uri=sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"
    cfg = load_config(None, [*TINY, store])
    return cfg, RunLayout(tmp_path / project, cfg.pipeline.data_dir, cfg.pipeline.name)


def test_a_name_another_project_holds_in_a_shared_store_is_refused(tmp_path: Path):
    import dataclasses

    cfg, first = _shared(tmp_path, "first")
    _, second = _shared(tmp_path, "second")
    tracking.require_own_name(cfg, first)  # a store not there yet holds no run
    assert not (tmp_path / "shared").exists()  # and is not created
    track = tracking.open_pipeline_run.fn(cfg, first, {})
    parent = track.run_id
    child = tracking.open_iteration_run.fn(cfg, track, 1, {}).run_id
    tracking.require_own_name(cfg, first)  # its own name, on resume
    with pytest.raises(tracking.RunNameTakenError) as refused:
        tracking.require_own_name(cfg, second)
    assert str(refused.value).startswith(f"run {first.run!r}: MLflow store sqlite:///")
    assert f"(MLflow run {parent})" in str(refused.value)
    assert not second.root.exists()
    # A second project that got its own identity anyway never touches the first's runs.
    second.params.parent.mkdir(parents=True)
    second.params.write_text("{}\n")
    identity.run_uid(second)
    with pytest.raises(tracking.RunNameTakenError):
        tracking.open_pipeline_run.fn(cfg, second, {})
    assert tracking.mark_killed(cfg, second) == []
    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, first.project)
    exp = store.experiment(client, tracking.experiment_name(), None)
    assert identity.running(client, exp, second.run, tracking.read_uid(second)) == []  # a stop's
    elsewhere = client.create_run(store.experiment(client, "elsewhere", None)).info.run_id
    theirs = dataclasses.replace(track, uid=tracking.read_uid(second), run_id=elsewhere)
    tracking.fail(theirs, KeyboardInterrupt(), and_running=True)  # the second's stop
    assert {client.get_run(r).info.status for r in (parent, child)} == {"RUNNING"}
    assert sorted(tracking.mark_killed(cfg, first)) == sorted([parent, child])
    tags = client.get_run(child).data.tags
    assert tags[tracking.TAG_UID] == tracking.read_uid(first) != tracking.read_uid(second)


def test_a_run_begun_before_identities_keeps_its_runs(tmp_path: Path):
    """A resumed run without a ``uid`` file adopts the runs of its name that have none; a new
    run of that name, or a resumed one when only another's runs are there, is refused."""
    cfg, layout = _shared(tmp_path, "project")
    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, layout.project)
    exp = store.experiment(client, tracking.experiment_name(), None)
    key = {tracking.TAG_RUN: layout.run, tracking.TAG_KIND: "pipeline"}
    older = runs.find_or_create_run(client, exp, key, layout.run)  # as earlier versions did
    with pytest.raises(tracking.RunNameTakenError):
        tracking.require_own_name(cfg, layout)  # a new run: the name is taken
    layout.params.parent.mkdir(parents=True)
    layout.params.write_text("{}\n")  # the run's folder: it is that run, resumed
    tracking.require_own_name(cfg, layout)
    assert tracking.open_pipeline_run.fn(cfg, layout, {}).run_id == older
    assert client.get_run(older).data.tags[tracking.TAG_UID] == tracking.read_uid(layout)


@pytest.mark.parametrize(
    ("found", "uid", "resumed", "own"),
    [
        ([], None, False, None),
        ([], "u1", True, None),
        ([("a", "u2"), ("b", "u1")], "u1", True, "b"),
        ([("a", None), ("b", "u1")], "u1", False, "b"),
        ([("a", None)], None, True, "a"),
        ([("a", None), ("b", None)], None, True, "b"),  # the newest, as before identities
        ([("a", None)], "u1", True, "a"),  # a stop between the uid file and the adoption
        ([("a", None)], None, False, "taken"),
        ([("a", "u2")], None, True, "taken"),
        ([("a", "u2")], "u1", True, "taken"),
    ],
)
def test_which_pipeline_run_is_the_runs_own(found, uid, resumed, own):
    if own == "taken":
        said = r"^here holds a run of that name .* copy that folder's uid file here"
        said = said if resumed else r"^here already holds a run of that name .* delete that"
        with pytest.raises(tracking.RunNameTakenError, match=said):
            identity.own_pipeline_run(found, uid, resumed, "here")
    else:
        assert identity.own_pipeline_run(found, uid, resumed, "here") == own
