"""`tabula run` in a subprocess and what a finished run must hold: the helpers of the tests
that kill and resume runs (`tests/flows/test_resume.py`, `tests/e2e/test_faults.py`): a run
is killed from outside at a moment (`kill_when`) or kills itself at a named point of a stage
(``start(..., kill_at=...)``, then `killed_itself`), whatever the machine's load.

Every run is the real ``tabula run`` against a given Prefect API, with the TINY config of
``tests/flows`` and the paper's gate and resignation (``GATED``), in a project cloned from an
empty user repo (`cli.clone.empty_project`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from tasks import tracking, versioning
from tasks.run.faults import KILL_AT, KILL_SIGNAL
from tasks.run.layout import RunLayout, read_json
from tests.conftest import TINY

TABULA = str(Path(sys.executable).parent / "tabula")
RUN = "tiny"  # pipeline.name in TINY
#: These runs gate and resign as the paper does (the quick start does neither), so that a kill
#: can land inside a gate match and the calibrated resign threshold must survive a resume.
GATED = ["evaluation.gating=true", "selfplay.v_resign=-0.9"]


@dataclass
class Run:
    """A ``tabula run`` subprocess (its own process group); stderr goes to ``log``, or to a
    pipe when ``log`` is None (a file would itself be subject to a file size limit)."""

    proc: subprocess.Popen
    log: Path | None
    started: float

    def wait(self, timeout: float = 600) -> tuple[int, str]:
        if self.log is None:
            _, err = self.proc.communicate(timeout=timeout)
            return self.proc.returncode, err.decode(errors="replace")
        rc = self.proc.wait(timeout=timeout)
        return rc, self.log.read_text(errors="replace")

    def stderr_tail(self) -> str:
        return "" if self.log is None else self.log.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def start(
    project: Path,
    iterations: int,
    api: str | None,
    preexec: Callable[[], None] | None = None,
    kill_at: str | None = None,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Run:
    """Start ``tabula run`` with TINY and GATED (and the overrides ``extra``, the environment
    variables ``env``) against the Prefect API ``api`` (None: none in the environment, so the
    run starts its own); ``preexec`` runs in the child before it starts; ``kill_at``: the point
    where the run kills itself (``tasks.run.faults.KILL_AT``, test-only)."""
    args = [TABULA, "run", "--iterations", str(iterations)]
    for item in [*TINY, *GATED, *(extra or [])]:
        args += ["--set", item]
    environ = {**os.environ, "PREFECT_LOGGING_LEVEL": "WARNING"}
    environ.pop("PREFECT_API_URL", None)
    if api is not None:
        environ["PREFECT_API_URL"] = api
    environ.pop(KILL_AT, None)
    environ.pop(KILL_SIGNAL, None)
    if kill_at is not None:
        environ[KILL_AT] = kill_at
    environ.update(env or {})
    log = None
    if preexec is None:  # else a pipe: a log file would itself hit a file size limit
        (logs := project.parent / "logs").mkdir(exist_ok=True)
        log = logs / f"{project.name}-{len(list(logs.iterdir())):02d}.err"
    started = time.time()
    with open(log, "w") if log else contextlib.nullcontext(subprocess.PIPE) as err:
        proc = subprocess.Popen(
            args,
            cwd=project,
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            preexec_fn=as_a_foreground_job(preexec),
        )
    return Run(proc, log, started)


def as_a_foreground_job(preexec: Callable[[], None] | None) -> Callable[[], None]:
    """A ``preexec_fn``: Ctrl-C's signals (SIGINT, SIGQUIT) at their defaults, as a terminal's
    shell starts a foreground job, then ``preexec``. A signal ignored is still ignored after
    ``exec``, and Python then installs no KeyboardInterrupt handler: the tests of a suite started
    in the background (``make test &``, which ignores both) would start runs that never see the
    Ctrl-C the tests send."""

    def child() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        if preexec is not None:
            preexec()

    return child


def run(
    project: Path,
    iterations: int,
    api: str,
    expect: int = 0,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> str:
    started = time.monotonic()
    rc, stderr = start(project, iterations, api, extra=extra, env=env).wait()
    print(f"  tabula run --iterations {iterations}: exit {rc}, {time.monotonic() - started:.1f} s")
    assert rc == expect, f"exit {rc}, expected {expect}:\n{stderr[-3000:]}"
    return stderr


def kill_when(run: Run, ready: Callable[[], bool], limit: float = 600) -> bool:
    """SIGKILL ``run`` once ``ready()``; False when it finished first (it must have succeeded).
    Fails if neither happens within ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not ready():
        rc = run.proc.poll()
        if rc is not None:
            assert rc == 0, f"a resumed run failed (exit {rc}):\n{run.stderr_tail()}"
            return False
        assert time.monotonic() < deadline, "the awaited moment never came"
        time.sleep(0.01)
    run.kill()
    return True


def killed_itself(run: Run, limit: float = 600) -> bool:
    """Wait for a run started with ``kill_at``: True when it SIGKILLed itself at that point,
    False when it finished first (it must have succeeded: the point was never reached)."""
    rc, stderr = run.wait(timeout=limit)
    with contextlib.suppress(ProcessLookupError):  # whatever the run had started dies with it
        os.killpg(run.proc.pid, signal.SIGKILL)
    assert rc in (0, -signal.SIGKILL), f"exit {rc}:\n{stderr[-3000:]}"
    return rc == -signal.SIGKILL


def statuses(project: Path) -> dict[str, str]:
    """{"pipeline" or "iter-N": status} of the tiny run's MLflow runs."""
    client = tracking.connect("sqlite:///mlflow/mlflow.db", project)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    if exp is None:
        return {}
    out = {}
    for r in client.search_runs([exp.experiment_id], f"tags.`{tracking.TAG_RUN}` = '{RUN}'"):
        kind = r.data.tags.get(tracking.TAG_KIND)
        name = "pipeline" if kind == "pipeline" else f"iter-{r.data.tags[tracking.TAG_ITERATION]}"
        out[name] = r.info.status
    return out


def error_line(stderr: str) -> str:
    """The one line an expected failure prints: last on stderr, no traceback anywhere."""
    assert "Traceback" not in stderr, stderr[-3000:]
    ours = [line for line in stderr.splitlines() if line.startswith("tabula: ")]
    assert len(ours) == 1 and stderr.rstrip().splitlines()[-1] == ours[0], stderr[-3000:]
    return ours[0]


def clone(user_repo: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", str(user_repo), str(dest)], check=True)
    return dest


@dataclass(frozen=True)
class Outcome:
    """What must not depend on faults, per iteration."""

    selfplay: dict[int, dict[str, str]]  # self-play out -> DVC hash, from dvc.lock
    positions: dict[int, int]  # rows in all shards
    distinct: dict[int, int]  # distinct (game id, move number): no position twice
    weights: dict[int, str]  # sha256 of the trained weights
    promoted: dict[int, bool]


def selfplay_outs(layout: RunLayout, i: int) -> dict[str, str]:
    """Iteration i's self-play outputs and their DVC hashes, from its dvc.lock."""
    lock = yaml.safe_load((layout.iteration(i) / "dvc.lock").read_text())["stages"]
    return {out["path"]: out["md5"] for out in lock["selfplay"]["outs"]}


def outcome(project: Path, iterations: int = 2) -> Outcome:
    from model.shards import read_shard

    layout = RunLayout(project, "data", RUN)
    selfplay, positions, distinct, weights, promoted = {}, {}, {}, {}, {}
    for i in range(1, iterations + 1):
        selfplay[i] = selfplay_outs(layout, i)
        rows, keys = 0, set()
        for shard in sorted(layout.selfplay(i).rglob("*.parquet")):
            records = read_shard(shard)
            rows += len(records.z)
            keys |= set(zip(records.game_id.tolist(), records.move_number.tolist(), strict=True))
        positions[i], distinct[i] = rows, len(keys)
        weights[i] = read_json(layout.marker(i, "train"))["weights_sha256"]
        promoted[i] = bool(read_json(layout.marker(i, "promote"))["promoted"])
    return Outcome(selfplay, positions, distinct, weights, promoted)


def check_clean(project: Path, iterations: int = 2) -> None:
    """No temporary files, one finished MLflow run per level, nothing pending for DVC, nothing
    missing in the DVC remote."""
    for folder in ("data", "mlflow"):
        assert not list((project / folder).rglob("*.tmp")), folder
    client = tracking.connect("sqlite:///mlflow/mlflow.db", project)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    mine = f"tags.`{tracking.TAG_RUN}` = '{RUN}'"  # (the project's experiment holds every run)
    runs = client.search_runs([exp.experiment_id], filter_string=mine)
    kinds = sorted(
        (r.data.tags.get(tracking.TAG_KIND), r.data.tags.get(tracking.TAG_ITERATION))
        for r in runs
        if r.data.tags.get(tracking.TAG_ITERATION) is not None
    )
    parents = [r for r in runs if r.data.tags.get(tracking.TAG_KIND) == "pipeline"]
    assert len(parents) == 1 and kinds == [
        ("iteration", str(i)) for i in range(1, iterations + 1)
    ], kinds
    assert all(r.info.status == "FINISHED" for r in runs), [r.info.status for r in runs]
    assert versioning.status(project) == {}
    assert versioning.status(project, cloud=True) == {}  # every output pushed
    tags = subprocess.run(
        ["git", "tag", "-l", f"tabula/{RUN}/*"],
        cwd=project,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert tags == [f"tabula/{RUN}/iter-{i:04d}" for i in range(1, iterations + 1)]
