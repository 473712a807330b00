"""Repositories the pipeline runs in: a user's own project, or a clone of this one.

``make_user_repo``: a stand-in for a user's project, an empty git repository with one commit;
shared by the pipeline tests, the fault tests and ``bench/pipeline.py``; DVC is initialised by
the pipeline itself on first use. ``clone_this_repo``: what a user gets from ``git clone`` of
this checkout (its ``.gitignore``, its ``.dvc/``), for the tests of what DVC and git show there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _identity(who: str) -> dict[str, str]:
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": who,
        "GIT_AUTHOR_EMAIL": f"{who}@localhost",
        "GIT_COMMITTER_NAME": who,
        "GIT_COMMITTER_EMAIL": f"{who}@localhost",
    }


def make_user_repo(repo: Path, who: str = "t") -> Path:
    """Create ``repo`` as a git repository on ``main`` holding one commit of a README."""
    repo.mkdir(parents=True)
    env = _identity(who)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "README.md").write_text(f"{who} project\n")
    subprocess.run(["git", "add", "README.md"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=repo, check=True, env=env)
    return repo


def clone_this_repo(repo: Path, who: str = "t") -> Path:
    """``repo`` as a clone of this checkout: its files as git sees them (tracked, and new files
    that are not ignored, in their working-tree state, so that uncommitted edits are tested
    too), committed as one commit on ``main``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    repo.mkdir(parents=True)
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # (deleted but still in the index: not part of the clone)
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "clone"], cwd=repo, check=True, env=_identity(who))
    return repo
