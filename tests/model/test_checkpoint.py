"""Checkpoint files: round trip, and one-line refusals of everything that is not ours."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from model.network import NetworkShape, make_network, seeded_network, weights_sha256

META = {
    "parent": None,
    "seed": 7,
    "lr": 0.01,
    "window": ["a1b2", "c3d4"],
    "ok": True,
    "params": {"network": {"blocks": 2}},
}


class Payload:
    """A custom class: pickling it makes a file weights_only must refuse."""

    def __init__(self) -> None:
        self.x = 1


def _refusal(path: Path, **kw: object) -> str:
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, **kw)  # type: ignore[arg-type]
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    return msg


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"aux": True, "global_pooling": True},
        {"liberties": True},
        {"liberties": True, "ladders": True},
    ],
)
def test_round_trip_is_bit_identical(tmp_path: Path, options: dict[str, bool]) -> None:
    net = seeded_network(NetworkShape(9, 2, 8, 16, **options), seed=3)
    net.stem[1].running_var.mul_(2.0)
    path = save_checkpoint(tmp_path / "ckpt" / "c.pt", net, META)
    loaded, meta = load_checkpoint(path, expect_board_size=9)
    assert weights_sha256(loaded) == weights_sha256(net)
    assert meta == META
    assert loaded.shape == net.shape
    assert not loaded.training
    raw = torch.load(path, weights_only=True)  # loadable by plain torch, no code of ours
    assert raw["format"] == "tabula-checkpoint" and raw["format_version"] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["c.pt"]  # no temp file left


def test_overwrite_is_atomic_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, make_network(5, 1, 4, seed=0), {})
    net = make_network(5, 1, 4, seed=1)
    save_checkpoint(path, net, {"v": 2})
    assert weights_sha256(load_checkpoint(path)[0]) == weights_sha256(net)
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_metadata_must_be_plain(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"metadata\.when"):
        save_checkpoint(tmp_path / "c.pt", make_network(5, 1, 4, seed=0), {"when": Path(".")})
    assert list(tmp_path.iterdir()) == []


def test_missing_file(tmp_path: Path) -> None:
    assert "not found" in _refusal(tmp_path / "nope.pt")


def test_wrong_board_size(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "c.pt", make_network(9, 1, 4, seed=0), {})
    assert "9x9 board, expected 13x13" in _refusal(path, expect_board_size=13)


def test_state_dict_not_matching_recorded_shape(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "c.pt", make_network(9, 1, 4, seed=0), {})
    payload = torch.load(path, weights_only=True)
    payload["network"]["filters"] = 8
    torch.save(payload, path)
    assert "shape" in _refusal(path)
    payload["network"]["filters"] = 4
    payload["network"]["blocks"] = 2
    torch.save(payload, path)
    assert "missing" in _refusal(path)


def test_not_a_tabula_checkpoint(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    torch.save(make_network(5, 1, 4, seed=0).state_dict(), plain)
    assert "not a tabula checkpoint" in _refusal(plain)
    text = tmp_path / "notes.pt"
    text.write_text("hello\n")
    assert "not a readable checkpoint" in _refusal(text)
    newer = tmp_path / "newer.pt"
    torch.save({"format": "tabula-checkpoint", "format_version": 99}, newer)
    assert "format_version 99" in _refusal(newer)


def test_pickle_payload_refused(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "c.pt", make_network(5, 1, 4, seed=0), {})
    payload = torch.load(path, weights_only=True)
    payload["metadata"] = {"evil": Payload()}
    torch.save(payload, path)  # plain torch.save pickles the object
    assert "weights_only" in _refusal(path)
