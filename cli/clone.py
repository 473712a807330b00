"""A stand-in for the git repository a user runs `tabula` in: the project the benchmarks
(``python -m bench.pipeline``, ``python -m bench.strength``) and the pipeline tests run their
pipelines in, made fresh in a temporary folder. DVC is initialised by the pipeline itself on
first use."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git_identity(who: str) -> dict[str, str]:
    """The environment, with ``who`` as git's author and committer (no global git config
    needed)."""
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": who,
        "GIT_AUTHOR_EMAIL": f"{who}@localhost",
        "GIT_COMMITTER_NAME": who,
        "GIT_COMMITTER_EMAIL": f"{who}@localhost",
    }


def empty_project(repo: Path, who: str = "t") -> Path:
    """Create ``repo`` as a git repository on ``main`` holding one commit of a README, by
    ``who``; return it."""
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "README.md").write_text(f"{who} project\n")
    subprocess.run(["git", "add", "README.md"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=repo, check=True, env=git_identity(who))
    return repo
