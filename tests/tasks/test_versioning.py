"""DVC's own lock files after a kill: a torn ``.dvc/tmp/rwlock`` stops no later DVC call; a
stage's push to a DVC remote that is full: one line, no half-written copy, DVC's per-file
tracebacks not printed, and the push goes through once there is space."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tasks import versioning
from tests.helpers.tmpfs import resize, tmpfs


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
