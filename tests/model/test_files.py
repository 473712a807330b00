"""model.files: atomic replacement (old or new, never half; no temporary left), sha256 sidecars."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from model.files import (
    atomic_file,
    atomic_path,
    checksum_matches,
    checksum_path,
    file_sha256,
    write_bytes,
    write_checksum,
    write_json,
    write_text,
)


def test_writes_create_the_folder_and_leave_only_the_file(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "f.bin"
    assert write_bytes(target, b"\x00\x01") == target
    assert target.read_bytes() == b"\x00\x01"
    write_text(target, "h\u00e9")  # replaced whole, as UTF-8
    assert target.read_bytes() == "h\u00e9".encode()
    assert [p.name for p in target.parent.iterdir()] == ["f.bin"]


def test_json_is_the_run_record_format(tmp_path: Path) -> None:
    data = {"b": 1, "a": [Path("x"), 2.5]}
    write_json(tmp_path / "r.json", data)
    text = (tmp_path / "r.json").read_text()
    assert text == json.dumps(data, indent=2, sort_keys=True, default=str)
    assert json.loads(text) == {"a": ["x", 2.5], "b": 1}


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = write_text(tmp_path / "f.txt", "old")
    with pytest.raises(RuntimeError), atomic_file(target) as f:
        f.write(b"half of the new")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_the_temporary_is_hidden_beside_the_target(tmp_path: Path) -> None:
    target = tmp_path / "model.ckpt"
    with atomic_path(target) as tmp:
        # one convention: .<name>.<random>.tmp in the same folder (``*.tmp`` finds leftovers)
        assert tmp.parent == tmp_path
        assert tmp.name.startswith(".model.ckpt.") and tmp.name.endswith(".tmp")
        assert not target.exists()
        tmp.write_bytes(b"by name")
    assert target.read_bytes() == b"by name"
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_sha256_and_its_sidecar(tmp_path: Path) -> None:
    target = write_bytes(tmp_path / "s.parquet", b"payload")
    digest = hashlib.sha256(b"payload").hexdigest()
    assert file_sha256(target) == digest
    assert checksum_matches(target)  # no sidecar: nothing to compare
    side = write_checksum(target)
    assert side == checksum_path(target) == tmp_path / "s.parquet.sha256"
    assert side.read_text() == f"{digest}  s.parquet\n"  # sha256sum format
    assert checksum_matches(target)
    target.write_bytes(b"paylOad")
    assert not checksum_matches(target)
    side.write_text("")
    assert not checksum_matches(target)
