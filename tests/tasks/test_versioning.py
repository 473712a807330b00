"""DVC's own records after a kill: a torn ``.dvc/tmp/rwlock`` stops no later DVC call, and a
push killed while DVC listed what to send does not make the next push send less; a stage's
push to a DVC remote that is full: one line, no half-written copy, DVC's per-file tracebacks
not printed, and the push goes through once there is space."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tasks import versioning
from tests.helpers.tmpfs import resize, tmpfs

ROOT = Path(__file__).resolve().parents[2]


def _project_with_a_stage(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "out").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    versioning.ensure_repo(project, "remote")
    (project / "out" / "a.txt").write_text("a\n")
    stage = {"cmd": "true", "outs": ["out"]}
    versioning.write_stage_file(project / "dvc.yaml", {"make": stage})
    versioning.commit_stage(project, project / "dvc.yaml", "make", push=False)
    return project


def _holders(rwlock: Path) -> list[object]:
    """The processes the rwlock file lists as reading or writing (it must parse)."""
    record = json.loads(rwlock.read_text())
    return [*record.get("read", {}).values(), *record.get("write", {}).values()]


def test_a_torn_rwlock_is_started_empty_and_the_status_reads(tmp_path: Path) -> None:
    from dvc.repo import Repo
    from dvc.rwlock import RWLockFileCorruptedError

    project = _project_with_a_stage(tmp_path)
    rwlock = project / ".dvc" / "tmp" / "rwlock"
    rwlock.write_text("")  # killed between DVC's truncate and its write
    with pytest.raises(RWLockFileCorruptedError), Repo(str(project)) as repo:
        repo.status()  # DVC alone refuses every later call

    assert versioning.status(project) == {}
    assert _holders(rwlock) == []


def test_a_readable_rwlock_is_left_as_it_is(tmp_path: Path) -> None:
    project = _project_with_a_stage(tmp_path)
    rwlock = project / ".dvc" / "tmp" / "rwlock"
    assert versioning.status(project) == {}
    before = rwlock.read_text()
    assert _holders(rwlock) == []
    versioning.status(project)
    assert rwlock.read_text() == before


def test_shared_paths_are_committed_as_given_and_left_to_the_checked_out_run(
    tmp_path: Path,
) -> None:
    """Files at a path every run shares are committed from the bytes given, never from the
    working tree; only the checked-out run writes them there, so two runs in one working tree
    each keep their own copy on their branch and ``git status`` never lists them."""
    from cli.clone import empty_project

    project = empty_project(tmp_path / "project")

    def record(run: str, text: str) -> str:
        (own := project / "data" / run / "params.yaml").parent.mkdir(parents=True, exist_ok=True)
        own.write_text(text)
        shared = {"run/params.yaml": text.encode()}
        commit = versioning.record_on_run_branch(project, run, [own], run, contents=shared)
        assert commit is not None
        return commit

    def show(rev: str) -> str:
        return subprocess.run(
            ["git", "show", f"{rev}:run/params.yaml"], cwd=project, capture_output=True, text=True
        ).stdout

    record("a", "a: 1\n")
    assert (project / "run" / "params.yaml").read_text() == "a: 1\n"
    record("b", "b: 1\n")  # a second run: its branch is checked out, its copy in the tree
    later = record("a", "a: 2\n")  # the first run goes on beside it
    assert show(later) == "a: 2\n" and show("tabula/runs/b") == "b: 1\n"
    assert (project / "run" / "params.yaml").read_text() == "b: 1\n"
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", "run"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert status.stdout == ""
    assert show("main") == ""  # the user's branch holds none of it


def test_a_stage_pushed_to_a_full_remote_is_one_line_and_leaves_no_partial_copy(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import errno
    import os

    project = _project_with_a_stage(tmp_path)
    for k in range(6):  # 8 KiB each, incompressible: a 16 KiB remote takes one or two
        (project / "out" / f"{k}.bin").write_bytes(os.urandom(8192))
    with tmpfs(project / "remote", "16k") as remote:
        with pytest.raises(OSError) as failed:
            versioning.commit_stage(project, project / "dvc.yaml", "make")
        assert failed.value.errno == errno.ENOSPC
        message = str(failed.value)
        assert f"dvc push to {remote} failed: No space left on device (" in message, message
        assert "\n" not in message and "files not sent" in message
        assert not list(remote.rglob("*.tmp"))
        printed = capfd.readouterr().err
        assert "Traceback" not in printed and "failed to transfer" not in printed, printed

        resize(remote, "1m")
        versioning.commit_stage(project, project / "dvc.yaml", "make")
        objects = [p for p in remote.rglob("*") if p.is_file()]
        assert len(objects) == 8  # the seven files and the folder's listing


def _run_with_two_stages(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose run folder has an iteration with two stages, the first committed."""
    project = tmp_path / "project"
    folder = project / "data" / "run" / "iter-0001"
    for out in ("a", "b"):
        (folder / out).mkdir(parents=True)
        (folder / out / "x.txt").write_text(f"{out}\n")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    versioning.ensure_repo(project, "remote")
    stages = {s: {"cmd": "true", "outs": [s]} for s in ("a", "b")}
    versioning.write_stage_file(folder / "dvc.yaml", stages)
    versioning.commit_stage(project, folder / "dvc.yaml", "a", push=False)
    return project, folder


def test_a_lock_torn_by_a_killed_commit_is_restored_and_the_commit_redone(tmp_path: Path) -> None:
    """DVC rewrites ``dvc.lock`` in place: a kill while it writes leaves a file no DVC call
    reads. The lock as it was before the commit is put back, and committing the stage again
    (as the resume does, the stage having no marker) records both stages."""
    project, folder = _run_with_two_stages(tmp_path)
    lock = folder / "dvc.lock"
    whole = lock.read_bytes()
    assert not (folder / "dvc.lock.before").exists()  # gone once DVC has written the lock
    (folder / "dvc.lock.before").write_bytes(whole)  # the commit of "b" under way ...
    lock.write_bytes(whole[: len(whole) // 2] + b"\n  b:\n    cmd: [")  # ... killed mid-write
    with pytest.raises(versioning.LockFileError):
        versioning.read_lock(project, folder / "dvc.yaml")

    assert versioning.restore_interrupted_commits(project / "data" / "run") == [lock]
    assert lock.read_bytes() == whole
    versioning.commit_stage(project, folder / "dvc.yaml", "b", push=False)
    assert set(versioning.read_lock(project, folder / "dvc.yaml")) == {"a", "b"}
    assert versioning.restore_interrupted_commits(project / "data" / "run") == []


def test_a_commit_killed_while_it_kept_the_lock_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A kill while `commit_stage` writes ``dvc.lock.before`` (a temporary file, then a rename)
    leaves the temporary file and the lock untouched: the resume removes the one, keeps the
    other."""
    project, folder = _run_with_two_stages(tmp_path)
    lock = folder / "dvc.lock"
    whole = lock.read_bytes()
    kept = folder / ".dvc.lock.before.k1ll3d.tmp"
    kept.write_bytes(whole[:10])
    assert versioning.restore_interrupted_commits(project / "data" / "run") == []
    assert not kept.exists() and lock.read_bytes() == whole


def test_a_first_commit_killed_mid_write_leaves_no_lock_to_trip_on(tmp_path: Path) -> None:
    project, folder = _run_with_two_stages(tmp_path)
    lock = folder / "dvc.lock"
    lock.unlink()
    (folder / "dvc.lock.before").write_bytes(b"")  # there was no lock before this commit
    lock.write_text("schema: '2.0'\nstages:\n  a:\n    cmd: tr")  # torn
    versioning.commit_stage(project, folder / "dvc.yaml", "a", push=False)  # restores first
    assert set(versioning.read_lock(project, folder / "dvc.yaml")) == {"a"}
    assert not (folder / "dvc.lock.before").exists()


def test_the_stages_committed_are_pushed_together_and_a_push_again_sends_nothing(
    tmp_path: Path,
) -> None:
    """An iteration's stages are committed one by one and pushed together, by its close."""
    project = _project_with_a_stage(tmp_path)
    (project / "more").mkdir()
    (project / "more" / "b.txt").write_text("b\n")
    stages = {"make": {"cmd": "true", "outs": ["out"]}, "more": {"cmd": "true", "outs": ["more"]}}
    versioning.write_stage_file(project / "dvc.yaml", stages)
    versioning.commit_stage(project, project / "dvc.yaml", "more", push=False)
    assert set(versioning.status(project, cloud=True)) == {"out", "out/a.txt", "more", "more/b.txt"}
    assert versioning.push_stages(project, project / "dvc.yaml") == 4  # (two folders of one file)
    assert versioning.status(project, cloud=True) == {}
    assert versioning.push_stages(project, project / "dvc.yaml") == 0


#: A ``python -c`` program: ``versioning.push_stages`` (``argv[1]``: "push") of the stage file
#: ``argv[3]``, or ``versioning.pull`` ("fetch", DVC's name for a pull's transfer) of its
#: stages, in the project ``argv[2]``, SIGKILLed as DVC begins listing the second output it is
#: to move (the first output's list already committed to DVC's data index).
_KILLED_WHILE_LISTING = """
import os, signal, sys
from pathlib import Path
from dvc_data.index import collect
listed = collect._collect_from_index
calls = []
def listing(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return listed(*args, **kwargs)
collect._collect_from_index = listing
from tasks import versioning
kind, project, stage_file = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
if kind == "push":
    versioning.push_stages(project, stage_file)
else:
    versioning.pull(project, [f"{stage_file.relative_to(project)}:{s}" for s in ("a", "b")])
"""


def _killed_while_listing(kind: str, project: Path, stage_file: Path) -> None:
    """Run `_KILLED_WHILE_LISTING`; ``kind`` is DVC's name for the transfer, "push" or "fetch"."""
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_WHILE_LISTING, kind, str(project), str(stage_file)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    from dvc.repo import Repo

    with Repo(str(project)) as repo:  # the kill left DVC's partial list behind
        assert repo.data_index.has_node((kind,))


def test_a_push_killed_while_dvc_listed_the_outputs_leaves_the_next_push_whole(
    tmp_path: Path,
) -> None:
    """DVC keeps the list of files a push sends in a database outside the project and lists
    one output at a time: a run killed in an iteration's close, in the middle of that list,
    made the resumed close push the self-play games and not the model, with no error (CI saw
    it once in the fault tests). The resumed push sends every output."""
    project, folder = _run_with_two_stages(tmp_path)
    versioning.commit_stage(project, folder / "dvc.yaml", "b", push=False)
    _killed_while_listing("push", project, folder / "dvc.yaml")
    assert versioning.status(project, cloud=True)  # (nothing was sent)
    assert versioning.push_stages(project, folder / "dvc.yaml") == 4  # (two folders of one file)
    assert versioning.status(project, cloud=True) == {}


def test_a_pull_killed_while_dvc_listed_the_outputs_leaves_the_next_pull_whole(
    tmp_path: Path,
) -> None:
    """The same list for a pull (DVC's fetch): after a pull killed in the middle of it, a
    pull again brings every output back."""
    project, folder = _run_with_two_stages(tmp_path)
    versioning.commit_stage(project, folder / "dvc.yaml", "b", push=False)
    versioning.push_stages(project, folder / "dvc.yaml")
    for gone in (project / ".dvc" / "cache", folder / "a", folder / "b"):
        shutil.rmtree(gone)
    _killed_while_listing("fetch", project, folder / "dvc.yaml")
    versioning.pull(project, [f"{folder.relative_to(project)}/dvc.yaml:{s}" for s in ("a", "b")])
    assert [(folder / s / "x.txt").read_text() for s in ("a", "b")] == ["a\n", "b\n"]
    assert versioning.status(project) == {}
