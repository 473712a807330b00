"""THE on-disk schema of self-play data: one Parquet file (zstd) per shard, one row per recorded
position (every position, or the full searches' only: ``selfplay.record_fast_rows``).

Columns (``shard_schema(N)``; M = N*N; all non-null):

=================  ==============================  =============================================
column             Arrow type                      meaning
=================  ==============================  =============================================
planes             fixed_size_binary(ceil(17M/8))  ``np.packbits`` of the 17 x N x N uint8 planes
pi                 fixed_size_list<float32>[M+1]   the search's policy target, pass last
z                  float32                         game result from the side to move: +1/-1/0
to_play            int8                            +1 black, -1 white
game_id            string                          unique per game within a run
move_number        int32                           0 for the first move of the game
iteration          int32                           pipeline iteration that produced the game
model_id           string                          the checkpoint that played (best player)
resign_disabled    bool                            the game was played with resignation off
full_search        bool                            v2: a full search chose this move, so pi is a
                                                   policy target (playout-cap randomisation)
root_value         float32                         v2: the search's root value, side to move
ownership          fixed_size_list<int8>[M]        v3: the final position's owner of each point
                                                   from the side to move (+1 its own, -1 the
                                                   opponent's, 0 dame; Tromp-Taylor area)
score              float32                         v3: the final score (komi included) from the
                                                   side to move
scored             bool                            v3: the game was played out (not resigned),
                                                   so ownership and score are targets
weight             float32                         v4: the row's training weight, > 0 (a decided
                                                   game's row at KataGo's reduced weight,
                                                   ``selfplay.decided_row_weight``; a full row by
                                                   its policy surprise, around 1,
                                                   ``selfplay.policy_surprise_weight``)
=================  ==============================  =============================================

Schema version 1 (before the playout-cap switches) lacks ``full_search`` and ``root_value``; its
shards still load, every row a full search and its root value taken as z (so mixing it into the
value target changes nothing). Versions 1 and 2 lack the v3 columns; their rows load as not
``scored`` (no ownership or score target: the auxiliary losses skip them). A shard whose rows
all weigh 1 is written as version 3, without the ``weight`` column (so a run that weighs no
row writes the same bytes as before row weights); versions 1 to 3 read with every weight 1.

The file's schema metadata holds ``tabula.schema_version`` (``SCHEMA_VERSION``),
``tabula.board_size`` and ``tabula.metadata`` (the writer's JSON dict; self-play's says which
policy target ``pi`` holds: "visits", or "gumbel-improved-policy", `tasks.selfplay`).
Fixed-size types make reading a reshape of Arrow's buffers rather than a per-row conversion.
Shards are written under a temporary name in the target folder and renamed, so a reader never
sees half a file; a sha256 sidecar (``<shard>.sha256``, `model.files`) lets `validate_shard`
catch a corrupt footer.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from model.files import atomic_file, checksum_matches, checksum_path, write_checksum
from tabula.errors import TabulaError, first_line
from tabula.features import NUM_PLANES

#: The version of a shard whose rows all weigh 1 (`WEIGHTED_VERSION` adds their weights).
SCHEMA_VERSION = 3
WEIGHTED_VERSION = 4
_V3 = ("ownership", "score", "scored")
#: Versions this code reads, and the columns each lacks (`_Columns` fills them in).
READABLE = {
    1: ("full_search", "root_value", *_V3, "weight"),
    2: (*_V3, "weight"),
    3: ("weight",),
    4: (),
}
_KEY_VERSION, _KEY_SIZE, _KEY_META = (
    b"tabula.schema_version",
    b"tabula.board_size",
    b"tabula.metadata",
)
_ROW_GROUP_ROWS = 65536
_COLUMN_DTYPES = {  # numpy dtype of each non-plane column
    "pi": np.float32,
    "z": np.float32,
    "to_play": np.int8,
    "game_id": np.str_,
    "move_number": np.int32,
    "iteration": np.int32,
    "model_id": np.str_,
    "resign_disabled": np.bool_,
    "full_search": np.bool_,
    "root_value": np.float32,
    "ownership": np.int8,
    "score": np.float32,
    "scored": np.bool_,
    "weight": np.float32,
}


class ShardError(TabulaError, ValueError):
    """A shard is unreadable, foreign, of another schema version or board size, or its records
    are malformed; the message is one line naming the file."""


@dataclass(frozen=True, kw_only=True)
class _Columns:
    """Per-position columns shared by both shard views; every array has R rows.

    pi: float32[R, M+1]; z: float32[R] in {-1, 0, +1} from the side to move; to_play: int8[R]
    (+1 black, -1 white); game_id, model_id: str[R]; move_number, iteration: int32[R];
    resign_disabled: bool[R]; full_search: bool[R] (default: all True); root_value:
    float32[R] (default: z); ownership: int8[R, M], score: float32[R], scored: bool[R]
    (default: zeros, not scored); weight: float32[R] > 0 (default: ones). Arrays read
    from a file may be read-only views of its buffers.
    """

    pi: np.ndarray
    z: np.ndarray
    to_play: np.ndarray
    game_id: np.ndarray
    move_number: np.ndarray
    iteration: np.ndarray
    model_id: np.ndarray
    resign_disabled: np.ndarray
    full_search: np.ndarray = None  # type: ignore[assignment]  # filled in by __post_init__
    root_value: np.ndarray = None  # type: ignore[assignment]
    ownership: np.ndarray = None  # type: ignore[assignment]
    score: np.ndarray = None  # type: ignore[assignment]
    scored: np.ndarray = None  # type: ignore[assignment]
    weight: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.full_search is None:
            object.__setattr__(self, "full_search", np.ones(len(self.z), dtype=bool))
        if self.root_value is None:
            object.__setattr__(self, "root_value", np.asarray(self.z, dtype=np.float32).copy())
        r, m = len(self.z), self.pi.shape[1] - 1
        if self.ownership is None:
            object.__setattr__(self, "ownership", np.zeros((r, m), dtype=np.int8))
        if self.score is None:
            object.__setattr__(self, "score", np.zeros(r, dtype=np.float32))
        if self.scored is None:
            object.__setattr__(self, "scored", np.zeros(r, dtype=bool))
        if self.weight is None:
            object.__setattr__(self, "weight", np.ones(r, dtype=np.float32))

    @property
    def weighted(self) -> bool:
        """Some row weighs other than 1 (the shard is written as `WEIGHTED_VERSION`)."""
        return bool((self.weight != 1.0).any())

    def __len__(self) -> int:
        return int(self.z.shape[0])

    @property
    def board_size(self) -> int:
        return int(round((self.pi.shape[1] - 1) ** 0.5))


@dataclass(frozen=True, kw_only=True)
class ShardRecords(_Columns):
    """A shard's rows with unpacked planes: uint8[R, 17, N, N] (features of tabula.features)."""

    planes: np.ndarray

    @classmethod
    def concatenate(cls, parts: list[ShardRecords]) -> ShardRecords:
        """Rows of ``parts`` one after another (e.g. the games of one self-play worker)."""
        if not parts:
            raise ValueError("concatenate needs at least one ShardRecords")
        return cls(
            **{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)}
        )


@dataclass(frozen=True, kw_only=True)
class PackedShard(_Columns):
    """A shard's rows with planes still bit-packed: uint8[R, ceil(17*N*N/8)].

    The training data path keeps this form and unpacks only the rows of each mini-batch.
    """

    packed_planes: np.ndarray

    def unpack_planes(self, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """uint8[len(rows), 17, N, N] for the selected rows (all when None)."""
        packed = self.packed_planes if rows is None else self.packed_planes[rows]
        return unpack_planes(packed, self.board_size)

    def to_records(self) -> ShardRecords:
        cols = {f.name: getattr(self, f.name) for f in fields(_Columns)}
        return ShardRecords(**cols, planes=self.unpack_planes())


@dataclass(frozen=True)
class ShardInfo:
    """What a shard's footer says, without reading its rows."""

    path: Path
    schema_version: int
    board_size: int
    num_rows: int
    num_row_groups: int
    metadata: dict[str, Any]


def shard_schema(
    board_size: int, metadata: dict[str, Any] | None = None, version: int = SCHEMA_VERSION
) -> pa.Schema:
    """The Arrow schema of a shard for an N x N board (see the module table), as ``version``
    wrote it."""
    m = board_size * board_size
    columns = [
        pa.field("planes", pa.binary(packed_width(board_size)), nullable=False),
        pa.field(
            "pi",
            pa.list_(pa.field("item", pa.float32(), nullable=False), m + 1),
            nullable=False,
        ),
        pa.field("z", pa.float32(), nullable=False),
        pa.field("to_play", pa.int8(), nullable=False),
        pa.field("game_id", pa.string(), nullable=False),
        pa.field("move_number", pa.int32(), nullable=False),
        pa.field("iteration", pa.int32(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("resign_disabled", pa.bool_(), nullable=False),
        pa.field("full_search", pa.bool_(), nullable=False),
        pa.field("root_value", pa.float32(), nullable=False),
        pa.field(
            "ownership",
            pa.list_(pa.field("item", pa.int8(), nullable=False), m),
            nullable=False,
        ),
        pa.field("score", pa.float32(), nullable=False),
        pa.field("scored", pa.bool_(), nullable=False),
        pa.field("weight", pa.float32(), nullable=False),
    ]
    schema = pa.schema([c for c in columns if c.name not in READABLE[version]])
    return schema.with_metadata(
        {
            _KEY_VERSION: str(version).encode(),
            _KEY_SIZE: str(board_size).encode(),
            _KEY_META: json.dumps(metadata or {}, sort_keys=True).encode(),
        }
    )


def packed_width(board_size: int) -> int:
    """Bytes per row of packed planes: ceil(17 * N * N / 8)."""
    return (NUM_PLANES * board_size * board_size + 7) // 8


def pack_planes(planes: np.ndarray) -> np.ndarray:
    """uint8[R, 17, N, N] of 0/1 -> uint8[R, packed_width(N)] (np.packbits, big-endian bits)."""
    return np.packbits(planes.reshape(planes.shape[0], int(np.prod(planes.shape[1:]))), axis=1)


def unpack_planes(packed: np.ndarray, board_size: int) -> np.ndarray:
    """uint8[R, packed_width(N)] -> uint8[R, 17, N, N], vectorised over all rows."""
    n_bits = NUM_PLANES * board_size * board_size
    bits = np.unpackbits(packed, axis=1, count=n_bits)
    return bits.reshape(packed.shape[0], NUM_PLANES, board_size, board_size)


def _check_records(records: ShardRecords, where: str) -> None:
    """Shapes, dtypes and value domains; one ShardError line for the first problem."""
    planes = records.planes
    if not isinstance(planes, np.ndarray) or planes.ndim != 4 or planes.shape[1] != NUM_PLANES:
        raise ShardError(f"{where}: planes must be uint8[R, {NUM_PLANES}, N, N]")
    r, n = planes.shape[0], planes.shape[2]
    if planes.shape[3] != n or planes.dtype != np.uint8:
        raise ShardError(
            f"{where}: planes must be uint8[R, {NUM_PLANES}, N, N], got "
            f"{planes.dtype}{list(planes.shape)}"
        )
    for name, dtype in _COLUMN_DTYPES.items():
        col = getattr(records, name)
        shape = {"pi": (r, n * n + 1), "ownership": (r, n * n)}.get(name, (r,))
        if not isinstance(col, np.ndarray) or col.shape != shape:
            got = col.shape if isinstance(col, np.ndarray) else type(col).__name__
            raise ShardError(f"{where}: column {name} must have shape {shape}, got {got}")
        if col.dtype.type is not dtype:
            want = "str" if dtype is np.str_ else np.dtype(dtype).name
            raise ShardError(f"{where}: column {name} must be {want}, got {col.dtype}")
    _check_values(planes, records, where)


def _check_values(planes: np.ndarray, cols: _Columns, where: str) -> None:
    def bad(what: str) -> ShardError:
        return ShardError(f"{where}: {what}")

    if planes.size and planes.max() > 1:
        raise bad("planes must hold only 0 and 1")
    if not np.isin(cols.to_play, (-1, 1)).all():
        raise bad("to_play must be +1 (black) or -1 (white)")
    # Plane 16 is all ones iff black is to move (paper, Methods).
    colour = planes[:, NUM_PLANES - 1].reshape(len(cols), planes.shape[2] * planes.shape[3])
    black = cols.to_play == 1
    if not (colour[black] == 1).all() or not (colour[~black] == 0).all():
        raise bad("colour plane 16 disagrees with to_play (all ones iff black to move)")
    if not np.isin(cols.z, (-1.0, 0.0, 1.0)).all():
        raise bad("z must be +1, -1 or 0 (game result from the side to move)")
    pi = cols.pi
    if not np.isfinite(pi).all() or (pi < 0).any():
        raise bad("pi must be finite and non-negative")
    if len(cols) and np.abs(pi.sum(axis=1, dtype=np.float64) - 1.0).max() > 1e-3:
        raise bad("every pi row must sum to 1")
    if (cols.move_number < 0).any() or (cols.iteration < 0).any():
        raise bad("move_number and iteration must be >= 0")
    if not np.isfinite(cols.root_value).all() or (np.abs(cols.root_value) > 1).any():
        raise bad("root_value must be in [-1, 1]")
    if cols.ownership.size and np.abs(cols.ownership).max() > 1:
        raise bad("ownership must be +1, -1 or 0 (owner of each point from the side to move)")
    if not np.isfinite(cols.score).all():
        raise bad("score must be finite")
    if not np.isfinite(cols.weight).all() or (cols.weight <= 0).any():
        raise bad("weight must be finite and > 0")


def write_shard(
    path: str | os.PathLike[str], records: ShardRecords, metadata: dict[str, Any] | None = None
) -> Path:
    """Write ``records`` (checked first) to ``path`` atomically (`model.files.atomic_file`),
    then its sha256 sidecar: schema `SCHEMA_VERSION`, or `WEIGHTED_VERSION` when some row
    weighs other than 1. ``metadata`` (JSON-serialisable) goes into the footer. Returns the
    path. Raises ShardError for malformed records; leaves no temporary file behind.
    """
    path = Path(path)
    _check_records(records, str(path))
    try:
        version = WEIGHTED_VERSION if records.weighted else SCHEMA_VERSION
        schema = shard_schema(records.planes.shape[2], metadata, version)
    except TypeError as e:
        raise ShardError(f"{path}: metadata is not JSON-serialisable ({e})") from None
    table = pa.Table.from_arrays(_to_arrow(records, schema), schema=schema)
    with atomic_file(path) as f:
        pq.write_table(
            table,
            f,
            row_group_size=_ROW_GROUP_ROWS,
            compression="zstd",
            use_dictionary=["game_id", "model_id"],
            write_page_checksum=True,
        )
    write_checksum(path)
    return path


def _to_arrow(records: ShardRecords, schema: pa.Schema) -> list[pa.Array]:
    packed = pack_planes(records.planes)
    width = packed.shape[1]
    planes = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(records), [None, pa.py_buffer(np.ascontiguousarray(packed))]
    )
    pi = pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(records.pi).reshape(-1)), type=schema.field("pi").type
    )

    def column(name: str) -> pa.Array:
        values, kind = getattr(records, name), schema.field(name).type
        if pa.types.is_fixed_size_list(kind):
            return pa.FixedSizeListArray.from_arrays(
                pa.array(np.ascontiguousarray(values).reshape(-1)), type=kind
            )
        return pa.array(values, type=kind)

    return [planes, pi, *(column(name) for name in schema.names[2:])]


def _open(path: Path, verify_pages: bool = False) -> tuple[pq.ParquetFile, ShardInfo]:
    """Open a shard and check its footer: tabula schema, version, board size, column types."""
    if not path.is_file():
        raise ShardError(f"{path}: shard file not found")
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=verify_pages)
        schema = pf.schema_arrow  # decodes the footer: a flipped byte there fails here
    except (pa.ArrowException, OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise ShardError(
            f"{path}: not a readable Parquet file, truncated or corrupt ({first_line(e)})"
        ) from None
    meta = schema.metadata or {}
    if _KEY_VERSION not in meta:
        raise ShardError(f"{path}: not a tabula shard (no {_KEY_VERSION.decode()} in the schema)")
    try:
        version, size = int(meta[_KEY_VERSION]), int(meta.get(_KEY_SIZE, b""))
        user = json.loads(meta.get(_KEY_META, b"{}"))
    except ValueError as e:
        raise ShardError(f"{path}: unreadable tabula schema metadata ({first_line(e)})") from None
    if version not in READABLE:
        readable = ", ".join(str(v) for v in READABLE)
        raise ShardError(f"{path}: shard schema_version {version}, this code reads {readable}")
    expected = shard_schema(size, version=version)
    if not schema.remove_metadata().equals(expected.remove_metadata()):
        raise ShardError(
            f"{path}: columns do not match the {size}x{size} shard schema v"
            f"{version} (got {', '.join(schema.names)})"
        )
    md = pf.metadata
    info = ShardInfo(path, version, size, md.num_rows, md.num_row_groups, user)
    return pf, info


def _check_board_size(info: ShardInfo, expect_board_size: int | None) -> None:
    if expect_board_size is not None and info.board_size != expect_board_size:
        raise ShardError(
            f"{info.path}: shard is for a {info.board_size}x{info.board_size} board, "
            f"expected {expect_board_size}x{expect_board_size}"
        )


def read_shard_info(path: str | os.PathLike[str]) -> ShardInfo:
    """The footer of a shard (schema checked), without reading rows."""
    return _open(Path(path))[1]


def read_shard_packed(
    path: str | os.PathLike[str], expect_board_size: int | None = None
) -> PackedShard:
    """All rows of a shard with planes left packed; raises ShardError naming the file for a
    missing, truncated, corrupt or foreign file, another schema version or board size."""
    path = Path(path)
    pf, info = _open(path)
    _check_board_size(info, expect_board_size)
    try:
        table = pf.read()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ShardError(f"{path}: corrupt shard data ({first_line(e)})") from None
    return _from_table(table, info)


def read_shard(path: str | os.PathLike[str], expect_board_size: int | None = None) -> ShardRecords:
    """All rows of a shard with planes unpacked; errors as ``read_shard_packed``."""
    return read_shard_packed(path, expect_board_size).to_records()


def _from_table(table: pa.Table, info: ShardInfo) -> PackedShard:
    if any(col.null_count for col in table.columns):
        raise ShardError(f"{info.path}: shard has null values")
    n = info.board_size
    planes = table.column("planes").combine_chunks()
    width = packed_width(n)
    packed = np.frombuffer(
        planes.buffers()[1],
        dtype=np.uint8,
        count=len(planes) * width,
        offset=planes.offset * width,
    ).reshape(len(planes), width)
    pi = table.column("pi").combine_chunks().flatten().to_numpy().reshape(-1, n * n + 1)
    cols: dict[str, np.ndarray] = {}
    for name in table.schema.names[2:]:
        if name == "ownership":
            flat = table.column(name).combine_chunks().flatten().to_numpy()
            cols[name] = flat.reshape(-1, n * n)
            continue
        arr = table.column(name).to_numpy()
        cols[name] = arr.astype(np.str_) if _COLUMN_DTYPES[name] is np.str_ else arr
    return PackedShard(pi=pi, packed_planes=packed, **cols)


def validate_shard(path: str | os.PathLike[str], expect_board_size: int | None = None) -> ShardInfo:
    """Full check of a shard: footer, page checksums and value domains of every row group
    (z, to_play, pi a distribution, colour plane vs to_play). Returns its ShardInfo or raises
    ShardError with one line naming the file and the first problem."""
    path = Path(path)
    pf, info = _open(path, verify_pages=True)
    _check_board_size(info, expect_board_size)
    if not checksum_matches(path):
        raise ShardError(
            f"{path}: content differs from its recorded sha256 ({checksum_path(path).name}): "
            "the file is corrupt"
        )
    rows = 0
    for g in range(info.num_row_groups):
        try:
            table = pf.read_row_group(g)
        except (pa.ArrowException, OSError) as e:
            raise ShardError(f"{path}: corrupt row group {g} ({first_line(e)})") from None
        shard = _from_table(table, info)
        _check_values(shard.unpack_planes(), shard, f"{path} row group {g}")
        rows += len(shard)
    if rows != info.num_rows:
        raise ShardError(f"{path}: footer says {info.num_rows} rows, row groups hold {rows}")
    return info
