"""A clone of this checkout, for the tests of what DVC and git show where a user cloned it
(``clone_this_repo``). The stand-in for a user's project that the other pipeline tests run in
is `cli.clone.empty_project`, shared with the benchmarks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from cli.clone import git_identity

ROOT = Path(__file__).resolve().parents[1]


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
    subprocess.run(["git", "commit", "-qm", "clone"], cwd=repo, check=True, env=git_identity(who))
    return repo
