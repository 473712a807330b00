"""The shard schema: exact round trips, atomic writes, and one-line refusals naming the file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.shards import (
    SCHEMA_VERSION,
    ShardError,
    ShardRecords,
    pack_planes,
    packed_width,
    read_shard,
    read_shard_info,
    read_shard_packed,
    shard_schema,
    unpack_planes,
    validate_shard,
    write_shard,
)


def assert_same(a: ShardRecords, b: ShardRecords) -> None:
    for f in fields(ShardRecords):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.dtype.type is y.dtype.type, f.name  # str widths may differ
        np.testing.assert_array_equal(x, y, err_msg=f.name)


def refusal(fn: Callable[..., object], path: Path, **kw: object) -> str:
    with pytest.raises(ShardError) as err:
        fn(path, **kw)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    return msg


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(n=st.sampled_from([5, 7, 9, 19]), rows=st.integers(0, 40), seed=st.integers(0, 10**6))
def test_round_trip_is_exact(
    tmp_path: Path,
    make_records: Callable[[int, int, np.random.Generator], ShardRecords],
    n: int,
    rows: int,
    seed: int,
) -> None:
    rec = make_records(rows, n, np.random.default_rng(seed))
    path = write_shard(tmp_path / f"s{n}-{rows}-{seed}.parquet", rec, {"worker": 1, "seed": seed})
    assert_same(read_shard(path, expect_board_size=n), rec)
    info = read_shard_info(path)
    assert (info.schema_version, info.board_size, info.num_rows) == (SCHEMA_VERSION, n, rows)
    assert info.metadata == {"worker": 1, "seed": seed}


def test_file_layout(tmp_path: Path, records: ShardRecords) -> None:
    path = write_shard(tmp_path / "a.parquet", records)
    pf = pq.ParquetFile(path)
    assert pf.schema_arrow.remove_metadata().equals(shard_schema(9).remove_metadata())
    assert pf.schema_arrow.metadata[b"tabula.schema_version"] == b"3"
    assert pf.schema_arrow.metadata[b"tabula.board_size"] == b"9"
    assert pf.metadata.row_group(0).column(0).compression == "ZSTD"
    assert pf.schema_arrow.field("planes").type == pa.binary(packed_width(9))


def test_packed_view_and_batch_unpack(tmp_path: Path, records: ShardRecords) -> None:
    packed = read_shard_packed(write_shard(tmp_path / "a.parquet", records))
    assert packed.packed_planes.shape == (50, packed_width(9))
    rows = np.array([3, 0, 49, 3])
    np.testing.assert_array_equal(packed.unpack_planes(rows), records.planes[rows])
    np.testing.assert_array_equal(unpack_planes(pack_planes(records.planes), 9), records.planes)
    assert_same(packed.to_records(), records)


def test_concatenate(records: ShardRecords) -> None:
    both = ShardRecords.concatenate([records, records])
    assert len(both) == 100 and both.board_size == 9
    np.testing.assert_array_equal(both.pi[50:], records.pi)


def test_atomic_write_leaves_only_the_shard(tmp_path: Path, records: ShardRecords) -> None:
    path = tmp_path / "out" / "a.parquet"
    write_shard(path, records)
    write_shard(path, records)  # overwrite in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.parquet", "a.parquet.sha256"]


def test_failed_write_leaves_nothing(
    tmp_path: Path, records: ShardRecords, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(pq, "write_table", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_shard(tmp_path / "a.parquet", records)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: {"z": np.full(len(r), 0.5, np.float32)}, "z must be"),
        (lambda r: {"to_play": np.zeros(len(r), np.int8)}, "to_play"),
        (lambda r: {"to_play": -r.to_play}, "colour plane"),
        (lambda r: {"pi": r.pi * 2}, "sum to 1"),
        (lambda r: {"pi": r.pi.astype(np.float64)}, "pi must be float32"),
        (lambda r: {"move_number": r.move_number[:-1]}, "move_number must have shape"),
        (lambda r: {"game_id": np.arange(len(r))}, "game_id must be str"),
        (lambda r: {"planes": r.planes * 2}, "only 0 and 1"),
    ],
)
def test_malformed_records_refused_before_writing(
    tmp_path: Path,
    records: ShardRecords,
    change: Callable[[ShardRecords], dict[str, np.ndarray]],
    message: str,
) -> None:
    bad = replace(records, **change(records))
    path = tmp_path / "a.parquet"
    with pytest.raises(ShardError, match=message) as err:
        write_shard(path, bad)
    assert str(path) in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_missing_truncated_and_foreign_files(tmp_path: Path, records: ShardRecords) -> None:
    assert "not found" in refusal(read_shard, tmp_path / "none.parquet")
    good = write_shard(tmp_path / "good.parquet", records).read_bytes()
    for cut in (10, len(good) // 2, len(good) - 3):
        trunc = tmp_path / f"trunc{cut}.parquet"
        trunc.write_bytes(good[:cut])
        assert "truncated or corrupt" in refusal(read_shard, trunc)
        refusal(validate_shard, trunc)
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), foreign)
    assert "not a tabula shard" in refusal(read_shard, foreign)
    text = tmp_path / "text.parquet"
    text.write_text("not parquet\n")
    refusal(read_shard, text)


def test_other_version_columns_and_board_size_refused(
    tmp_path: Path, records: ShardRecords
) -> None:
    path = write_shard(tmp_path / "a.parquet", records)
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    newer = tmp_path / "newer.parquet"
    pq.write_table(table.replace_schema_metadata({**meta, b"tabula.schema_version": b"5"}), newer)
    assert "schema_version 5, this code reads 1, 2, 3, 4" in refusal(read_shard, newer)
    fewer = tmp_path / "fewer.parquet"
    pq.write_table(table.drop_columns(["model_id"]).replace_schema_metadata(meta), fewer)
    assert "columns do not match" in refusal(read_shard, fewer)
    assert "expected 19x19" in refusal(read_shard, path, expect_board_size=19)
    assert "expected 19x19" in refusal(validate_shard, path, expect_board_size=19)


def test_validate_catches_corrupt_pages_and_bad_values(
    tmp_path: Path, records: ShardRecords
) -> None:
    path = write_shard(tmp_path / "a.parquet", records)
    assert validate_shard(path).num_rows == 50
    data = bytearray(path.read_bytes())
    data[200:260] = bytes(60)  # inside the first column's data page
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(bytes(data))
    refusal(validate_shard, corrupt)
    # Values a foreign writer could produce with the right schema: z outside {-1, 0, 1}.
    table = pq.read_table(path)
    z = pa.array(np.full(50, 3.0, np.float32))
    odd = tmp_path / "odd.parquet"
    pq.write_table(table.set_column(2, table.schema.field("z"), z), odd)
    read_shard(odd)  # structure is fine
    assert "z must be" in refusal(validate_shard, odd)


@pytest.mark.parametrize("where", [0.5, 0.9, -40, -12])
def test_any_flipped_byte_is_refused_with_the_file_name(
    tmp_path: Path, records: ShardRecords, where: float | int
) -> None:
    """Bit rot anywhere (data pages or the footer) is a ShardError naming the file."""
    from model.shards import ShardError, validate_shard

    path = write_shard(tmp_path / "flip.parquet", records, {})
    data = bytearray(path.read_bytes())
    at = int(len(data) * where) if isinstance(where, float) else len(data) + where
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ShardError, match="flip.parquet"):
        validate_shard(path)


def test_version_1_shards_still_load(tmp_path: Path, records: ShardRecords) -> None:
    """Shards written before playout caps and root values (schema v1) load as full searches
    whose root value is z, and validate."""
    path = write_shard(tmp_path / "a.parquet", records)
    table = pq.read_table(path)
    meta = {**table.schema.metadata, b"tabula.schema_version": b"1"}
    old = tmp_path / "old.parquet"
    dropped = ["full_search", "root_value", "ownership", "score", "scored"]
    pq.write_table(table.drop_columns(dropped).replace_schema_metadata(meta), old)
    (old.parent / (old.name + ".sha256")).unlink(missing_ok=True)
    back = read_shard(old)
    assert read_shard_info(old).schema_version == 1
    assert back.full_search.all() and (back.root_value == back.z).all()
    assert not back.scored.any() and not back.ownership.any()
    assert (back.pi == records.pi).all()
    wrong = tmp_path / "wrong.parquet"  # a v3 shard claiming v1 still has v3's columns
    pq.write_table(table.replace_schema_metadata(meta), wrong)
    assert "columns do not match the 9x9 shard schema v1" in refusal(read_shard, wrong)


def test_version_2_shards_load_without_auxiliary_targets(
    tmp_path: Path, records: ShardRecords
) -> None:
    """Shards written before the ownership and score targets (schema v2) load as not scored:
    the auxiliary losses skip their rows."""
    path = write_shard(tmp_path / "a.parquet", records)
    table = pq.read_table(path)
    meta = {**table.schema.metadata, b"tabula.schema_version": b"2"}
    old = tmp_path / "old.parquet"
    v2 = table.drop_columns(["ownership", "score", "scored"])
    pq.write_table(v2.replace_schema_metadata(meta), old)
    back = read_shard(old)
    assert read_shard_info(old).schema_version == 2
    assert not back.scored.any() and not back.ownership.any() and not back.score.any()
    assert (back.root_value == records.root_value).all()
    assert back.ownership.shape == (len(records), 81)


def test_playout_cap_columns_round_trip(tmp_path: Path, records: ShardRecords) -> None:
    rng = np.random.default_rng(3)
    capped = replace(
        records,
        full_search=rng.random(len(records)) < 0.3,
        root_value=rng.uniform(-1, 1, len(records)).astype(np.float32),
    )
    back = read_shard(write_shard(tmp_path / "a.parquet", capped))
    assert (back.full_search == capped.full_search).all()
    assert (back.root_value == capped.root_value).all()
    bad = replace(capped, root_value=np.full(len(records), 1.5, dtype=np.float32))
    assert "root_value must be in [-1, 1]" in refusal(write_shard, tmp_path / "b.parquet",
                                                      records=bad)  # fmt: skip


def test_auxiliary_columns_round_trip_and_are_checked(
    tmp_path: Path, records: ShardRecords
) -> None:
    back = read_shard(write_shard(tmp_path / "a.parquet", records))
    assert (back.ownership == records.ownership).all() and back.ownership.dtype == np.int8
    assert (back.score == records.score).all() and (back.scored == records.scored).all()
    owner = records.ownership.copy()
    owner[3, 7] = 2
    bad = replace(records, ownership=owner)
    assert "ownership must be" in refusal(write_shard, tmp_path / "b.parquet", records=bad)
    bad = replace(records, score=np.full(len(records), np.nan, dtype=np.float32))
    assert "score must be finite" in refusal(write_shard, tmp_path / "c.parquet", records=bad)


def test_row_weights_round_trip_as_version_4_and_older_shards_weigh_one(
    tmp_path: Path, records: ShardRecords
) -> None:
    """A shard with a row weighing other than 1 is written as schema v4 with its weights; one
    whose rows all weigh 1 stays v3 (the bytes of a run without row weights do not change),
    and reads back with every weight 1, as v1 and v2 shards do."""
    # (a decided row's 0.1, a surprising full row's weight above 1)
    weight = np.choose(np.arange(len(records)) % 3, [1.0, 0.1, 2.5]).astype(np.float32)
    path = write_shard(tmp_path / "w.parquet", replace(records, weight=weight))
    assert read_shard_info(path).schema_version == 4
    np.testing.assert_array_equal(read_shard(path).weight, weight)
    validate_shard(path)
    plain = write_shard(tmp_path / "p.parquet", records)
    assert read_shard_info(plain).schema_version == SCHEMA_VERSION == 3
    assert "weight" not in pq.ParquetFile(plain).schema_arrow.names
    assert (read_shard(plain).weight == 1.0).all()
    for wrong in (0.0, np.inf):
        bad = replace(records, weight=np.full(len(records), wrong, np.float32))
        with pytest.raises(ShardError, match="weight must be finite and > 0"):
            write_shard(tmp_path / "bad.parquet", bad)
        assert not (tmp_path / "bad.parquet").exists()
