"""A stand-in for a user's clone: an empty git repository with one commit.

Shared by the pipeline tests, the fault tests and ``bench/pipeline.py``; DVC is initialised
by the pipeline itself on first use, as it would be in a real clone.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def make_user_repo(repo: Path, who: str = "t") -> Path:
    """Create ``repo`` as a git repository on ``main`` holding one commit of a README."""
    repo.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": who,
        "GIT_AUTHOR_EMAIL": f"{who}@localhost",
        "GIT_COMMITTER_NAME": who,
        "GIT_COMMITTER_EMAIL": f"{who}@localhost",
    }
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "README.md").write_text(f"{who} project\n")
    subprocess.run(["git", "add", "README.md"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=repo, check=True, env=env)
    return repo
