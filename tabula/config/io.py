"""Reading and writing `Config`: YAML files, ``KEY=VALUE`` overrides, one-line errors.

Builds on `tabula.config.models` (imports point one way: models <- io); the package
`tabula.config` re-exports the public names of both, so callers import from `tabula.config`.
Every failure is a `ConfigError` whose message is one line naming the source, the key path and
what is allowed, e.g. ``params.yaml: search.simulations: must be >= 1 (got 0)``.
This module reads one file (the YAML it is given) and does nothing at import time.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from tabula.config import legacy
from tabula.config.models import NAME_PATTERN, Config, without_password
from tabula.errors import TabulaError, UsageError

__all__ = [
    "ConfigError",
    "Scalar",
    "apply_overrides",
    "config_to_flat_dict",
    "dump_config",
    "load_config",
    "parse_config",
    "run_name",
]

Scalar = str | int | float | bool | None


class ConfigError(TabulaError, ValueError):
    """A bad config file, value or override; ``str(e)`` is one line naming the key."""


# --- YAML ------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads YAML 1.2 floats ("1e-4" is a float) and rejects duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key if isinstance(key, str | int | float | bool) else id(key))
        return super().construct_mapping(node, deep)


class _Dumper(yaml.SafeDumper):
    """SafeDumper writing lists inline ("lr_values: [0.01, 0.001]") and mappings as blocks."""

    def represent_list(self, data: Any) -> yaml.SequenceNode:
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(list, _Dumper.represent_list)

# PyYAML follows YAML 1.1, where a float needs a dot; YAML 1.2 also takes 1e-4.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _read_yaml(text: str, label: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(_one_line(f"{label}: {where}YAML syntax error: {e.problem}")) from None
    except yaml.YAMLError as e:
        raise ConfigError(_one_line(f"{label}: YAML syntax error: {e}")) from None


# --- overrides ---------------------------------------------------------------------------------


def _shown(override: str) -> str:
    """An override as an error message may show it: a URI's password as ``***``."""
    key, sep, value = override.partition("=")
    return f"{key}{sep}{without_password(value.strip())}"


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _model_at(path: Sequence[Any]) -> type[BaseModel] | None:
    """The model class at a key path from Config, or None if the path is not a section."""
    model: type[BaseModel] = Config
    for part in path:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _allowed(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _parse_override(raw: str) -> tuple[tuple[str, ...], Any]:
    """Split "a.b=VALUE" into a checked key path and the value parsed as YAML."""
    if "=" not in raw:
        raise ConfigError(f"override {raw!r}: expected KEY=VALUE, e.g. search.simulations=200")
    key, text = (s.strip() for s in raw.split("=", 1))
    parts = tuple(key.split("."))
    if not all(parts):
        raise ConfigError(f"override {raw!r}: empty key part in {key!r}")
    annotation: Any = Config
    for i, part in enumerate(parts):
        model = _model_at(parts[:i])
        if model is None:
            raise ConfigError(f"override {raw!r}: {'.'.join(parts[:i])} is a value, not a section")
        if part not in model.model_fields:
            raise ConfigError(
                f"override {raw!r}: unknown key {'.'.join(parts[: i + 1])} "
                f"(allowed: {_allowed(model)})"
            )
        annotation = model.model_fields[part].annotation
    if not text:
        raise ConfigError(f"override {raw!r}: empty value (write null for None, '' for empty)")
    value = _read_yaml(text, f"override {raw!r}")
    # A string field takes the text as written, so name=2024 or name=0123 stay strings.
    if annotation in (str, str | None) and not isinstance(value, str | dict | list | None):
        value = text
    return parts, value


#: An override of the key implies the setting, unless an override sets that too: step
#: boundaries mean the step schedule, fractions the run schedule.
IMPLIED: dict[tuple[str, ...], tuple[tuple[str, ...], str]] = {
    ("training", "lr_boundaries"): (("training", "lr_schedule"), "steps"),
    ("training", "lr_fractions"): (("training", "lr_schedule"), "run"),
}


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a deep copy of `data` with each "section.key=VALUE" set, in order.

    VALUE is parsed as a YAML scalar or flow collection: "200", "null", "true", "[1, 2]".
    Keys are checked against the Config schema (not against `data`, which may be partial).
    A key of ``IMPLIED`` also sets what it implies, unless another override sets that.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    out = copy.deepcopy(data)
    parsed = [(raw, *_parse_override(raw)) for raw in overrides]
    given = {parts for _, parts, _ in parsed}
    for raw, parts, value in parsed:
        _set(out, raw, parts, value)
        implied = IMPLIED.get(parts)
        if implied is not None and implied[0] not in given:
            _set(out, raw, *implied)
    return out


def _set(out: dict[str, Any], raw: str, parts: tuple[str, ...], value: Any) -> None:
    node = out
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ConfigError(f"override {raw!r}: {where} is not a mapping in the config")
        node = child
    node[parts[-1]] = value


# --- validation errors as one line ------------------------------------------------------------

_TYPE_MESSAGES = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "model_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "finite_number": "must be a finite number",
    "string_too_short": "must not be empty",
    "missing": "required key is missing",
}
_BOUNDS = {  # pydantic error type -> (operator, ctx key)
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


_NAME_RULE = "must be letters, digits, '.', '_' or '-', starting with a letter or digit"


def run_name(name: str) -> str:
    """``name`` when it is a plain run name, by the rule ``pipeline.name`` follows (letters,
    digits, '.', '_' or '-', starting with a letter or digit: never a path such as ``../x``
    or ``/etc``), else a one-line `UsageError` naming it. For a run named on the command
    line, before anything reads or makes ``data_dir/RUN``."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise UsageError(f"run name {name!r}: {_NAME_RULE}")
    return name


def _describe(error: Any) -> str:
    """One pydantic error as 'must be ... (got X)' or 'unknown key (allowed: ...)'."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        model = _model_at(error["loc"][:-1])
        return f"unknown key (allowed: {_allowed(model)})" if model else "unknown key"
    if kind in _BOUNDS:
        op, bound = _BOUNDS[kind]
        text = f"must be {op} {ctx[bound]}"
    elif kind == "literal_error":
        text = f"must be one of {ctx['expected']}"
    elif kind == "string_pattern_mismatch":
        text = _NAME_RULE
    elif kind == "value_error":
        text = str(ctx.get("error", error["msg"]))
        if "(got" in text:
            return text
    else:
        text = _TYPE_MESSAGES.get(kind, error["msg"])
    if kind == "missing":
        return text
    got = repr(error["input"])
    return f"{text} (got {got if len(got) <= 60 else got[:57] + '...'})"


def _validate(data: Any, label: str, overrides: Sequence[str]) -> Config:
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(
            f"{label}: top level must be a mapping of sections ({_allowed(Config)}), got {got}"
        )
    newer = legacy.newer_format(data)
    if newer is not None:  # its fields are not ours to know: say why before any of them
        raise ConfigError(
            f"{label}: pipeline.config_version: written by a newer tabula: this one reads "
            f"formats up to {legacy.CONFIG_VERSION} (got {newer})"
        )
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        first = errors[0]
        loc = tuple(first["loc"])
        for raw in overrides:  # blame the override when it set (part of) the bad key
            parts = tuple(raw.split("=", 1)[0].strip().split("."))
            if loc[: len(parts)] == parts or parts[: len(loc)] == loc:
                label = f"{label} (override {_shown(raw)})"
                break
        key = ".".join(str(p) for p in loc) or "(top level)"
        more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
        raise ConfigError(_one_line(f"{label}: {key}: {_describe(first)}{more}")) from None


# --- public entry points -----------------------------------------------------------------------


def parse_config(text: str, source: str = "<string>", overrides: Sequence[str] = ()) -> Config:
    """Config from YAML text; `source` names it in error messages."""
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    data = _read_yaml(text, source)
    if isinstance(data, dict):
        data = apply_overrides(data, overrides)
    return _validate(data, source, overrides)


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Load a YAML config file (None = the embedded quick-start default), apply overrides.

    Raises ConfigError (one line) for a missing or unreadable file, bad YAML, an unknown key,
    a wrong type or out-of-range value, or a bad override.
    """
    if path is None:
        overrides = [overrides] if isinstance(overrides, str) else list(overrides)
        data = apply_overrides(Config().model_dump(), overrides)
        return _validate(data, "<default>", overrides)
    label = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{label}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{label}: is a directory, expected a YAML file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(_one_line(f"{label}: cannot read: {e.strerror or e}")) from None
    return parse_config(text, label, overrides)


def config_to_flat_dict(cfg: Config) -> dict[str, Scalar]:
    """{"search.simulations": 200, ...}: one scalar per field, lists as JSON text (for MLflow).

    Pass ``cfg.resolve()`` to record the board-scaled values instead of None.
    """
    flat: dict[str, Scalar] = {}
    for section, model in cfg:
        for key, value in model:
            flat[f"{section}.{key}"] = json.dumps(value) if isinstance(value, list) else value
    return flat


def dump_config(cfg: Config) -> str:
    """The config as YAML text (block sections, flow lists) that `parse_config` reads back equal."""
    return yaml.dump(cfg.model_dump(), Dumper=_Dumper, sort_keys=False, default_flow_style=False)
