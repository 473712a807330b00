"""A real full disk for the fault tests: a small tmpfs mounted over a folder, resized to free
space. Mounting needs root; where it is not at hand (or the kernel refuses), the test is
skipped with the reason."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount``'s syntax: "48k", "4m") mounted over ``folder`` (made
    if missing) for the block; unmounted after. Skips the test when it cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs a tmpfs, and mounting one needs root")
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs over {folder}: {proc.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def resize(folder: Path, size: str) -> None:
    """Give the tmpfs mounted over ``folder`` the new ``size``: space freed, files kept."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


def free_bytes(folder: Path) -> int:
    """The bytes left on ``folder``'s file system."""
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize
