"""Typed stage records: what each stage returns, what its marker stores, what readers get back.

A record is a frozen dataclass. ``to_json`` turns one into JSON-ready data and ``from_json``
reads that data back AS the record's type, directed by its field types: a missing or unknown
key is a `RecordError`, never a silent None, and a renamed field is a mypy error at every reader.

Markers keep the flat JSON layout the stages wrote before there were records (a run started
then still resumes): a field marked ``FLAT`` has its own fields written beside the record's
instead of under its name (``{**worker, "seconds": ..., "host": ...}``), the outer record's
keys winning where both have one, and a class may list in ``__json_extra__`` derived
properties (rates, a score) that are written for people and tools but not read back.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from tabula import elo
from tabula.arena import MatchSummary
from tabula.errors import TabulaError
from tabula.gating import GateDecision
from tasks.selfplay import WorkerResult
from tasks.train import TrainResult

R = TypeVar("R")

#: Field metadata: write this (dataclass) field's fields beside the record's own.
FLAT = {"flat": True}


class RecordError(TabulaError, ValueError):
    """Data that is not the record it should be (a marker from another version, or edited)."""


def to_json(value: Any) -> Any:
    """A record (or any value inside one) as JSON-ready data: paths as strings, tuples as
    lists, enums as their values, ``FLAT`` fields merged into their parent."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = to_json(getattr(value, f.name))
            if f.metadata.get("flat"):
                data = {**item, **data}  # the outer record's keys win
            else:
                data[f.name] = item
        for name in getattr(value, "__json_extra__", ()):
            data[name] = to_json(getattr(value, name))
        return data
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def from_json(cls: type[R], data: Any) -> R:
    """``data`` (as `to_json` wrote it) read back as a ``cls``; RecordError when it is not one."""
    return typing.cast(R, _decode(cls, data, cls.__name__))


def _known_keys(cls: type) -> set[str]:
    keys = set(getattr(cls, "__json_extra__", ()))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        keys |= _known_keys(hints[f.name]) if f.metadata.get("flat") else {f.name}
    return keys


def _decode_record(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    unknown = set(data) - _known_keys(cls)
    if unknown:
        raise RecordError(f"{where}: unknown keys {sorted(unknown)}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("flat"):
            inner = {k: v for k, v in data.items() if k in _known_keys(hints[f.name])}
            values[f.name] = _decode_record(hints[f.name], inner, f"{where}.{f.name}")
        elif f.name in data:
            values[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"{where}: missing {f.name!r}")
    return cls(**values)


def _decode(tp: Any, data: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _decode(options[0], data, where)
        if any(isinstance(data, a) for a in options):  # e.g. int | str: plain values only
            return data
        raise RecordError(f"{where}: expected {tp}, got {data!r}")
    if dataclasses.is_dataclass(tp):
        return _decode_record(typing.cast(type, tp), data, where)
    if origin is list or origin is tuple:
        if not isinstance(data, list):
            raise RecordError(f"{where}: expected a list, got {type(data).__name__}")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(data) != len(args):
                raise RecordError(f"{where}: expected {len(args)} items, got {len(data)}")
            pairs = enumerate(zip(args, data, strict=True))
            return tuple(_decode(a, v, f"{where}[{k}]") for k, (a, v) in pairs)
        items = [_decode(args[0], v, f"{where}[{k}]") for k, v in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(data, dict):
            raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
        return {k: _decode(args[1], v, f"{where}[{k!r}]") for k, v in data.items()}
    if tp is Path:
        return Path(data)
    if tp is float and isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)  # JSON writes 2.0 as 2.0, but a float field may hold an int
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if isinstance(tp, type) and not isinstance(data, tp):
        raise RecordError(f"{where}: expected {tp.__name__}, got {data!r}")
    return data


class Stage(enum.StrEnum):
    """The stages of a run, each with its marker ``iter-NNNN/state/<stage>.json``.

    INIT (iteration 0 only): the random network. PLAN: the iteration's champion, parent,
    window and seeds. SELFPLAY: one marker per worker (``selfplay-wWW``) and one for the
    totals. TRAIN, EVALUATE, PROMOTE: the rest of the iteration, in this order.
    """

    INIT = "init"
    PLAN = "plan"
    SELFPLAY = "selfplay"
    TRAIN = "train"
    EVALUATE = "evaluate"
    PROMOTE = "promote"

    def marker_name(self, worker: int | None = None) -> str:
        """The marker's file stem: the stage, or ``selfplay-wWW`` for a self-play worker."""
        return self.value if worker is None else f"{self.value}-w{worker:02d}"


#: The stages that make an iteration finished, in order.
ITERATION_STAGES = (Stage.SELFPLAY, Stage.TRAIN, Stage.EVALUATE, Stage.PROMOTE)


@dataclass(frozen=True)
class InitRecord:
    """The randomly initialised network that starts a run. model: project-relative path."""

    model: str
    sha256: str


@dataclass(frozen=True)
class WorkerRecord:
    """A finished self-play worker: what it wrote and measured, and where it ran (a Dask
    worker's process on a cluster, the flow's own process locally).

    seconds: the whole task, model loading included; the marker keeps only this one, so a
    worker read back from a marker has ``worker.seconds == seconds``.
    """

    worker: WorkerResult = field(metadata=FLAT)
    seconds: float
    host: str
    pid: int


@dataclass(frozen=True)
class SelfplayRecord:
    """The self-play totals of one iteration over its workers (`tasks.calibrate`).

    Sums: games .. false_positives. Rates: per second of the slowest worker (``seconds``).
    v_resign_used: the threshold the workers played with (None: resignation off);
    v_resign_next: the calibrated one for the next iteration, with the false-positive rate of
    the resign-disabled games at the current threshold (paper, Methods: "Self-play").
    hashes: the DVC hash of each output of the iteration's ``selfplay`` stage.
    """

    games: int
    positions: int
    simulations: int
    evaluations: int
    resigned_games: int
    resign_disabled_games: int
    false_positives: int
    mean_game_length: float
    resign_rate: float
    positions_per_s: float
    simulations_per_s: float
    evaluations_per_s: float
    v_resign_next: float | None
    false_positive_rate: float | None
    v_resign_used: float | None
    hashes: dict[str, str]
    seconds: float


@dataclass(frozen=True)
class Trained:
    """A training stage as the task ran it: its result, seconds and torch threads (recorded
    because the thread count changes float sums, so reproduction uses the same)."""

    result: TrainResult = field(metadata=FLAT)
    seconds: float
    threads: int


@dataclass(frozen=True)
class TrainRecord:
    """A finished training stage. hashes: DVC hash of each output of the ``train`` stage;
    window: each self-play directory trained on (project-relative) -> its DVC hash."""

    trained: Trained = field(metadata=FLAT)
    hashes: dict[str, str]
    window: dict[str, str]


@dataclass(frozen=True)
class GateRecord:
    """The gate's decision with its evidence, and the seconds it took."""

    decision: GateDecision = field(metadata=FLAT)
    seconds: float


@dataclass(frozen=True)
class AnchorRecord:
    """A match against a fixed anchor, from the network's (first player's) side.

    results: one results-store row per game (`tasks.ratings.COLUMNS`); score: the summary's.
    """

    __json_extra__: ClassVar[tuple[str, ...]] = ("score",)

    match_id: str
    summary: MatchSummary = field(metadata=FLAT)
    sgf_dir: str | None
    store: str | None
    results: tuple[dict[str, Any], ...]
    seconds: float

    @property
    def score(self) -> float:
        return self.summary.score


@dataclass(frozen=True)
class Rating:
    """One row of the run's Elo table (`tasks.ratings.ratings_table`): its rank (1 = the
    strongest) and the fit (`tabula.elo.Rating`: [low, high] the 95% interval, wins count draws
    as a half), stored flat as one object."""

    rank: int
    fit: elo.Rating = field(metadata=FLAT)


@dataclass(frozen=True)
class Elo:
    """An iteration network's Elo with its 95% interval [low, high]."""

    elo: float
    low: float
    high: float


@dataclass(frozen=True)
class EvaluationRecord:
    """A finished evaluation: the gate, the anchor matches by the anchor's player name
    ("random", "gnugo-l1"; runs recorded before issue 14 keyed them by spec), the Elo table
    fitted over every game of the run so far, the DVC hashes of the ``evaluate`` stage, this
    iteration's own Elo (None when it has no rated game), and the configured anchors it could
    not play, with why (a program not installed)."""

    gate: GateRecord
    anchors: dict[str, AnchorRecord]
    ratings: tuple[Rating, ...]
    hashes: dict[str, str]
    elo: Elo | None
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PromotionRecord:
    """The end of an iteration: promoted by the gate or not, its model version in the
    registry, and the champion's iteration afterwards."""

    promoted: bool
    version: int | str | None  # as MLflow's store gave it
    champion: int


@dataclass(frozen=True)
class Champion:
    """``champion.json``: the current best checkpoint (model: project-relative path) and its
    registered model version (None for the random network of iteration 0)."""

    iteration: int
    model: str
    version: int | str | None
