"""Faults: SIGKILL at random moments and inside every stage, corrupt shards, a full disk (a file
size limit in self-play, a real full tmpfs in training) and an unwritable folder.

Every run is the real ``tabula run`` in a subprocess against the test harness's Prefect API,
on a fresh clone of an empty user repo, with the TINY config of ``tests/flows`` and the paper's
gate and resignation (``tests.pipeline_runs.GATED``). One
uninterrupted two-iteration run is the reference: whatever happened on the way, a finished run
must hold the same self-play data (DVC hashes, positions), the same trained weights and the
same gating decisions, with no temporary files, one MLflow run per stage of the hierarchy, all
FINISHED, and a clean ``dvc status``.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli.clone import empty_project
from tasks import tracking
from tasks.run.layout import RunLayout, read_json
from tasks.train import WindowChangedError, verify_window
from tests import pipeline_runs as runs
from tests.helpers.tmpfs import resize, tmpfs
from tests.pipeline_runs import RUN

pytestmark = pytest.mark.slow
SEED = 2017
PARALLEL = 2  # trials at once, one per core
#: The kill points of tasks.run.faults in a run's stages, in the order a run reaches them
#: (``completed``, after an iteration's flow, is the Ctrl-C tests').
KINDS = ("init", "plan", "selfplay", "dvc", "train", "evaluate", "promote", "lineage")
#: Each trial's kills inside a stage (trial k ordered by its random kill time), as (before,
#: after) its random kill: each the first kind still ahead from the one named (KINDS, round).
#: Every kind is covered whatever the machine's speed: ``init`` comes only as a run starts,
#: before any random moment; the first kill after an early random kill lands in the second
#: iteration's stage of that name, which is still ahead, and a kill inside a stage leaves the
#: later stages of its iteration ahead, so the kinds chained after it land as named; the later
#: trials' kills land where their random moment leaves them, and ``lineage`` every run reaches.
KILLS = (
    ((), ("plan", "selfplay", "promote")),
    ((), ("dvc", "evaluate")),
    ((), ("train",)),
    ((), ("train",)),
    ((), ("evaluate",)),
    (("init",), ("lineage",)),
)
TRIALS = len(KILLS)
FSIZE_LIMIT = 1024  # bytes: any shard (a few KiB) is past it, so self-play cannot write one


# --- fixtures and the reference run ------------------------------------------------------------


@pytest.fixture(scope="module")
def api(prefect_server) -> str:  # noqa: F811
    """The harness's Prefect API URL."""
    return prefect_server


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty user repository (one commit); every project here is a fresh clone of it."""
    return empty_project(tmp_path_factory.mktemp("user") / "repo")


@dataclass(frozen=True)
class Reference:
    project: Path
    seconds: float
    outcome: runs.Outcome


@pytest.fixture(scope="module")
def reference(api, user_repo, tmp_path_factory) -> Reference:
    """One uninterrupted two-iteration run, timed."""
    project = runs.clone(user_repo, tmp_path_factory.mktemp("reference") / "project")
    started = time.monotonic()
    runs.run(project, 2, api)
    seconds = time.monotonic() - started
    runs.check_clean(project)
    print(f"\nreference run: {seconds:.1f} s")
    return Reference(project, seconds, runs.outcome(project))


# --- 1. SIGKILL at random moments and inside every stage ---------------------------------------


def _fresh(path: Path, since: float) -> bool:
    """``path`` exists and was made or changed after ``since`` (by the run being watched)."""
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


def _stage_ahead(layout: RunLayout, kind: str, i: int) -> bool:
    """Whether a run resumed now reaches stage ``kind`` of iteration ``i``: when the stage is
    unfinished, and for the lineage always (every run records each iteration's lineage again,
    so that a run killed after the promotion but before its tag still gets it)."""
    done = {
        "init": lambda: layout.marker(0, "init").exists(),
        "plan": lambda: layout.marker(i, "plan").exists(),
        "selfplay": lambda: all(layout.marker(i, f"selfplay-w{w:02d}").exists() for w in (0, 1)),
        "dvc": lambda: layout.marker(i, "selfplay").exists(),
        "train": lambda: layout.marker(i, "train").exists(),
        "evaluate": lambda: layout.marker(i, "evaluate").exists(),
        "promote": lambda: layout.marker(i, "promote").exists(),
        "lineage": lambda: False,
    }[kind]
    return not done()


def _kill_inside(layout: RunLayout, project: Path, api: str, kind: str) -> list[str]:
    """Run until the run kills itself at the first point from ``kind`` on (KINDS, round) that
    a resumed run still reaches; that point, or none when none is ahead."""
    k = KINDS.index(kind)
    ahead = [
        point
        for point in KINDS[k:] + KINDS[:k]
        if any(_stage_ahead(layout, point, i) for i in (1, 2))
    ]
    for point in ahead[:1]:  # a stage still to run is always reached: the run kills itself there
        assert runs.killed_itself(runs.start(project, 2, api, kill_at=point)), point
    return ahead[:1]


def _trial(
    k: int, fraction: float, reference: Reference, user_repo: Path, root: Path, api: str
) -> dict:
    """Kill inside the stages KILLS[k] names before, at ``fraction`` of the reference's wall
    time, then inside the stages it names after, then finish.

    A kill inside a stage is the run's own (``TABULA_KILL_AT``, test-only: `tasks.run.faults`)
    at the first point of the stage in this run: the random network before its marker, a
    plan before its marker, a self-play game, a DVC commit before its stage is
    marked, a training step, a gate or anchor game, the promotion before its marker, or the
    lineage commit; so it lands inside that stage however busy the machine is.
    """
    project = runs.clone(user_repo, root / f"trial-{k}" / "project")
    layout = RunLayout(project, "data", RUN)
    before, after = KILLS[k]
    kills: list[str] = []
    started = time.monotonic()
    for kind in before:  # (from a fresh project: every point is ahead)
        kills += _kill_inside(layout, project, api, kind)
    run = runs.start(project, 2, api)
    deadline = run.started + fraction * reference.seconds
    if runs.kill_when(run, lambda: time.time() >= deadline):
        kills.append(f"t={fraction:.2f}T")
    for kind in after:
        kills += _kill_inside(layout, project, api, kind)
    runs.run(project, 2, api)
    return {"project": project, "kills": kills, "seconds": time.monotonic() - started}


def test_sigkill_anywhere_then_resume_matches_an_uninterrupted_run(
    api, reference, user_repo, tmp_path
):
    rng = random.Random(SEED)
    width = 0.9 / TRIALS  # one kill time in each of TRIALS equal slices of [0.05, 0.95]
    fractions = [rng.uniform(0.05 + k * width, 0.05 + (k + 1) * width) for k in range(TRIALS)]
    lock = threading.Lock()
    started = time.monotonic()

    def one(k: int) -> dict:
        result = _trial(k, fractions[k], reference, user_repo, tmp_path, api)
        with lock:
            print(f"trial {k}: kills {result['kills']}, {result['seconds']:.0f} s")
        return result

    with ThreadPoolExecutor(PARALLEL) as pool:
        trials = list(pool.map(one, range(TRIALS)))
    print(f"{TRIALS} trials: {time.monotonic() - started:.0f} s")

    kills = [kill for t in trials for kill in t["kills"]]
    assert sum(kill.startswith("t=") for kill in kills) >= TRIALS - 1
    assert {kill for kill in kills if not kill.startswith("t=")} == set(KINDS), kills
    for t in trials:
        assert runs.outcome(t["project"]) == reference.outcome, t["kills"]
        runs.check_clean(t["project"])


def test_worker_processes_killed_in_a_game_resume_to_the_bytes_of_threads(
    api, reference, user_repo, tmp_path
):
    """Self-play in worker processes (`tasks.workers`) makes the games threads make (the
    reference's two workers are threads), and a run killed while its worker processes play
    resumes to the same run."""
    project = runs.clone(user_repo, tmp_path / "project")
    processes = ["selfplay.processes=true"]
    run = runs.start(project, 2, api, kill_at="selfplay:2", extra=processes)
    assert runs.killed_itself(run)
    runs.run(project, 2, api, extra=processes)
    assert runs.outcome(project) == reference.outcome
    runs.check_clean(project)


# --- 2. a corrupt shard is named and never trained on ------------------------------------------


def _one_iteration(user_repo: Path, dest: Path, api: str) -> tuple[Path, RunLayout]:
    project = runs.clone(user_repo, dest)
    runs.run(project, 1, api)
    return project, RunLayout(project, "data", RUN)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x10
    path.write_bytes(bytes(data))


def test_corrupt_shard_is_named_and_never_trained_on(api, reference, user_repo, tmp_path):
    project, layout = _one_iteration(user_repo, tmp_path / "project", api)
    shards = sorted(layout.selfplay(1).rglob("*.parquet"))
    assert len(shards) >= 2

    for shard, corrupt in ((shards[0], _truncate), (shards[1], _flip_byte)):
        original = shard.read_bytes()
        corrupt(shard)
        line = runs.error_line(runs.run(project, 2, api, expect=2))
        assert str(layout.rel(shard)) in line, line
        assert not layout.marker(2, "train").exists()
        assert not layout.model_dir(2).exists()  # refused before training made anything
        shard.write_bytes(original)

    # A shard removed or one added: each shard is valid, the window is not what was recorded.
    window = read_json(layout.marker(2, "plan"))["window"]
    moved = tmp_path / shards[1].name
    shutil.move(shards[1], moved)
    with pytest.raises(WindowChangedError, match=str(layout.rel(layout.selfplay(1)))):
        verify_window(layout, window)
    shutil.copy(moved, shards[0].with_name("extra.parquet"))
    shutil.move(moved, shards[1])
    with pytest.raises(WindowChangedError):
        verify_window(layout, window)
    shards[0].with_name("extra.parquet").unlink()
    verify_window(layout, window)

    runs.run(project, 2, api)  # restored: the run goes on and trains on exactly the recorded window
    assert runs.outcome(project) == reference.outcome
    runs.check_clean(project)


# --- 3. a champion swapped for another valid network is named and never played ---------------

#: Without a gate every candidate is promoted, so iteration 1's network is iteration 2's champion.
UNGATED = ["evaluation.gating=false"]


def _restore(project: Path, line: str) -> None:
    """Run the ``dvc checkout`` that the one line says restores the file."""
    command = line.split("`")[1]
    assert command.startswith("dvc checkout "), line
    dvc = Path(sys.executable).parent / "dvc"
    subprocess.run([str(dvc), *command.split()[1:]], cwd=project, check=True)


def test_a_swapped_champion_is_named_and_never_played(api, user_repo, tmp_path):
    project = runs.clone(user_repo, tmp_path / "project")
    runs.run(project, 1, api, extra=UNGATED)
    layout = RunLayout(project, "data", RUN)
    crowned = read_json(layout.champion)
    assert crowned["iteration"] == 1
    assert crowned["weights_sha256"] == read_json(layout.marker(1, "train"))["weights_sha256"]
    model, original = layout.model(1), layout.model(1).read_bytes()
    named = f"tabula: {layout.rel(model)}: the weights are not the ones recorded for iteration 1"

    # Before self-play: a valid network, not the champion's (iteration 0's), in its place.
    shutil.copy(layout.model(0), model)
    line = runs.error_line(runs.run(project, 2, api, expect=2, extra=UNGATED))
    assert line.startswith(named), line
    assert not list(layout.iteration(2).glob("selfplay/**/*.parquet"))
    assert not layout.marker(2, "selfplay-w00").exists()
    _restore(project, line)
    assert model.read_bytes() == original

    # Before training (whose parent it is here: its DVC record names the folder) and before the
    # evaluate stage (the gate plays the champion): swapped while iteration 2 is at each.
    for stage, before in (("train", "selfplay"), ("evaluate", "train")):
        assert runs.killed_itself(runs.start(project, 2, api, kill_at=stage, extra=UNGATED))
        assert layout.marker(2, before).exists() and not layout.marker(2, stage).exists()
        shutil.copy(layout.model(0), model)
        line = runs.error_line(runs.run(project, 2, api, expect=2, extra=UNGATED))
        assert line.startswith(named), line
        assert not layout.marker(2, stage).exists()
        _restore(project, line)

    runs.run(project, 2, api, extra=UNGATED)  # restored: the run goes on
    runs.check_clean(project)
    crowned = read_json(layout.champion)
    assert crowned["iteration"] == 2
    assert crowned["weights_sha256"] == read_json(layout.marker(2, "train"))["weights_sha256"]


# --- 6. disk full or an unwritable folder during self-play ------------------------------------


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _ignore_sigxfsz() -> None:
    # Past RLIMIT_FSIZE the kernel sends SIGXFSZ, whose default kills the process; ignored, the
    # write fails with EFBIG instead, as on a full disk.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_disk_full_or_unwritable_folder_fails_cleanly(api, reference, user_repo, tmp_path):
    project, layout = _one_iteration(user_repo, tmp_path / "project", api)
    before = {i: _snapshot(layout.iteration(i)) for i in (0, 1)}
    assert any(name.endswith(".parquet") for name in before[1]) and "dvc.lock" in before[1]

    # An unwritable spot: a file where iteration 2's self-play folder goes, so mkdir fails.
    layout.iteration(2).mkdir(parents=True)
    layout.selfplay(2).write_text("not a folder\n")
    line = runs.error_line(runs.run(project, 2, api, expect=1))
    assert "Not a directory" in line and "selfplay" in line, line
    assert {i: _snapshot(layout.iteration(i)) for i in (0, 1)} == before
    layout.selfplay(2).unlink()

    # Disk full: once iteration 2's self-play starts, no file may grow past FSIZE_LIMIT.
    run = runs.start(project, 2, api, preexec=_ignore_sigxfsz)
    while not _fresh(layout.worker(2, 0), run.started):
        assert run.proc.poll() is None, run.wait()[1][-3000:]
        time.sleep(0.005)
    _, hard = resource.prlimit(run.proc.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(run.proc.pid, resource.RLIMIT_FSIZE, (FSIZE_LIMIT, hard))
    rc, stderr = run.wait()
    print(f"  disk full run: exit {rc}, {time.time() - run.started:.1f} s")
    assert rc == 1, stderr[-3000:]
    assert "File too large" in runs.error_line(stderr)
    assert not layout.marker(2, "selfplay").exists()  # it failed in self-play
    assert not list(layout.selfplay(2).rglob("*.parquet"))
    assert {i: _snapshot(layout.iteration(i)) for i in (0, 1)} == before

    runs.run(project, 2, api)  # space again: the run resumes and finishes as if nothing happened
    assert {i: _snapshot(layout.iteration(i)) for i in (0, 1)} == before
    assert runs.outcome(project) == reference.outcome
    runs.check_clean(project)


# --- found by the random kills: a store killed while MLflow builds its schema -----------------


def test_mlflow_store_killed_while_being_created_still_opens(tmp_path):
    code = "import sys; from tasks import tracking; tracking.connect(sys.argv[1], None)"
    store = tmp_path / "mlflow" / "mlflow.db"
    uri = f"sqlite:///{store}"
    child = subprocess.Popen([sys.executable, "-c", code, uri], cwd=Path(__file__).parents[2])

    def building() -> bool:  # a third of the schema's ~1 MB written: mid-migrations
        with contextlib.suppress(FileNotFoundError):
            return any(f.stat().st_size > 300_000 for f in store.parent.iterdir())
        return False

    while not building():
        assert child.poll() is None, "the store was made before it could be killed"
        time.sleep(0.005)
    child.kill()
    child.wait()
    client = tracking.connect(uri, None)
    assert client.get_experiment(client.create_experiment("after-the-kill")).name
    assert sorted(p.name for p in store.parent.iterdir()) == ["mlflow.db"]


# --- 7. a real full disk (a tmpfs) while training writes its checkpoint -----------------------


def test_a_full_disk_while_training_is_one_line_then_resumes(api, reference, user_repo, tmp_path):
    """Iteration 2's model folder on a tmpfs smaller than a Lightning checkpoint: training
    fails writing it, in one line naming the disk and the file; nothing half-written is left,
    nothing of the earlier iterations changes; with space again the run resumes and ends as
    an uninterrupted run does."""
    project, layout = _one_iteration(user_repo, tmp_path / "project", api)
    before = {i: _snapshot(layout.iteration(i)) for i in (0, 1)}
    too_small = f"{layout.trainer_ckpt(1).stat().st_size // 2048}k"  # half a checkpoint
    with tmpfs(layout.model_dir(2), too_small) as folder:
        rc, stderr = runs.start(project, 2, api).wait()
        assert rc == 1, stderr[-3000:]
        line = runs.error_line(stderr)
        assert "No space left on device" in line and str(layout.rel(folder)) in line, line
        assert list(folder.iterdir()) == []  # no checkpoint, half or whole, no temporary file
        assert layout.marker(2, "selfplay").exists() and not layout.marker(2, "train").exists()
        assert {i: _snapshot(layout.iteration(i)) for i in (0, 1)} == before

        resize(folder, "8m")  # space freed: the run resumes at its training stage
        runs.run(project, 2, api)
        assert {i: _snapshot(layout.iteration(i)) for i in (0, 1)} == before
        assert runs.outcome(project) == reference.outcome
        runs.check_clean(project)
