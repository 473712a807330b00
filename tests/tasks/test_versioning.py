"""DVC's own lock files after a kill: a torn ``.dvc/tmp/rwlock`` stops no later DVC call."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tasks import versioning


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
