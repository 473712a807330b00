"""Budget-sized runs: ``tabula run --core-hours H`` stops at a clean iteration boundary once H
is spent, fits its rate schedule to what H is expected to pay for, counts every process of
the run across resumes, and extends with a larger budget; each iteration records the schedule
it used, so reproduction stays exact."""

from __future__ import annotations

import pytest

from flows.pipeline import run_pipeline
from tabula.config import load_config
from tabula.plan import IterationPlan
from tasks.reproduce import redo_selfplay_stage, retrain
from tasks.run.budget import read_budget, record_iteration
from tasks.run.cputime import CORE_HOUR
from tasks.run.layout import RunLayout
from tasks.run.markers import finished
from tasks.run.records import EvaluationRecord, SelfplayRecord, Stage, TrainRecord
from tests.conftest import TINY

pytestmark = pytest.mark.slow

STAGES = {"bookkeeping", "selfplay", "train", "evaluate", "ratings", "promote", "close"}


def test_a_budgeted_run_stops_at_its_budget_and_anneals_on_it(prefect_server, project, tmp_path):
    cfg = load_config(None, [*TINY, "training.lr_fractions=[0.5]", "pipeline.iterations=50",
                             "pipeline.name=budget"])  # fmt: skip
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)

    assert run_pipeline(cfg, project, core_hours=1e-6) == []  # spent by the run's start
    assert not layout.iteration(1).exists()  # nothing of iteration 1 began

    rows = run_pipeline(cfg, project, iterations=1, core_hours=1.0)
    assert [r.iteration for r in rows] == [1]
    budget = read_budget(layout)
    (first,) = budget.spent
    assert budget.core_hours == 1.0 and first.cpu_s > 0 and first.wall_s > 0
    assert set(first.stages) == STAGES and rows[0].stage_cpu_s == first.stages
    assert rows[0].learning_share is not None and 0.0 < rows[0].learning_share <= 1.0
    one = finished(layout, 1, Stage.TRAIN, TrainRecord)
    assert one is not None  # planned for the one iteration asked: annealed within it
    assert one.trained.result.lr == cfg.training.lr_values[-1]

    # What one more iteration costs a resumed process, its start and the mend of the last
    # iteration included: the first paid for the run's set-up and, on a machine whose numba
    # cache is cold, the compilation of the search, so it says nothing of the next ones.
    run_pipeline(cfg, project, iterations=2)
    warm = read_budget(layout).spent[1].cpu_s - first.cpu_s
    limit = first.cpu_s + warm + 2.5 * warm
    rows = run_pipeline(cfg, project, core_hours=limit / CORE_HOUR)  # as many as it pays for
    spent = read_budget(layout).spent
    n = len(rows)
    assert n >= 3 and [s.iteration for s in spent] == list(range(1, n + 1))
    assert spent[-2].cpu_s < limit  # the last iteration began within the budget
    assert spent[-1].cpu_s >= 0.9 * limit  # and after it the budget was spent
    assert not layout.iteration(n + 1).exists()  # stopped at the boundary
    assert all(s.cpu_s > p.cpu_s for p, s in zip(spent, spent[1:], strict=False))

    plan = finished(layout, 3, Stage.PLAN, IterationPlan)
    assert plan is not None and plan.train is not None
    boundary = plan.train.lr_boundaries[0]
    assert boundary < 0.5 * 50 * cfg.training.steps  # fitted to the budget, not the config
    last = finished(layout, n, Stage.TRAIN, TrainRecord)
    assert last is not None and last.trained.result.lr == cfg.training.lr_values[-1]  # annealed

    verdict = retrain(cfg, layout, 3, tmp_path / "rebuilt" / "model")
    assert verdict.match, verdict.differences  # the recorded schedule, replayed


def test_a_bare_start_takes_the_configs_wall_clock_and_iterations_asked_do_not(
    prefect_server, project
):
    """The quick start's budget is its config's (``pipeline.hours``): a start that names
    neither a budget nor the iterations takes it; one that names the iterations runs them."""
    cfg = load_config(None, [*TINY, "pipeline.hours=1e-9", "pipeline.name=walled"])
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    assert run_pipeline(cfg, project) == []  # spent by the run's start
    assert read_budget(layout).hours == 1e-9 and not layout.iteration(1).exists()

    # The iterations asked, and the last of them plays the anchors (here the random player
    # alone) though anchor_every says every third.
    named = [*TINY, "pipeline.hours=1e-9", "evaluation.anchor_every=3", "pipeline.name=counted"]
    rows = run_pipeline(load_config(None, named), project, iterations=2)
    assert [r.iteration for r in rows] == [1, 2]
    counted = RunLayout(project, "data", "counted")
    assert read_budget(counted).hours is None
    played = {i: finished(counted, i, Stage.EVALUATE, EvaluationRecord) for i in (1, 2)}
    assert {i: sorted(e.anchors) for i, e in played.items() if e} == {1: [], 2: ["random"]}
    assert [finished(counted, i, Stage.PLAN, IterationPlan).planned for i in (1, 2)] == [2, 2]


def test_the_iteration_the_overshoot_would_stop_plays_the_games_that_fit(
    prefect_server, project, tmp_path
):
    """``pipeline.budget_shrink``: a run whose recorded iterations cost 1,000 CPU-s each,
    with 600 left of its budget, plays its next iteration with the games 600 CPU-s pay for
    (about 0.6 of 8, 4 games: its plan records them, its self-play plays them, and the replay
    of the stage matches); with ``budget_shrink: null`` that iteration does not start."""
    sets = [*TINY, "selfplay.games=8", "pipeline.budget_overshoot=0.03", "pipeline.iterations=50"]
    cfg = load_config(None, [*sets, "pipeline.name=shrunk"])
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    run_pipeline(cfg, project, iterations=2, core_hours=1.0)
    for i in (1, 2):  # the same run as if each iteration had cost 1,000 CPU-s
        record_iteration(layout, i, 1000.0 * i, 500.0 * i, {"selfplay": 1000.0})
    limit = (2000.0 + 600.0) / CORE_HOUR
    rows = run_pipeline(cfg, project, iterations=3, core_hours=limit)
    assert [r.iteration for r in rows] == [1, 2, 3]
    plan = finished(layout, 3, Stage.PLAN, IterationPlan)
    assert plan is not None and [w.games for w in plan.workers] == [2, 2]
    played = finished(layout, 3, Stage.SELFPLAY, SelfplayRecord)
    assert played is not None and played.games == 4
    assert redo_selfplay_stage(cfg, layout, 3) == []  # replayed as it ran

    # The same spending without the shrink: the iteration does not start.
    other = RunLayout(project, "data", "whole")
    named = [*sets, "pipeline.name=whole", "pipeline.budget_shrink=null"]
    run_pipeline(load_config(None, named), project, iterations=2, core_hours=1.0)
    for i in (1, 2):
        record_iteration(other, i, 1000.0 * i, 500.0 * i, {"selfplay": 1000.0})
    rows = run_pipeline(load_config(None, named), project, core_hours=limit)
    assert [r.iteration for r in rows] == [1, 2] and not other.iteration(3).exists()
