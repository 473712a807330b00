"""File safety for everything tabula writes: atomic replacement, sha256, sha256 sidecars.

It lives in `model/` because that is the lowest layer allowed file I/O (`tabula/` holds none,
docs/design.md), so `model/`, `tasks/`, `flows/` and the CLI share this one implementation.

**Atomic write.** The bytes go to a temporary file ``.<name>.<random>.tmp`` in the target's own
folder (the same file system, so the rename is atomic; hidden, and ``*.tmp`` finds leftovers),
which is flushed and fsynced, then ``os.replace``\\ d over the target; then the folder is fsynced
so that the rename itself survives a crash (skipped where a folder cannot be opened). On any
failure, an interrupt included, the temporary file is removed and the target is untouched: a
reader sees the old file or the new one, never half of one. The target's folder is created.
Like ``tempfile.mkstemp``, the file is created with mode 0600.

**sha256 sidecar.** ``<file>.sha256`` holds the file's sha256 in ``sha256sum`` format
(``<hex>  <name>``). Parquet checks its data pages but not its footer, so a shard's sidecar is
what catches a flipped footer byte (`model.shards.validate_shard`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "atomic_file",
    "atomic_path",
    "checksum_matches",
    "checksum_path",
    "file_sha256",
    "write_bytes",
    "write_checksum",
    "write_json",
    "write_text",
]


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a folder; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path for a writer that takes a file name (Lightning's ``save_checkpoint``);
    on leaving the block the file is fsynced and renamed to ``path`` (see the module doc)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file handle whose content replaces ``path`` when the block ends normally
    (``torch.save``, ``pq.write_table``); nothing changes if it raises."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        yield f
        f.flush()


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically; returns the path."""
    with atomic_file(path) as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) atomically; returns the path."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Replace ``path`` with ``data`` as JSON atomically: the format of the run's records
    (indent 2, sorted keys, anything JSON lacks, such as a Path, as its ``str``)."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str))


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of the file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checksum_path(path: str | os.PathLike[str]) -> Path:
    """The sha256 sidecar of ``path``: ``<path>.sha256``."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def write_checksum(path: str | os.PathLike[str], digest: str | None = None) -> Path:
    """Write the sidecar of ``path`` atomically with ``digest`` (default: hash the file now);
    returns the sidecar's path."""
    path = Path(path)
    digest = file_sha256(path) if digest is None else digest
    return write_text(checksum_path(path), f"{digest}  {path.name}\n")


def checksum_matches(path: str | os.PathLike[str]) -> bool:
    """False when ``path``'s bytes differ from the sha256 in its sidecar. A file without a
    sidecar (written by hand or before sidecars) passes: there is nothing to compare."""
    side = checksum_path(path)
    if not side.exists():
        return True
    recorded = side.read_text().split()
    return bool(recorded) and recorded[0] == file_sha256(path)
