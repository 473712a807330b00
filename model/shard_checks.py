"""Integrity of shard files: the sha256 sidecar written next to each shard, and ShardError.

Parquet checks its data pages but not its footer, so `model.shards` records each shard's
sha256 in ``<shard>.sha256`` (``sha256sum`` format) and `validate_shard` compares it. A shard
without a sidecar (written by hand or before checksums) is still accepted. `model.shards`
re-exports ShardError and `checksum_path`; this module imports nothing from it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from tabula.errors import TabulaError


class ShardError(TabulaError, ValueError):
    """A shard is unreadable, foreign, of another schema version or board size, or its records
    are malformed; the message is one line naming the file."""


def checksum_path(path: Path) -> Path:
    """The sidecar holding a shard's sha256: Parquet checks its data pages but not its footer,
    so a flipped footer byte (a statistic, a length) would otherwise read back silently."""
    return path.with_name(path.name + ".sha256")


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_checksum(path: Path, digest: str) -> None:
    """Write ``digest`` to the sidecar of ``path`` atomically (temporary file, ``os.replace``)."""
    side = checksum_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{side.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(f"{digest}  {path.name}\n")
    os.replace(tmp, side)


def verify_checksum(path: Path) -> None:
    """Raise ShardError if ``path`` differs from its sidecar's sha256; no sidecar passes."""
    side = checksum_path(path)
    if not side.exists():
        return  # written by hand or before checksums: Parquet's own checks still apply
    recorded = side.read_text().split()[0] if side.read_text().strip() else ""
    if recorded != file_sha256(path):
        raise ShardError(
            f"{path}: content differs from its recorded sha256 ({side.name}): the file is corrupt"
        )
