"""The stage inputs are written once, in the plan, and both the flow and reproduction run them:
a change to how an iteration is split among self-play workers made in one place
(`tabula.plan.worker_games`) changes what the flow plays and what the replay replays alike, and
a replay never derives the split a second time."""

from __future__ import annotations

import pytest

import tabula.plan
from flows.pipeline import run_pipeline
from tabula.plan import IterationPlan
from tasks.reproduce import redo_selfplay_stage, retrain
from tasks.run.layout import RunLayout
from tasks.run.markers import finished
from tasks.run.records import Stage, WorkerRecord

pytestmark = pytest.mark.slow


def lopsided(total: int, workers: int) -> list[int]:
    """All games but one per other worker to worker 0 (the default shares them evenly)."""
    return [total - (workers - 1), *([1] * (workers - 1))]


def test_one_fan_out_for_the_flow_and_the_replay(
    prefect_server, tiny_config, project, tmp_path, monkeypatch
):
    monkeypatch.setattr(tabula.plan, "worker_games", lopsided)
    run_pipeline(tiny_config, project, iterations=1)
    layout = RunLayout(project.resolve(), tiny_config.pipeline.data_dir, tiny_config.pipeline.name)
    plan = finished(layout, 1, Stage.PLAN, IterationPlan)
    assert plan is not None and plan.train is not None
    assert [spec.games for spec in plan.workers] == [3, 1]  # TINY: 4 games, 2 workers
    played = [finished(layout, 1, Stage.SELFPLAY, WorkerRecord, worker=w) for w in (0, 1)]
    assert [r.worker.games for r in played if r is not None] == [3, 1]
    assert all(spec.folder == layout.rel(layout.worker(1, spec.worker)) for spec in plan.workers)
    assert all(not spec.champion.startswith("/") for spec in plan.workers)  # project-relative

    assert redo_selfplay_stage(tiny_config, layout, 1) == []  # the same split, replayed
    monkeypatch.undo()  # the even split is back: the replay still follows the plan
    assert tabula.plan.worker_games(4, 2) == [2, 2]
    assert redo_selfplay_stage(tiny_config, layout, 1) == []
    verdict = retrain(tiny_config, layout, 1, tmp_path / "rebuilt" / "model")
    assert verdict.match, verdict.differences
