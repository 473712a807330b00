"""The plan's stage specs (`tasks.planning.upgraded`): a plan written before the specs existed
gets them derived as its run played them when it is read, and a plan with specs is run as it
is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tabula.config import load_config
from tabula.plan import IterationPlan, RunState, derive_seed, next_iteration, stage_specs
from tasks.planning import read_plan, upgraded
from tasks.run.codec import from_json
from tasks.run.layout import RunLayout
from tests.conftest import TINY

MARKERS = Path(__file__).resolve().parent / "markers"  # a TINY run's, before specs existed


def _old_run(project: Path) -> RunLayout:
    layout = RunLayout(project, "data", "tiny")
    state = layout.marker(1, "plan").parent
    state.mkdir(parents=True)
    for name in ("plan", "selfplay", "train"):
        shutil.copy(MARKERS / f"{name}.json", state / f"{name}.json")
    return layout


def test_an_old_plan_gets_the_specs_its_run_played(tmp_path: Path) -> None:
    layout = _old_run(tmp_path)
    plan = from_json(IterationPlan, json.loads((MARKERS / "plan.json").read_text()))
    assert plan.workers == () and plan.train is None  # written before the specs
    cfg = load_config(None, TINY)
    read = read_plan(cfg, layout, 1)
    assert read is not None and read.train is not None
    workers, train = read.workers, read.train
    assert [(w.worker, w.games, w.seed) for w in workers] == [
        (w, 2, derive_seed(plan.selfplay_seed, w)) for w in (0, 1)
    ]
    assert [w.folder for w in workers] == [f"data/tiny/iter-0001/selfplay/worker-{w:02d}"
                                           for w in (0, 1)]  # fmt: skip
    assert {w.champion for w in workers} == {"data/tiny/iter-0000/model/model.pt"}
    assert (train.window, train.parent, train.seed) == (plan.window, 0, plan.train_seed)
    # The record names no schedule (written before schedules were recorded): the config's,
    # as the training stage then used; no precision either: resolved when it trains.
    unrecorded = next_iteration(cfg.training, RunState.first(cfg.pipeline.iterations))
    assert train.lr_boundaries == unrecorded.lr_boundaries
    assert train.bf16 is None and train.steps == cfg.training.steps


def test_a_plan_with_specs_is_run_as_written(tmp_path: Path) -> None:
    layout = _old_run(tmp_path)
    plan = from_json(IterationPlan, json.loads((MARKERS / "plan.json").read_text()))
    cfg = load_config(None, TINY)
    written = stage_specs(cfg, plan, "elsewhere/model.pt", lambda w: f"out/{w}", 0.5, [3], True)
    other = load_config(None, [*TINY, "selfplay.games=9"])  # the config no longer counts
    upgrade = upgraded(other, layout, written, (9,))
    workers, train = upgrade.workers, upgrade.train
    assert (workers, train) == (written.workers, written.train)
    assert workers[0].champion == "elsewhere/model.pt" and train.lr_boundaries == (3,)
