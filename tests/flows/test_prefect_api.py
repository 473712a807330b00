"""The Prefect API a run reports to (`flows.api`): the configured ``pipeline.prefect_api_url``,
else ``PREFECT_API_URL``, else a temporary server of the run's own that Ctrl-C does not stop
before the run and that a SIGKILL of the run does not leave behind; and Ctrl-C ending a run
as an interrupt wherever it lands (inside training, as an iteration's flow ends), whatever way
the test suite itself was started. Real ``tabula run`` subprocesses; the temporary servers keep
their database under the test's PREFECT_HOME."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tasks.run.faults import KILL_SIGNAL
from tests import pipeline_runs as runs

pytestmark = pytest.mark.slow


def own_server(run: runs.Run, project: Path, limit: float = 300) -> psutil.Process:
    """The run's temporary Prefect server (its uvicorn child), once it answers: by then the
    run has opened its iteration's MLflow run."""
    deadline = time.monotonic() + limit
    while runs.statuses(project).get("iter-1") != "RUNNING":
        assert run.proc.poll() is None, run.stderr_tail()
        assert time.monotonic() < deadline, "iteration 1 never started"
        time.sleep(0.2)
    children = psutil.Process(run.proc.pid).children()
    servers = [c for c in children if "prefect.server.api.server:create_app" in c.cmdline()]
    assert len(servers) == 1, [c.cmdline() for c in children]
    return servers[0]


def gone(process: psutil.Process, limit: float = 15) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    return {"PREFECT_HOME": str(tmp_path / "prefect-home")}


def test_ctrl_c_stops_a_run_on_its_own_server_at_once(project, home):
    """Ctrl-C reaches the terminal's whole process group; the server, in a session of its own,
    stays up while the run ends its MLflow runs KILLED, then stops with it. Three iterations,
    so that the signal cannot land after the run's work (one tiny iteration can end first)."""
    run = runs.start(project, 3, None, env=home)
    server = own_server(run, project)
    assert os.getsid(server.pid) != os.getsid(run.proc.pid)
    started = time.monotonic()
    os.killpg(run.proc.pid, signal.SIGINT)  # what Ctrl-C sends
    rc, stderr = run.wait(timeout=120)
    took = time.monotonic() - started
    assert rc == 130, stderr[-3000:]
    assert runs.error_line(stderr) == "tabula: interrupted"
    assert took < 60, f"{took:.0f} s to stop"  # it was minutes, on a server stopped first
    statuses = runs.statuses(project)
    assert statuses.pop("pipeline") == "KILLED"
    assert sorted(statuses.values()) == ["FINISHED"] * (len(statuses) - 1) + ["KILLED"], statuses
    assert gone(server)


def test_ctrl_c_inside_training_ends_the_run_as_an_interrupt(project, home):
    """Lightning turns a KeyboardInterrupt inside ``fit`` into ``sys.exit(1)``: Ctrl-C at the
    second training step (a test-only point, `tasks.run.faults`) must still end the run 130."""
    env = {**home, KILL_SIGNAL: "INT"}
    rc, stderr = runs.start(project, 1, None, kill_at="train:2", env=env).wait(timeout=600)
    assert rc == 130, stderr[-3000:]
    assert runs.error_line(stderr) == "tabula: interrupted"
    assert runs.statuses(project) == {"pipeline": "KILLED", "iter-1": "KILLED"}


def test_ctrl_c_as_an_iteration_ends_stops_the_run_before_the_next(project, home):
    """Prefect's engine drops a KeyboardInterrupt raised once a flow run is Completed
    (`tasks.interrupts`): Ctrl-C there (a test-only point) must still stop the run, 130."""
    env = {**home, KILL_SIGNAL: "INT"}
    rc, stderr = runs.start(project, 2, None, kill_at="completed", env=env).wait(timeout=900)
    assert rc == 130, stderr[-3000:]
    assert runs.error_line(stderr) == "tabula: interrupted"
    assert runs.statuses(project) == {"pipeline": "KILLED", "iter-1": "FINISHED"}


def test_the_runs_of_a_suite_started_in_the_background_take_ctrl_c(project, home):
    """A suite started in the background (``make test &``) ignores SIGINT, and an ignored
    signal stays ignored across ``exec``: the runs the tests start must not inherit that
    (`runs.as_a_foreground_job`), or they finish whatever Ctrl-C the tests send."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        run = runs.start(project, 1, None, env=home)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        status = Path(f"/proc/{run.proc.pid}/status").read_text()
        ignored = int(status.split("SigIgn:")[1].split()[0], 16)  # bit n - 1: signal n
        assert not ignored & 1 << (signal.SIGINT - 1)
    finally:
        run.kill()


def test_a_run_killed_outright_takes_its_server_along(project, home):
    run = runs.start(project, 1, None, env=home)
    server = own_server(run, project)
    os.kill(run.proc.pid, signal.SIGKILL)  # the run alone, not its group
    run.proc.wait()
    assert gone(server), "the temporary Prefect server outlived its run"


def test_the_configured_prefect_api_is_the_one_used(prefect_server, project, home):
    """``pipeline.prefect_api_url`` with no PREFECT_API_URL in the environment: the flow runs
    are on that server (Prefect reads its settings once, at import)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    name = f"api-{os.getpid()}-{time.monotonic_ns()}"
    extra = [f"pipeline.prefect_api_url={prefect_server}", f"pipeline.name={name}"]
    rc, stderr = runs.start(project, 1, None, extra=extra, env=home).wait()
    assert rc == 0, stderr[-3000:]
    with (
        temporary_settings({PREFECT_API_URL: prefect_server}),
        get_client(sync_client=True) as client,
    ):
        found = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name, f"{name}-iter-1"]))
        )
    assert sorted(r.name for r in found) == [name, f"{name}-iter-1"]


def test_a_run_with_a_named_api_starts_no_server_of_its_own(monkeypatch):
    """`flows.api.start_server_for` starts the temporary server ahead of the flows only when
    they will report to it."""
    from flows import api

    monkeypatch.setattr(api, "_server", None)
    api.start_server_for("http://127.0.0.1:9/api")
    assert api._server is None
