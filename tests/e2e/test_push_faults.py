"""Faults while publishing a run (``tabula push``): a DVC remote that fills up, one that fails
for a while, one that refuses some files, the push killed half way, and two clones pushing a
run of the same name.

Each ends either pushed, or in one line with nothing half-written in the remote and nothing in
the git remote (the data goes first, the refs in one atomic push last); then the same command
run again completes, and a fresh clone of the git remote pulls the run's data byte for byte.
The runs are the real ``tabula run`` with the TINY config (`tests.pipeline_runs`); a full disk
is a real one, a small tmpfs (`tests.helpers.tmpfs`: root only, else skipped).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.clone import empty_project
from tasks.run.faults import KILL_AT
from tests import pipeline_runs as runs
from tests.helpers.tmpfs import resize, tmpfs
from tests.pipeline_runs import RUN

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
BRANCH = f"refs/heads/tabula/runs/{RUN}"
TAGS = [f"refs/tags/tabula/{RUN}/iter-0001"]
FULL = "64k"  # a DVC remote that takes a few of a tiny run's files (~300 KB in all), not all
ROOMY = "8m"


def sh(cwd: Path, *args: str) -> str:
    """A command as a user runs it, with the venv's ``tabula`` and ``dvc`` on PATH."""
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=_env())
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr[-3000:]}"
    return proc.stdout


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != KILL_AT}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", **extra}


def push(project: Path, expect: int = 0, **env: str) -> str:
    """``tabula push`` of the run to the git remote ``publish``; its stderr."""
    proc = subprocess.run(
        [str(BIN / "tabula"), "push", RUN, "--remote", "publish"],
        cwd=project,
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=600,
    )
    assert proc.returncode == expect, f"exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stderr


def publish_to(project: Path, folder: Path, data: Path | None = None) -> tuple[Path, Path]:
    """Point the project's git remote ``publish`` at a new bare repository in ``folder`` and
    its DVC remote at ``data`` (default: a new folder there); return both."""
    origin, data = folder / "origin.git", data or folder / "dvc-remote"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    known = sh(project, "git", "remote").split()
    sh(project, "git", "remote", *(["set-url"] if "publish" in known else ["add"]), "publish",
       str(origin))  # fmt: skip
    sh(project, "dvc", "remote", "modify", "--local", "tabula", "url", str(data))
    return origin, data


def refs(origin: Path) -> dict[str, str]:
    """The git remote's refs: {name: commit}."""
    listed = sh(origin, "git", "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split() for line in listed.splitlines())


def remote_files(data: Path) -> dict[str, bytes]:
    return {str(p.relative_to(data)): p.read_bytes() for p in data.rglob("*") if p.is_file()}


def outputs(project: Path) -> dict[str, bytes]:
    """The run's DVC-tracked outputs (what ``dvc pull`` brings), by path."""
    root = project / "data" / RUN
    found = [p for p in root.glob("iter-*/*/**/*") if p.is_file() and "state" not in p.parts]
    return {str(p.relative_to(project)): p.read_bytes() for p in found}


def fresh_clone(origin: Path, data: Path, dest: Path) -> Path:
    """A new clone of the run's branch from ``origin``, its data pulled from ``data``."""
    sh(dest.parent, "git", "clone", "-q", "--branch", BRANCH.removeprefix("refs/heads/"),
       str(origin), str(dest))  # fmt: skip
    sh(dest, "dvc", "remote", "add", "--local", "-d", "tabula", str(data))
    sh(dest, "dvc", "pull", "-q")
    assert "up to date" in sh(dest, "dvc", "status")
    return dest


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return empty_project(tmp_path_factory.mktemp("user") / "repo")


@pytest.fixture(scope="module")
def ran(prefect_server, user_repo, tmp_path_factory) -> Path:
    """A project after a one-iteration tiny run (its lineage on its run branch)."""
    project = runs.clone(user_repo, tmp_path_factory.mktemp("ran") / "project")
    runs.run(project, 1, prefect_server)
    return project


def test_a_full_dvc_remote_is_one_line_then_a_rerun_pushes(ran, tmp_path):
    with tmpfs(tmp_path / "dvc-remote", FULL) as data:
        origin, _ = publish_to(ran, tmp_path, data)
        stderr = push(ran, expect=1)
        line = runs.error_line(stderr)
        assert "No space left on device" in line and str(data) in line, line
        assert stderr.count("trying again") == 2  # retried as the pipeline's tasks are
        assert remote_files(data)  # some files made it before the disk was full
        assert not list(data.rglob("*.tmp"))  # no half-written copy left behind
        assert refs(origin) == {}  # no lineage without its data

        resize(data, ROOMY)  # space freed: the same command completes the push
        assert "tabula:" not in push(ran)
        assert set(refs(origin)) == {BRANCH, *TAGS}
        assert "in sync" in sh(ran, "dvc", "status", "--cloud")
        fresh = fresh_clone(origin, data, tmp_path / "fresh")
        assert outputs(fresh) == outputs(ran)


def test_a_remote_that_fails_for_a_while_is_retried(ran, tmp_path):
    """Space comes back while the push waits to try again: it goes on and completes."""
    with tmpfs(tmp_path / "dvc-remote", FULL) as data:
        origin, _ = publish_to(ran, tmp_path, data)
        proc = subprocess.Popen(
            [str(BIN / "tabula"), "push", RUN, "--remote", "publish"],
            cwd=ran,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        assert proc.stderr is not None
        for said in proc.stderr:  # (stderr is line-buffered)
            if "trying again in" in said:
                resize(data, ROOMY)
                break
        out, rest = proc.communicate(timeout=600)
        assert proc.returncode == 0, rest[-3000:]
        assert "tabula:" not in rest and "files pushed" in out, out + rest
        assert set(refs(origin)) == {BRANCH, *TAGS}
        assert "in sync" in sh(ran, "dvc", "status", "--cloud")


def test_a_remote_that_refuses_some_files_is_one_line_then_a_rerun_pushes(ran, tmp_path):
    """A file where the remote's folder for some objects goes: those files fail, again on
    each try, the others are sent; one line; once it is gone the push completes."""
    origin, data = publish_to(ran, tmp_path)
    lock = yaml.safe_load((ran / "data" / RUN / "iter-0001" / "dvc.lock").read_text())
    model = lock["stages"]["train"]["outs"][0]["md5"][:2]  # the folder of the model's .dir
    (data / "files" / "md5").mkdir(parents=True)
    (obstacle := data / "files" / "md5" / model).write_text("not a folder\n")
    line = runs.error_line(push(ran, expect=1))
    assert f"dvc push to {data} failed: Not a directory: {obstacle}/" in line, line
    assert len(remote_files(data)) > 1 and not list(data.rglob("*.tmp"))
    assert refs(origin) == {}

    obstacle.unlink()
    push(ran)
    assert set(refs(origin)) == {BRANCH, *TAGS}
    assert outputs(fresh_clone(origin, data, tmp_path / "fresh")) == outputs(ran)


def test_a_push_killed_half_way_then_run_again_completes(ran, tmp_path):
    """Killed after the first iteration's data, then after all of it (before git): the git
    remote has nothing yet; run again, it completes, and a fresh clone retrains an iteration
    from the pushed lineage and data to the same weights."""
    origin, data = publish_to(ran, tmp_path)
    for point in ("push:1", "push:2"):
        push(ran, expect=-signal.SIGKILL, **{KILL_AT: point})
        assert remote_files(data) and refs(origin) == {}, point
    push(ran)
    assert set(refs(origin)) == {BRANCH, *TAGS}
    fresh = fresh_clone(origin, data, tmp_path / "fresh")
    assert outputs(fresh) == outputs(ran)
    said = sh(fresh, "dvc", "repro", "-f", "-s", f"data/{RUN}/iter-0001/dvc.yaml:train")
    assert "MATCH" in said and "MISMATCH" not in said, said
    assert outputs(fresh) == outputs(ran)


def test_two_clones_pushing_one_run_name(ran, prefect_server, user_repo, tmp_path):
    """The first clone's run is pushed; the second clone's run of the same name is refused in
    one line before anything is sent, and the first's branch, tags and data stay as they were
    (a fresh clone still pulls them). The first clone pushing again is still fine."""
    origin, data = publish_to(ran, tmp_path)
    push(ran)
    pushed, stored = refs(origin), remote_files(data)

    other = runs.clone(user_repo, tmp_path / "other" / "project")
    runs.run(other, 1, prefect_server, extra=["pipeline.seed=1"])
    sh(other, "git", "remote", "add", "publish", str(origin))
    sh(other, "dvc", "remote", "modify", "--local", "tabula", "url", str(data))
    line = runs.error_line(push(other, expect=2))
    assert "another run named 'tiny'" in line and "nothing pushed" in line, line
    assert refs(origin) == pushed and remote_files(data) == stored

    push(ran)
    assert refs(origin) == pushed
    assert outputs(fresh_clone(origin, data, tmp_path / "fresh")) == outputs(ran)
