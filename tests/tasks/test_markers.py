"""Stage records: markers read back as their types, old markers still load, one resume path,
and the test-only kill points."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path

import pytest

from tabula.config import load_config
from tabula.gating import GateDecision
from tabula.plan import IterationPlan, plan_iteration
from tasks.run.codec import FLAT, RecordError, from_json, to_json
from tasks.run.faults import KILL_AT, kill_point
from tasks.run.layout import RunLayout
from tasks.run.markers import finished, read_record, resumable
from tasks.run.records import (
    AnchorRecord,
    Champion,
    EvaluationRecord,
    InitRecord,
    PromotionRecord,
    SelfplayRecord,
    Stage,
    TrainRecord,
    WorkerRecord,
)
from tests.conftest import TINY

#: Markers written by a two-worker TINY run before there were typed records (``git show
#: 2492817``): a run started then must still resume.
MARKERS = Path(__file__).parent / "markers"
RECORDS = {
    "init": InitRecord,
    "plan": IterationPlan,
    "selfplay-w00": WorkerRecord,
    "selfplay-w01": WorkerRecord,
    "selfplay": SelfplayRecord,
    "train": TrainRecord,
    "evaluate": EvaluationRecord,
    "promote": PromotionRecord,
    "champion": Champion,
}
#: Worker rates: written from the worker's own seconds, which the marker does not keep.
RATES = {"positions_per_s", "simulations_per_s", "evaluations_per_s"}


def _walk(data: object, prefix: str = "") -> dict[str, object]:
    """Every key path of nested JSON objects -> its value."""
    out: dict[str, object] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out[prefix + k] = v
            out.update(_walk(v, f"{prefix}{k}."))
    return out


def _prune(new: object, old: object) -> object:
    """``new`` without the keys ``old`` lacks, at every depth."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: _prune(v, old[k]) for k, v in new.items() if k in old}
    return new


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN equals NaN


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_marker_of_the_old_format_loads_as_its_record_and_writes_back_the_same(name):
    data = json.loads((MARKERS / f"{name}.json").read_text())
    record = from_json(RECORDS[name], data)
    assert isinstance(record, RECORDS[name])
    again = to_json(record)
    # Fields added since (with GnuGo anchors: anchor margins, skipped anchors; with the laptop
    # preset: the rate schedule and precision a training stage used) come back at their defaults,
    # which say "not recorded"; everything the old marker held comes back as it was.
    added = {k: v for k, v in _walk(again).items() if k not in _walk(data)}
    assert all(v in (None, 0, {}, []) for v in added.values()), added
    again = _prune(again, data)
    assert set(again) == set(data)
    skip = RATES if name.startswith("selfplay-w") else set()
    assert _same(
        {k: v for k, v in again.items() if k not in skip},
        {k: v for k, v in data.items() if k not in skip},
    )


def test_records_read_back_as_typed_values():
    train = from_json(TrainRecord, json.loads((MARKERS / "train.json").read_text()))
    assert isinstance(train.trained.result.model, Path)
    assert train.trained.result.global_step == 4 and train.trained.threads == 2
    evaluation = from_json(EvaluationRecord, json.loads((MARKERS / "evaluate.json").read_text()))
    assert isinstance(evaluation.gate.decision, GateDecision)
    assert evaluation.gate.decision.win_rate == 0.5 and evaluation.elo is not None
    assert evaluation.anchors["random"].score == 0.0
    assert isinstance(evaluation.anchors["random"], AnchorRecord)
    assert [r.fit.player for r in evaluation.ratings][:1] == ["random"]
    worker = from_json(WorkerRecord, json.loads((MARKERS / "selfplay-w00.json").read_text()))
    assert worker.worker.shards[0].suffix == ".parquet" and worker.pid == 7982
    assert worker.worker.seconds == worker.seconds  # the marker keeps the task's seconds only
    plan = from_json(IterationPlan, json.loads((MARKERS / "plan.json").read_text()))
    assert plan.window == ("data/tiny/iter-0001/selfplay",)
    with pytest.raises(FrozenInstanceError):
        plan.best = 3  # type: ignore[misc]


def test_a_missing_renamed_or_mistyped_key_is_an_error_never_none():
    data = json.loads((MARKERS / "promote.json").read_text())
    with pytest.raises(RecordError, match="missing 'promoted'"):
        from_json(PromotionRecord, {k: v for k, v in data.items() if k != "promoted"})
    with pytest.raises(RecordError, match="unknown keys"):
        from_json(PromotionRecord, {**data, "champion_iteration": 1})
    with pytest.raises(RecordError, match="expected int"):
        from_json(PromotionRecord, {**data, "champion": "one"})
    with pytest.raises(RecordError, match="expected 2 items"):
        from_json(GateDecision, {**to_json(_decision()), "llr_bounds": [1.0]})


def _decision() -> GateDecision:
    return GateDecision(True, "sprt-accept-h1", 9, 1, 0, 10, 0.9, 0.6, 0.98, 3.1, (-2.9, 2.9))


@dataclass(frozen=True)
class Inner:
    a: int
    seconds: float


@dataclass(frozen=True)
class Outer:
    inner: Inner = field(metadata=FLAT)
    seconds: float = 0.0


def test_flat_fields_sit_beside_the_record_and_the_outer_key_wins():
    assert to_json(Outer(Inner(1, 2.0), 5.0)) == {"a": 1, "seconds": 5.0}
    assert from_json(Outer, {"a": 1, "seconds": 5}) == Outer(Inner(1, 5.0), 5.0)
    decision = _decision()
    assert from_json(GateDecision, json.loads(json.dumps(to_json(decision)))) == decision


def test_resumable_runs_once_then_returns_the_stored_record(tmp_path):
    layout = RunLayout(tmp_path, "data", "r")
    calls = []

    @resumable(Stage.PROMOTE, PromotionRecord)
    def promote(layout: RunLayout, iteration: int, promoted: bool) -> PromotionRecord:
        calls.append(iteration)
        return PromotionRecord(promoted, "3" if promoted else None, iteration)

    assert finished(layout, 2, Stage.PROMOTE, PromotionRecord) is None
    first = promote(layout, 2, True)
    assert promote(layout, 2, False) == first and calls == [2]  # found, not rerun
    assert json.loads(layout.marker(2, "promote").read_text()) == {
        "promoted": True,
        "version": "3",
        "champion": 2,
    }
    assert finished(layout, 2, Stage.PROMOTE, PromotionRecord) == first
    assert read_record(layout.marker(3, "promote"), PromotionRecord) is None


def test_a_self_play_worker_has_its_own_marker(tmp_path):
    layout = RunLayout(tmp_path, "data", "r")

    @resumable(Stage.SELFPLAY, InitRecord)
    def worker(layout: RunLayout, iteration: int, worker: int) -> InitRecord:
        return InitRecord(f"w{worker}", "x")

    worker(layout, 1, 3)
    assert layout.marker(1, "selfplay-w03").exists()
    assert Stage.SELFPLAY.marker_name(3) == "selfplay-w03"
    assert Stage.INIT.marker_name() == "init" and f"{Stage.TRAIN}" == "train"


def test_kill_point_does_nothing_unless_the_variable_names_it(monkeypatch):
    monkeypatch.delenv(KILL_AT, raising=False)
    kill_point("train")
    monkeypatch.setenv(KILL_AT, "evaluate")
    kill_point("train")  # another point: alive


def test_kill_point_kills_the_process_at_the_nth_visit(tmp_path):
    code = (
        "import sys\n"
        "from tasks.run.faults import kill_point\n"
        "for k in range(1, 6):\n"
        "    kill_point('selfplay')\n"
        "    print(k, flush=True)\n"
    )
    root = Path(__file__).parents[2]
    env = {**os.environ, KILL_AT: "selfplay:3"}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True)
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == [b"1", b"2"]  # died on the third visit, before its print
    env[KILL_AT] = "train"
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True)
    assert done.returncode == 0 and len(done.stdout.split()) == 5


def test_the_plan_of_the_old_run_is_planned_again_the_same():
    recorded = from_json(IterationPlan, json.loads((MARKERS / "plan.json").read_text()))
    cfg = load_config(None, TINY)
    assert plan_iteration(cfg, 1, 0, lambda j: f"data/tiny/iter-{j:04d}/selfplay") == recorded


def test_nan_survives_a_marker():
    data = json.loads((MARKERS / "selfplay.json").read_text())
    record = from_json(SelfplayRecord, data)
    assert record.false_positive_rate is not None and math.isnan(record.false_positive_rate)


def test_a_marker_that_is_not_json_is_a_one_line_record_error(tmp_path: Path) -> None:
    marker = tmp_path / "state" / "train.json"
    marker.parent.mkdir()
    marker.write_text('{"trained": ')  # cut short, e.g. by hand
    with pytest.raises(RecordError, match="train.json: not JSON") as info:
        read_record(marker, TrainRecord)
    assert "\n" not in str(info.value)
