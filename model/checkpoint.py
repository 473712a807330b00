"""The checkpoint file: a network's weights with what it was made from.

Checkpoint file (``save_checkpoint`` / ``load_checkpoint``)::

    {"format": "tabula-checkpoint", "format_version": 1,
     "network": {"board_size": N, "blocks": B, "filters": F, "value_hidden": H,
                 ["aux": 1,] ["global_pooling": 1]},
     "state_dict": {name: tensor}, "metadata": {plain str/int/float/bool/None/list/dict}}

It is loaded with ``torch.load(weights_only=True)``, so a file carrying pickled objects is refused.

``metadata`` is a `CheckpointLineage` written as plain data: every path in it is
project-relative, so a clone in another folder or on another host rebuilds the same bytes.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from model.files import atomic_file
from model.network import SHAPE_KEYS, PolicyValueNet, network_args
from tabula.errors import TabulaError, first_line

CHECKPOINT_FORMAT = "tabula-checkpoint"
CHECKPOINT_FORMAT_VERSION = 1
#: A checkpoint's ``network`` entry: these ints always, these flags (as 1) only when set.


class CheckpointError(TabulaError, ValueError):
    """A checkpoint file is missing, foreign, unsafe or does not fit; the message is one line."""


@dataclass(frozen=True)
class FileRef:
    """A file a checkpoint was made from: its project-relative path and sha256."""

    path: str
    sha256: str


@dataclass(frozen=True)
class ShardRef(FileRef):
    """A shard of the training window; used: whether training drew samples from it."""

    used: bool = True


@dataclass(frozen=True)
class CheckpointLineage:
    """What a checkpoint was made from: its ``metadata``, one record for every writer.

    model_id: the model's name ("RUN/iter-NNNN" in a run).
    seed: the seed of its initialisation or of its training stage.
    global_step: optimizer steps since the run began (0: a random network).
    parent: the checkpoint training continued from (None: a random network).
    run, iteration: the pipeline run and iteration that made it (None outside a run).
    shards: the training window's shards, window: its size (positions, games, iterations,
        dropped_games), steps: this stage's optimizer steps, lr_boundaries: the rate drops in
        global steps, losses: the last logging window's means.
    config: the run's config; code_commit: the code's git commit (`tasks.versioning`);
        torch_threads, torch, lightning: what a bit-identical rebuild needs to match.
    """

    model_id: str | None
    seed: int
    global_step: int
    parent: FileRef | None = None
    run: str | None = None
    iteration: int | None = None
    shards: tuple[ShardRef, ...] = ()
    window: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None
    lr_boundaries: tuple[int, ...] = ()
    losses: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    code_commit: str | None = None
    torch_threads: int | None = None
    torch: str | None = None
    lightning: str | None = None

    def to_metadata(self) -> dict[str, Any]:
        """Plain data for the file: lists for tuples, unset optional fields left out."""
        return {
            f.name: _plain(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name in _ALWAYS or getattr(self, f.name) not in (None, (), {})
        }


_ALWAYS = ("model_id", "seed", "global_step", "parent")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _check_plain(value: Any, where: str) -> None:
    """Refuse metadata that ``torch.load(weights_only=True)`` could not read back."""
    # Exact types: a str subclass (torch.__version__ is one) saves but fails weights_only load.
    if value is None or type(value) in (str, bool, int, float):
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    if type(value) is dict:
        for k, item in value.items():
            if type(k) is not str:
                raise ValueError(f"checkpoint metadata key {where}.{k!r} is not a str")
            _check_plain(item, f"{where}.{k}")
        return
    raise ValueError(
        f"checkpoint metadata {where} has type {type(value).__name__}; "
        "use str/int/float/bool/None/list/dict"
    )


def save_checkpoint(
    path: str | os.PathLike[str], net: PolicyValueNet, metadata: CheckpointLineage | dict
) -> Path:
    """Write ``net`` and ``metadata`` to ``path`` atomically (`model.files.atomic_file`).

    ``metadata``: a `CheckpointLineage`, or plain data holding only str/int/float/bool/None/
    list/dict (ValueError otherwise). Returns the path.
    """
    if isinstance(metadata, CheckpointLineage):
        metadata = metadata.to_metadata()
    _check_plain(metadata, "metadata")
    path = Path(path)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "network": net.shape_config(),
        "state_dict": {k: v.detach().to("cpu").contiguous() for k, v in net.state_dict().items()},
        "metadata": metadata,
    }
    with atomic_file(path) as f:
        torch.save(payload, f)
    return path


def _read_payload(path: Path, map_location: str | torch.device) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file not found")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's message is many lines of advice; keep the line naming the refused global.
        lines = [ln.strip() for ln in str(e).splitlines() if "WeightsUnpickler error" in ln]
        reason = first_line(e, with_type=True)
        if lines:
            reason = lines[0].split(":", 1)[1].split(". ")[0].strip()
        raise CheckpointError(f"{path}: refused by weights_only loading ({reason})") from None
    except Exception as e:  # arbitrary bytes raise arbitrary errors in unpickling
        reason = first_line(e, with_type=True)
        raise CheckpointError(f"{path}: not a readable checkpoint ({reason})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a tabula checkpoint (no format '{CHECKPOINT_FORMAT}')")
    if payload.get("format_version") != CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format_version {payload.get('format_version')!r} is not "
            f"{CHECKPOINT_FORMAT_VERSION}"
        )
    return payload


def load_checkpoint(
    path: str | os.PathLike[str],
    expect_board_size: int | None = None,
    map_location: str | torch.device = "cpu",
) -> tuple[PolicyValueNet, dict]:
    """Read a checkpoint written by ``save_checkpoint``; returns ``(net in eval mode, metadata)``.

    Raises ``CheckpointError`` (one line naming the file) when the file is missing, is not a
    tabula checkpoint, holds pickled objects, is for another board size than
    ``expect_board_size``, or its state dict does not match the recorded network shape.
    """
    path = Path(path)
    payload = _read_payload(path, map_location)
    cfg = payload.get("network")
    if not isinstance(cfg, dict) or any(not isinstance(cfg.get(k), int) for k in SHAPE_KEYS):
        raise CheckpointError(f"{path}: checkpoint 'network' entry must give ints for {SHAPE_KEYS}")
    if expect_board_size is not None and cfg["board_size"] != expect_board_size:
        raise CheckpointError(
            f"{path}: checkpoint is for a {cfg['board_size']}x{cfg['board_size']} board, "
            f"expected {expect_board_size}x{expect_board_size}"
        )
    try:
        net = PolicyValueNet(**network_args(cfg))
    except ValueError as e:
        raise CheckpointError(f"{path}: bad network shape in checkpoint ({e})") from None
    state = payload.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: checkpoint has no state_dict")
    _check_state_dict(path, net, state)
    net.load_state_dict(state)
    net.to(map_location)
    net.eval()
    metadata = payload.get("metadata")
    return net, metadata if isinstance(metadata, dict) else {}


def _check_state_dict(path: Path, net: nn.Module, state: dict) -> None:
    """One line for the first mismatch, instead of load_state_dict's multi-line report."""
    expected = net.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: state_dict does not match the recorded network "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for name, ref in expected.items():
        got = state[name]
        if not isinstance(got, torch.Tensor) or got.shape != ref.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise CheckpointError(
                f"{path}: state_dict entry {name} has shape {shape}, "
                f"the recorded network needs {tuple(ref.shape)}"
            )
