"""The checkpoint file: a network's weights with what it was made from.

Checkpoint file (``save_checkpoint`` / ``load_checkpoint``; ``network`` is the net's
`model.network.NetworkShape`)::

    {"format": "tabula-checkpoint", "format_version": 1,
     "network": {"board_size": N, "blocks": B, "filters": F, "value_hidden": H,
                 ["aux": 1,] ["global_pooling": 1,] ["liberties": 1,] ["ladders": 1]},
     "state_dict": {name: tensor}, "metadata": {plain str/int/float/bool/None/list/dict}}

It is loaded with ``torch.load(weights_only=True)``, so a file carrying pickled objects is refused.

``metadata`` is a `CheckpointLineage` written as plain data: every path in it is
project-relative, so a clone in another folder or on another host rebuilds the same bytes.

``read_initial`` reads what a training stage starts from: such a file, or the Lightning
``.ckpt`` a previous stage saved (its ``hyper_parameters`` hold the network's shape, flat, as
`model.system.AlphaZeroSystem` saves them, in files of every version).
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
from model.network import NetworkShape, PolicyValueNet, deepened
from tabula.errors import TabulaError, first_line

CHECKPOINT_FORMAT = "tabula-checkpoint"
CHECKPOINT_FORMAT_VERSION = 1
#: The prefix of the network's weights in a Lightning checkpoint (`AlphaZeroSystem.net`).
LIGHTNING_NET = "net."


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
        "network": net.shape.to_entry(),
        "state_dict": {k: v.detach().to("cpu").contiguous() for k, v in net.state_dict().items()},
        "metadata": metadata,
    }
    with atomic_file(path) as f:
        torch.save(payload, f)
    return path


def _load(path: Path, map_location: str | torch.device) -> Any:
    """The unpickled file (tensors and plain values only), or one line saying why not."""
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file not found")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
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


def _is_tabula(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("format") == CHECKPOINT_FORMAT


def _read_payload(path: Path, map_location: str | torch.device) -> dict:
    payload = _load(path, map_location)
    if not _is_tabula(payload):
        raise CheckpointError(f"{path}: not a tabula checkpoint (no format '{CHECKPOINT_FORMAT}')")
    _check_version(path, payload)
    return payload


def _check_version(path: Path, payload: dict) -> None:
    if payload.get("format_version") != CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format_version {payload.get('format_version')!r} is not "
            f"{CHECKPOINT_FORMAT_VERSION}"
        )


def _shape(path: Path, entry: Any) -> NetworkShape:
    try:
        return NetworkShape.from_entry(entry if isinstance(entry, dict) else {})
    except ValueError as e:
        raise CheckpointError(f"{path}: bad network shape in checkpoint ({e})") from None


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
    shape = _shape(path, payload.get("network"))
    if expect_board_size is not None and shape.board_size != expect_board_size:
        raise CheckpointError(
            f"{path}: checkpoint is for a {shape.board_size}x{shape.board_size} board, "
            f"expected {expect_board_size}x{expect_board_size}"
        )
    net = _loaded(path, shape, payload.get("state_dict"))
    net.to(map_location)
    net.eval()
    metadata = payload.get("metadata")
    return net, metadata if isinstance(metadata, dict) else {}


def _loaded(path: Path, shape: NetworkShape, state: Any) -> PolicyValueNet:
    """A network of ``shape`` holding ``state``, or one line naming the first mismatch."""
    net = PolicyValueNet(shape)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: checkpoint has no state_dict")
    _check_state_dict(path, net, state)
    net.load_state_dict(state)
    return net


@dataclass(frozen=True)
class InitialNetwork:
    """What a training stage starts from (`read_initial`).

    net: the network with the file's weights (train mode, on the CPU).
    step_offset: the run's optimizer steps before the trainer's own global step counts: an
        exported model's recorded ``global_step``; a Lightning checkpoint's own offset (its
        trainer restores the global step from the file).
    resume_epochs: for a Lightning checkpoint, the epochs its trainer finished (the trainer
        resumes its weights, momentum buffers and loop state from the file and runs one more);
        None for an exported model, whose weights alone carry on (its lineage's
        ``global_step`` is the step offset), and for a network that grows (`read_initial`).
    """

    net: PolicyValueNet
    step_offset: int
    resume_epochs: int | None


def read_initial(
    path: str | os.PathLike[str], shape: NetworkShape, seed: int = 0
) -> InitialNetwork:
    """Read the checkpoint a training stage of a ``shape`` network starts from: a Lightning
    ``.ckpt`` or an exported model (``save_checkpoint``). A checkpoint of the same network
    with fewer residual blocks is deepened to ``shape`` (`model.network.deepened`, its new
    blocks' weights from ``seed``): the stage then starts a new trainer at the run's step (the
    momentum buffers, made for the smaller network, are left behind).

    Raises ``CheckpointError`` (one line naming the file) when it is missing or unreadable,
    neither kind, or records another shape than ``shape`` (or a smaller one of it).
    """
    path = Path(path)
    payload = _load(path, "cpu")
    if isinstance(payload, dict) and "pytorch-lightning_version" in payload:
        hparams = payload.get("hyper_parameters") or {}
        weights = payload.get("state_dict") or {}
        state = {k.removeprefix(LIGHTNING_NET): v for k, v in weights.items()}
        offset, epochs = int(hparams.get("step_offset", 0)), payload.get("epoch", 0)
        done = offset + int(payload.get("global_step") or 0)  # the run's steps at its end
    elif _is_tabula(payload):
        _check_version(path, payload)
        hparams, state = payload.get("network"), payload.get("state_dict")
        metadata = payload.get("metadata") if isinstance(payload.get("metadata"), dict) else {}
        offset, epochs = int(metadata.get("global_step") or 0), None
        done = offset
    else:
        raise CheckpointError(f"{path}: neither a Lightning .ckpt nor a tabula model checkpoint")
    got = _shape(path, hparams)
    if got != shape and not shape.grows_from(got):
        raise CheckpointError(
            f"{path}: network {got.to_dict()} does not match the config's {shape.to_dict()}"
        )
    net = _loaded(path, got, state)
    if got != shape:  # (a network that grows)
        return InitialNetwork(deepened(net, shape.blocks, seed), done, None)
    return InitialNetwork(net, offset, None if epochs is None else int(epochs))


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
