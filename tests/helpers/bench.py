"""A benchmark as a user runs it (``python -m bench.NAME``) and its usage errors' contract:
exit 2 and one line that names the problem."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m bench.NAME ARGS`` from the repository's root, its output captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", f"bench.{name}", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def assert_usage_error(done: subprocess.CompletedProcess[str], message: str) -> None:
    """``done`` was refused as a usage error: exit 2, and one error line holding ``message``."""
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], done.stderr
