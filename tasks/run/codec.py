"""The JSON codec of the run's records: ``to_json`` and ``from_json``.

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
import functools
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from tabula.errors import TabulaError

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


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """``cls``'s resolved field types: resolving them costs more than decoding a record, and a
    run reads thousands of records (a record class never changes while a process runs)."""
    return typing.get_type_hints(cls)


@functools.cache
def _known_keys(cls: type) -> frozenset[str]:
    keys = set(getattr(cls, "__json_extra__", ()))
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        keys |= _known_keys(hints[f.name]) if f.metadata.get("flat") else {f.name}
    return frozenset(keys)


def _decode_record(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    unknown = set(data) - _known_keys(cls)
    if unknown:
        raise RecordError(f"{where}: unknown keys {sorted(unknown)}")
    hints = _hints(cls)
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
