"""DVC and git as a user sees them in a clone of this repository (its ``.gitignore``, its
``.dvc/``), not in a stand-in: after ``tabula run``, ``dvc dag`` and ``dvc status`` see every
iteration, the committed DVC config is left as it was, the lineage branch sits on the code
commit, and a fresh clone of the lineage pulls the data back with the README's two commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks import versioning
from tests import pipeline_runs as runs
from tests.repos import clone_this_repo

pytestmark = pytest.mark.slow

DVC = str(Path(sys.executable).parent / "dvc")  # the venv's, whether or not it is on PATH
BRANCH = f"tabula/runs/{runs.RUN}"


def sh(cwd: Path, *args: str) -> str:
    """A command as a user runs it, with the venv activated (``tabula`` on PATH)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, env={**os.environ, "PATH": path}
    )
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def ran(prefect_server, tmp_path_factory) -> Path:
    """A clone of this repository after a two-iteration tiny run with the default remote."""
    project = clone_this_repo(tmp_path_factory.mktemp("clone") / "tabula")
    runs.run(project, 2, prefect_server)
    return project


def test_dvc_sees_every_iteration(ran):
    dag = sh(ran, DVC, "dag", "--md")
    for i in (1, 2):
        for stage in ("selfplay", "train", "evaluate"):
            assert f"data/{runs.RUN}/iter-{i:04d}/dvc.yaml:{stage}" in dag, dag
    status = sh(ran, DVC, "status")
    assert "up to date" in status and "no data or pipelines" not in status, status


def test_the_committed_dvc_config_is_left_alone(ran, tmp_path):
    assert sh(ran, "git", "status", "--porcelain", "--", ".dvc", ".dvcignore") == ""
    assert not (ran / ".dvc" / "config.local").exists()  # the default remote is the committed one
    remote = tmp_path / "elsewhere"
    versioning.ensure_repo(ran, str(remote))  # any other remote is a machine-local setting
    assert sh(ran, "git", "status", "--porcelain", "--", ".dvc", ".dvcignore") == ""
    assert str(remote) in (ran / ".dvc" / "config.local").read_text()
    (ran / ".dvc" / "config.local").unlink()


def test_what_git_shows_is_committed_to_the_lineage(ran):
    """Besides the run's stage files, which DVC needs git to see and which the run branch
    holds byte for byte, the run leaves the user's working tree as it was."""
    listed = sh(ran, "git", "status", "--porcelain", "--untracked-files=all").splitlines()
    assert listed, "the stage files are visible to git (DVC skips git-ignored stage files)"
    for line in listed:
        state, name = line[:2], line[3:]
        assert state == "??", line
        assert Path(name).name in ("dvc.yaml", "dvc.lock", ".gitignore"), line
        assert name.startswith(f"data/{runs.RUN}/"), line
        assert sh(ran, "git", "show", f"{BRANCH}:{name}") == (ran / name).read_text(), name
    # The lineage sits on the code commit that ran it.
    sh(ran, "git", "merge-base", "--is-ancestor", "main", BRANCH)
    assert "README.md" in sh(ran, "git", "ls-tree", "--name-only", BRANCH)


def test_a_fresh_clone_of_the_lineage_pulls_the_data(ran, tmp_path):
    fresh = tmp_path / "fresh"
    sh(tmp_path, "git", "clone", "-q", "--branch", BRANCH, str(ran), str(fresh))
    remote = ran / "data" / ".dvc-remote"  # a shared path or bucket in real use
    sh(fresh, DVC, "remote", "modify", "--local", "tabula", "url", str(remote))
    sh(fresh, DVC, "pull", "-q")
    model = f"data/{runs.RUN}/iter-0002/model/model.pt"
    assert (fresh / model).read_bytes() == (ran / model).read_bytes()
    assert "up to date" in sh(fresh, DVC, "status")


def test_metrics_and_plots_of_the_run(ran):
    """``dvc metrics diff`` between two iteration tags, and the run's plots."""
    tags = [f"tabula/{runs.RUN}/iter-{i:04d}" for i in (1, 2)]
    diff = json.loads(sh(ran, DVC, "metrics", "diff", *tags, "--json"))
    changed = diff[f"data/{runs.RUN}/metrics.json"]
    assert changed["iteration"] == {"old": 1, "new": 2, "diff": 1}
    assert {"loss", "elo", "score_vs_random"} <= set(changed)
    shown = json.loads(sh(ran, DVC, "metrics", "show", "--json"))
    assert shown  # the workspace's metrics: the run's last iteration
    plots = json.loads(sh(ran, DVC, "plots", "show", "--json"))["data"]
    elo = next(v for k, v in plots.items() if k.endswith("Elo"))
    points = elo[0]["content"]["data"]["values"]
    assert [int(p["iteration"]) for p in points] == [1, 2]
    assert any(k.endswith("Training loss") for k in plots)
    assert "params.yaml" in sh(ran, DVC, "params", "diff", "--all")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_dvc_repro_loses_nothing(ran):
    """``init`` is redone exactly; the iteration stages are frozen (their ``desc`` says why),
    so a forced ``dvc repro`` verifies them and leaves every byte and lock as it was."""
    iteration = ran / "data" / runs.RUN / "iter-0001"
    before = {p: _files(p) for p in (ran / "data" / runs.RUN).glob("iter-*")}
    for stage in ("iter-0000/dvc.yaml:init", "iter-0001/dvc.yaml:evaluate",
                  "iter-0001/dvc.yaml:train", "iter-0002/dvc.yaml:selfplay"):  # fmt: skip
        sh(ran, DVC, "repro", "-f", "-s", f"data/{runs.RUN}/{stage}")
    assert {p: _files(p) for p in before} == before  # outputs, locks, markers: the same bytes
    assert "up to date" in sh(ran, DVC, "status")
    stages = yaml.safe_load((iteration / "dvc.yaml").read_text())["stages"]
    assert all(s["frozen"] and s["desc"].startswith("frozen: ") for s in stages.values())
