"""The champion's weights: ``champion.json`` records their sha256 when a model is crowned, and
`check_model` refuses a checkpoint holding other weights than recorded, in one line naming the
file and the DVC command that restores it. A ``champion.json`` written before the hash was
recorded still reads, and its champion is checked against its stage's marker instead."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from model.checkpoint import save_checkpoint
from model.network import make_network, weights_sha256
from tasks.promote import ModelChangedError, check_model, recorded_weights, set_champion
from tasks.run.layout import RunLayout
from tasks.run.markers import champion, write_record
from tasks.run.records import InitRecord

#: ``champion.json`` of a run begun before the champion's weights were recorded.
OLD_CHAMPION = Path(__file__).parent / "markers" / "champion.json"


def _network(seed: int):
    return make_network(5, blocks=1, filters=8, seed=seed, value_hidden=16)


@pytest.fixture
def layout(tmp_path: Path) -> RunLayout:
    """A run with its random network (iteration 0) and that network's ``init`` marker."""
    layout = RunLayout(tmp_path, "data", "tiny")
    net = _network(0)
    save_checkpoint(layout.model(0), net, {"model_id": "tiny/iter-0000"})
    write_record(
        layout.marker(0, "init"), InitRecord(layout.rel(layout.model(0)), weights_sha256(net))
    )
    return layout


def _swap(layout: RunLayout, i: int) -> None:
    """Replace iteration ``i``'s checkpoint with another valid network."""
    save_checkpoint(layout.model(i), _network(1), {"model_id": f"tiny/iter-{i:04d}"})


def test_the_crowned_weights_are_recorded_and_checked(layout: RunLayout) -> None:
    recorded = weights_sha256(_network(0))
    set_champion.fn(layout, 0, None, recorded)
    assert json.loads(layout.champion.read_text())["weights_sha256"] == recorded
    crowned = champion(layout)
    assert crowned is not None and crowned.weights_sha256 == recorded
    check_model.fn(layout, 0)  # the file holds them: nothing to say

    _swap(layout, 0)
    with pytest.raises(ModelChangedError) as refused:
        check_model.fn(layout, 0)
    assert str(refused.value).startswith("data/tiny/iter-0000/model/model.pt: the weights are ")
    assert "`dvc checkout data/tiny/iter-0000/dvc.yaml:init`" in str(refused.value)
    assert len(str(refused.value).splitlines()) == 1


def test_champion_json_is_what_is_checked_when_it_holds_a_hash(layout: RunLayout) -> None:
    other = weights_sha256(_network(1))
    set_champion.fn(layout, 0, None, other)  # the marker says network 0, champion.json 1
    assert recorded_weights(layout, 0) == other
    with pytest.raises(ModelChangedError):
        check_model.fn(layout, 0)


def test_an_old_champion_file_reads_and_its_champion_is_checked_by_its_marker(
    layout: RunLayout,
) -> None:
    shutil.copy(OLD_CHAMPION, layout.champion)  # {"iteration": 0, "model": ..., "version": null}
    crowned = champion(layout)
    assert crowned is not None and crowned.iteration == 0 and crowned.weights_sha256 is None
    assert recorded_weights(layout, 0) == weights_sha256(_network(0))  # the init marker's
    check_model.fn(layout, 0)

    _swap(layout, 0)
    with pytest.raises(ModelChangedError, match="iter-0000/model/model.pt"):
        check_model.fn(layout, 0)


def test_a_champion_nothing_recorded_is_not_checked(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "data", "tiny")
    _swap(layout, 3)  # no champion.json names it, no train marker: nothing to compare with
    assert recorded_weights(layout, 3) is None
    check_model.fn(layout, 3)
