"""A run's budget (`tasks.run.budget`, `tabula.plan.next_iteration`): what is spent, when it
is spent, and how many iterations it is expected to pay for, which the rate schedule is fitted
to."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tabula.config import load_config
from tabula.plan import RunState, Spend, next_iteration, plays_anchors, spent_fraction
from tasks.run.budget import read_budget, record_iteration, set_limits
from tasks.run.cputime import Laps, Mark, Meter, process_tree_cpu_seconds, stage_metrics
from tasks.run.layout import RunLayout
from tasks.run.records import Budget, Spent

TRAINING = load_config(None).training


def _spent(*cpu: float) -> tuple[Spend, ...]:
    """Cumulative records for iterations 1.. that cost ``cpu`` each (wall: half of it)."""
    total, out = 0.0, []
    for i, c in enumerate(cpu, start=1):
        total += c
        out.append(Spend(i, total, total / 2))
    return tuple(out)


def planned_iterations(
    core_hours: float | None, hours: float | None, spent: tuple[Spend, ...], done: int, prior: int
) -> int:
    """The iterations `next_iteration` plans for when iteration ``done + 1`` starts in a run
    asked for none (``prior``: the config's), with these limits and spending."""
    state = RunState(done + 1, None, prior, core_hours, hours, spent=spent, started=True)
    return next_iteration(TRAINING, state).iterations


def test_without_a_limit_the_plan_is_the_prior_and_nothing_is_ever_spent():
    assert planned_iterations(None, None, _spent(10, 10), 2, 7) == 7
    assert spent_fraction(None, None, 1e9, 1e9) == 0.0


def test_before_any_iteration_the_prior_plans_the_run():
    assert planned_iterations(1.0, None, (), 0, 100) == 100


def test_what_is_left_over_the_recent_mean_cost():
    # one core-hour, 600 CPU-s an iteration: 2 done (1200), 2400 left -> 4 more
    assert planned_iterations(1.0, None, _spent(600, 600), 2, 100) == 6
    # recent costs weigh: the last 5 iterations' mean (100 each), not the first one's 1000
    spent = _spent(1000, 100, 100, 100, 100, 100)
    assert planned_iterations(1.0, None, spent, 6, 100) == 6 + 21  # (3600-1500)/100
    # the wall budget binds when it is the tighter: half an hour, 300 s of wall an iteration
    assert planned_iterations(10.0, 0.5, _spent(600, 600), 2, 100) == 6
    # the first iteration, which paid for the run's start, is left out once another finished
    assert planned_iterations(1.0, None, _spent(1000, 100), 2, 100) == 2 + 25  # (3600-1100)/100


def test_a_spent_budget_plans_one_more_iteration_at_least():
    assert planned_iterations(0.1, None, _spent(600, 600), 2, 100) == 3


def test_a_spent_budget_stops_a_new_iteration_but_not_a_begun_one():
    state = RunState(3, None, 100, 1.0, None, cpu_s=3600.0, spent=_spent(1800, 1800))
    assert not next_iteration(TRAINING, state).go
    assert next_iteration(TRAINING, replace(state, started=True)).go
    assert next_iteration(TRAINING, replace(state, cpu_s=3599.0)).go
    asked = RunState(4, 3, 100)  # the iterations asked for are done
    assert not next_iteration(TRAINING, asked).go
    assert next_iteration(TRAINING, replace(asked, iteration=3)).go


@pytest.mark.parametrize(
    ("budget", "cpu", "wall", "fraction"),
    [
        (Budget(1.0, None), 1800.0, 99999.0, 0.5),
        (Budget(None, 2.0), 99999.0, 3600.0, 0.5),
        (Budget(1.0, 1.0), 3600.0, 1800.0, 1.0),  # the larger fraction
    ],
)
def test_spent_fraction(budget, cpu, wall, fraction):
    assert spent_fraction(budget.core_hours, budget.hours, cpu, wall) == pytest.approx(fraction)


def test_the_record_keeps_limits_and_iterations_in_order(tmp_path: Path):
    layout = RunLayout(tmp_path, "data", "r")
    assert read_budget(layout) == Budget(None, None)
    set_limits(layout, 1.0, None)
    record_iteration(layout, 2, 20.0, 10.0, {"selfplay": 12.0})
    record_iteration(layout, 1, 10.0, 5.0, {"selfplay": 6.0})
    record_iteration(layout, 2, 21.0, 11.0, {"selfplay": 13.0})  # a mended iteration: replaced
    budget = set_limits(layout, None, 2.0)  # an extension adds a limit, keeps the other
    assert budget == read_budget(layout)
    assert (budget.core_hours, budget.hours) == (1.0, 2.0)
    assert [(s.iteration, s.cpu_s) for s in budget.spent] == [(1, 10.0), (2, 21.0)]
    data = json.loads(layout.budget.read_text())
    assert data["spent"][1] == {"iteration": 2, "cpu_s": 21.0, "wall_s": 11.0,
                                "stages": {"selfplay": 13.0}, "stage_wall_s": {},
                                "cores": None, "gpu_busy": {}}  # fmt: skip
    record_iteration(layout, 3, 30.0, 15.0, {"selfplay": 8.0}, {"selfplay": 4.5}, cores=2,
                     gpu_busy={"selfplay": 0.75})  # fmt: skip
    expected = Spent(3, 30.0, 15.0, {"selfplay": 8.0}, {"selfplay": 4.5}, 2, {"selfplay": 0.75})
    assert read_budget(layout).spent[-1] == expected


def test_a_budget_recorded_before_wall_time_by_stage_still_reads(tmp_path: Path):
    layout = RunLayout(tmp_path, "data", "r")
    layout.budget.parent.mkdir(parents=True)
    old = {"iteration": 1, "cpu_s": 10.0, "wall_s": 5.0, "stages": {"selfplay": 6.0}}
    layout.budget.write_text(json.dumps({"core_hours": 1.0, "hours": None, "spent": [old]}))
    assert read_budget(layout).spent == (Spent(1, 10.0, 5.0, {"selfplay": 6.0}),)


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_meter_and_the_laps_count_this_process_cpu():
    meter = Meter.from_now()
    laps = Laps("rest")
    with laps.lap("work"):
        _busy(0.2)
    time.sleep(0.2)  # waiting is not CPU
    split, walls = laps.totals(), laps.walls()
    assert 0.15 <= split["work"] <= 1.0 and split["rest"] < 0.15
    assert walls["work"] >= 0.2 and walls["rest"] >= 0.2  # the sleep is wall time, not CPU
    metrics = stage_metrics(split, walls, 2)
    assert metrics["cpu/work_s"] == split["work"] and metrics["wall/work_s"] == walls["work"]
    assert metrics["busy/work"] == pytest.approx(split["work"] / (walls["work"] * 2), abs=1e-4)
    assert metrics["busy/rest"] < 0.2 and 0 < metrics["busy/iteration"] < metrics["busy/work"]
    assert 0.15 <= meter.cpu() <= 1.5 and meter.wall() >= 0.4
    assert process_tree_cpu_seconds() >= meter.cpu()


def test_a_lap_begun_before_the_laps_takes_everything_from_its_mark():
    began = Mark.now()
    _busy(0.2)  # the work begun before the laps (games started ahead of the flow)
    laps = Laps("rest")
    _busy(0.1)  # bookkeeping beside it
    with laps.lap("work", since=began):
        _busy(0.1)
    with laps.lap("more", since=began):  # only the first lap goes back to its mark
        _busy(0.1)
    split, walls = laps.totals(), laps.walls()
    assert 0.35 <= split["work"] <= 1.5 and split["rest"] < 0.05
    assert 0.08 <= split["more"] <= 0.5
    assert walls["work"] >= 0.4 and walls["more"] < walls["work"]
    late = Laps("rest")
    with late.lap("work", since=Mark.now()):  # a mark after the laps began: no head start
        _busy(0.1)
    assert set(late.totals()) == {"rest", "work"}


def test_the_next_iteration_cost_is_the_last_plus_the_trend():
    from tabula.plan import predicted_cost

    assert predicted_cost((), "cpu_s") == 0.0
    assert predicted_cost(_spent(100), "cpu_s") == 100.0
    assert predicted_cost(_spent(100, 110, 120), "cpu_s") == pytest.approx(130.0)
    # only the last RECENT (5) iterations: the first, cheap ones do not drag the trend
    assert predicted_cost(_spent(10, 100, 100, 100, 100, 100), "cpu_s") == pytest.approx(100.0)
    assert predicted_cost(_spent(50, 300, 100), "wall_s") == pytest.approx(0.0)  # never negative
    # the run's first iteration (its start, a cold compile) counts only while it is alone
    assert predicted_cost(_spent(418), "cpu_s") == pytest.approx(418.0)
    assert predicted_cost(_spent(418, 130, 130), "cpu_s") == pytest.approx(130.0)


def _ends(
    costs: list[float], budget_s: float, overshoot: float | None, shrink: float | None = None
) -> float:
    """Where a budgeted run whose iterations cost ``costs`` (CPU-s, in turn, for 384 games)
    ends, as a fraction of its budget, stopping or shrinking as `next_iteration` says (a
    shrunk iteration costs its share of the games)."""
    spent: tuple[Spend, ...] = ()
    total = 0.0
    for i, cost in enumerate(costs, start=1):
        state = RunState(i, None, 100, budget_s / 3600.0, None, cpu_s=total, wall_s=total / 2,
                         spent=spent, overshoot=overshoot, games=384, shrink=shrink)  # fmt: skip
        upcoming = next_iteration(TRAINING, state)
        if not upcoming.go:
            break
        total += cost * (384 if upcoming.games is None else upcoming.games) / 384
        spent = (*spent, Spend(i, total, total / 2))
    return total / budget_s


# Recorded per-iteration CPU-seconds of a quick-budget run (0.2 core-hours = 720 s): costs
# grow as games lengthen.
QUICK = [96.0, 101.0, 108.0, 112.0, 118.0, 121.0, 127.0, 131.0, 136.0]


def test_a_budget_ends_within_its_overshoot_when_asked():
    assert _ends(QUICK, 720.0, None) > 1.03  # today: the first boundary past it (>= 1)
    ends = _ends(QUICK, 720.0, 0.03)
    assert ends <= 1.03
    assert ends > 1.0 - QUICK[-1] / 720.0  # and it stops at most one iteration early
    # a one-core-hour run of ~68 CPU-s iterations ends within 3% either side
    hour = [60.0 + 0.2 * k for k in range(80)]
    assert abs(_ends(hour, 3600.0, 0.03) - 1.0) <= 0.03


def test_a_budget_ends_near_its_size_when_the_last_iteration_may_shrink():
    """With ``budget_shrink`` the iteration the overshoot would stop plays the games that fit
    in what is left: the quick budget, whose iterations are a sixth of it, ends within 3% of
    its size either side instead of up to an iteration short; one core-hour too."""
    whole = _ends(QUICK, 720.0, 0.03)
    shrunk = _ends(QUICK, 720.0, 0.03, shrink=0.25)
    assert abs(shrunk - 1.0) <= 0.03 and shrunk > whole
    hour = [60.0 + 0.2 * k for k in range(80)]
    assert abs(_ends(hour, 3600.0, 0.03, shrink=0.25) - 1.0) <= 0.03
    # nothing shrinks without an overshoot to stop at: the first boundary past the budget
    assert _ends(QUICK, 720.0, None, shrink=0.25) == _ends(QUICK, 720.0, None)


def test_an_iteration_shrinks_to_the_games_that_fit_or_does_not_start():
    """656 of 720 CPU-s spent, the next predicted at 126: 64 CPU-s fit, a share of 0.51, so
    it plays 195 of 384 games; the run is planned with that one too. With 700 spent the 20 left
    are a sixth of an iteration, under the 0.25 floor: it does not start."""
    spent = _spent(*QUICK[:6])
    state = RunState(7, None, 100, 0.2, None, cpu_s=656.0, wall_s=328.0, spent=spent,
                     overshoot=0.03, games=384, shrink=0.25)  # fmt: skip
    upcoming = next_iteration(TRAINING, state)
    assert upcoming.go and upcoming.games == math.floor(64 / 126 * 384) == 195
    assert upcoming.iterations == 7
    assert next_iteration(TRAINING, replace(state, shrink=None)).games is None
    assert not next_iteration(TRAINING, replace(state, shrink=None)).go
    late = replace(state, cpu_s=700.0)
    assert not next_iteration(TRAINING, late).go and next_iteration(TRAINING, late).games is None
    # its matches and bookkeeping (26 CPU-s in the last iteration) do not shrink: 38 of the
    # 100 CPU-s of self-play and training fit
    fixed = next_iteration(TRAINING, replace(state, fixed_cpu_s=26.0))
    assert fixed.games == math.floor((64 - 26) / (126 - 26) * 384) == 145
    # an iteration that fits whole does not shrink; one that began keeps its plan
    assert next_iteration(TRAINING, replace(state, core_hours=1.0)).games is None
    assert next_iteration(TRAINING, replace(state, started=True)).games is None


# Recorded wall seconds of the quick start's 10.8-minute run (648 s, 2026-12-05): each
# iteration without its anchor matches, which cost about 20 s more in every sixth and in the
# last (iteration 26 ended the run at 672.5 s, 3.8% past its budget).
# fmt: off
QUICK_WALL = [26.9, 24.3, 23.4, 21.3, 20.2, 21.1, 21.2, 21.2, 19.2, 23.2, 21.2, 20.5, 23.3,
              23.3, 24.2, 21.2, 22.2, 23.4, 21.2, 21.2, 22.2, 22.2, 21.3, 21.4, 22.2, 22.4]
# fmt: on
MATCHES_WALL = 19.5


def _ends_with_anchors(
    every: int | None, budget_s: float = 648.0, skip: bool = False
) -> tuple[float, int, bool]:
    """Where the recorded quick start ends as a fraction of its wall budget, after how many
    iterations, and whether its last played the anchors, when the planner knows the matches come
    ``every`` iterations and in the last (None: it does not know of them, as before), with
    ``skip`` those in turn less than half of six before the last planned (`plays_anchors`)."""
    spent: tuple[Spend, ...] = ()
    total, anchored = 0.0, False
    for i, cost in enumerate(QUICK_WALL, start=1):
        state = RunState(i, None, 5, None, budget_s / 3600.0, cpu_s=total, wall_s=total,
                         spent=spent, overshoot=0.03, games=384, shrink=0.25,
                         anchor_every=every, anchor_skip=skip)  # fmt: skip
        upcoming = next_iteration(TRAINING, state)
        if not upcoming.go:
            return total / budget_s, i - 1, anchored
        anchored = plays_anchors(i, 6, skip, upcoming.iterations)  # (as `anchors_to_play`)
        games = 384 if upcoming.games is None else upcoming.games
        matches = MATCHES_WALL if anchored else 0.0
        total += cost * games / 384 + matches
        spent = (*spent, Spend(i, total, total, matches, matches))
    return total / budget_s, len(QUICK_WALL), anchored


def test_a_budget_keeps_the_anchor_matches_of_its_last_iteration_in_view():
    """The quick start's last iteration plays the anchors: a planner that predicts only the
    iterations' steady cost lets it end the run 3.8% past its budget (the measured run); one
    that keeps those matches aside plans a last iteration that ends within 3%, anchors
    played."""
    blind, blind_count, _ = _ends_with_anchors(None)
    assert blind > 1.03 and blind_count == 26
    ends, count, anchored = _ends_with_anchors(6)
    assert abs(ends - 1.0) <= 0.03 and anchored
    assert count >= 25
    # with the anchors in turn skipped near the last (the quick start's), the matches of
    # iteration 24 go to learning: one iteration more, the budget still kept
    ends, gapped, anchored = _ends_with_anchors(6, skip=True)
    assert abs(ends - 1.0) <= 0.03 and anchored and gapped == count + 1


def test_anchor_matches_are_predicted_apart_from_the_steady_cost():
    from tabula.plan import predicted_cost

    steady = [20.0, 20.0, 20.0, 20.0, 20.0, 20.0]
    spent, total = [], 0.0
    for i, cost in enumerate(steady, start=1):
        matches = 30.0 if i % 3 == 0 else 0.0
        total += cost + matches
        spent.append(Spend(i, total, total / 2, matches, matches / 2))
    # the matches of iterations 3 and 6 do not make the next iteration look dear
    assert predicted_cost(spent, "cpu_s") == pytest.approx(20.0)
    state = RunState(7, None, 5, 1.0, None, cpu_s=total, wall_s=total / 2,
                     spent=tuple(spent), overshoot=0.03, anchor_every=3)  # fmt: skip
    # 3600 x 1.03 - 180 CPU-s, less the last one's matches (30), at 20 + 30 / 3 an iteration
    assert next_iteration(TRAINING, state).iterations == 6 + math.floor((3708 - 180 - 30) / 30)
    # near the end of a 250 CPU-s budget the next iteration is planned as the last: it plays
    # the anchors (180 + 20 + 30 = 230) and ends within the budget
    near = replace(state, core_hours=250 / 3600, games=384, shrink=0.25)
    assert next_iteration(TRAINING, near).iterations == 7
    assert next_iteration(TRAINING, near).go and next_iteration(TRAINING, near).games is None
    # with 217: 37 left, 7 after the matches: it plays 0.35 of its games, then the anchors
    tight = replace(near, core_hours=217 / 3600)
    assert next_iteration(TRAINING, tight).games == math.floor(7 / 20 * 384)
    # with 205, the matches alone would pass the budget: it does not start
    assert not next_iteration(TRAINING, replace(near, core_hours=205 / 3600)).go


def _evaluation(gate_s: float, anchors_s: float, random_s: float | None = None) -> object:
    """An evaluation record whose gate took ``gate_s`` seconds and whose one anchor match
    took ``anchors_s``, with a match against the random player of ``random_s`` (None: none;
    their games are not read by the planner)."""
    from tabula.arena import MatchSummary
    from tabula.gating import ungated
    from tasks.run.records import AnchorRecord, EvaluationRecord, GateRecord

    summary = MatchSummary("net", "gnugo-l1", 20, 5, 15, 0, 0, 0, 0, 3, 2, 0, 60.0)
    matches = {"gnugo-l1": AnchorRecord("m", summary, None, None, (), anchors_s)}
    if random_s is not None:
        matches["random"] = AnchorRecord("r", summary, None, None, (), random_s)
    return EvaluationRecord(GateRecord(ungated(), gate_s), matches, (), {}, None)


def test_the_planner_reads_each_iterations_anchor_matches_from_its_records(tmp_path: Path):
    """`tasks.planning.upcoming`'s records: the ``evaluate`` stage's seconds in the share the
    anchor matches took of the games' seconds, the rest being the gate's, and the share of an
    iteration's games its self-play played; the fixed cost leaves the matches out."""
    from tasks.planning import _fixed_costs, _spends
    from tasks.run.markers import write_record
    from tasks.run.records import EvaluationRecord, SelfplayRecord, Stage

    layout = RunLayout(tmp_path, "data", "r")
    spent = (Spent(1, 100.0, 60.0, {"selfplay": 50.0, "train": 30.0, "evaluate": 10.0},
                   {"selfplay": 25.0, "train": 15.0, "evaluate": 10.0}),
             Spent(2, 230.0, 130.0, {"selfplay": 60.0, "train": 35.0, "evaluate": 30.0},
                   {"selfplay": 30.0, "train": 20.0, "evaluate": 16.0}))  # fmt: skip
    gated = _evaluation(gate_s=4.0, anchors_s=12.0)
    write_record(layout.marker(2, Stage.EVALUATE.marker_name()), gated)
    records = _spends(layout, spent, recent=5, steady=set(), games=384)
    assert records[0] == Spend(1, 100.0, 60.0, 0.0, 0.0)  # no evaluation recorded
    assert records[1] == Spend(2, 230.0, 130.0, 22.5, 12.0)  # 3/4 of 30 and of 16
    unread = _spends(layout, spent, recent=0, steady=set(), games=384)
    assert unread[1].matches_cpu_s == 0.0  # not read
    # a random player with its own turns (`evaluation.random_every`) is a steady cost
    both = _evaluation(gate_s=4.0, anchors_s=12.0, random_s=4.0)
    write_record(layout.marker(2, Stage.EVALUATE.marker_name()), both)
    assert _spends(layout, spent, recent=5, steady={"random"}, games=384)[1] == Spend(
        2, 230.0, 130.0, 18.0, 9.6
    )
    anchored = _spends(layout, spent, recent=5, steady=set(), games=384)
    assert anchored[1].matches_wall_s == pytest.approx(12.8)
    assert _fixed_costs(spent, records[1]) == {"fixed_cpu_s": 12.5, "fixed_wall_s": 8.0}
    assert isinstance(gated, EvaluationRecord)
    # iteration 2 shrunk to 96 of 384 games: a quarter of an iteration
    played = SelfplayRecord(96, 4000, 0, 0, 0, 0, 0, 41.7, 0.0, 1.0, 1.0, 1.0, None, None, None,
                            {}, 1.0)  # fmt: skip
    write_record(layout.marker(2, Stage.SELFPLAY.marker_name()), played)
    assert _spends(layout, spent, recent=5, steady=set(), games=384)[1].share == 0.25
    assert _spends(layout, spent, recent=0, steady=set(), games=384)[1].share == 1.0
    assert _spends(layout, spent, recent=5, steady=set(), games=None)[1].share == 1.0  # format 12


def test_the_fixed_cost_is_what_the_last_iteration_spent_outside_selfplay_and_training():
    from tasks.planning import _fixed_costs

    spent = (Spent(1, 100.0, 60.0, {"selfplay": 50.0, "train": 30.0}, {"selfplay": 25.0}),
             Spent(2, 230.0, 130.0, {"selfplay": 60.0, "train": 35.0, "evaluate": 30.0},
                   {"selfplay": 30.0, "train": 20.0}))  # fmt: skip
    none = Spend(2, 230.0, 130.0)  # (no anchor matches)
    assert _fixed_costs(spent, none) == {"fixed_cpu_s": 35.0, "fixed_wall_s": 20.0}
    assert _fixed_costs(spent[:1], none) == {"fixed_cpu_s": 20.0, "fixed_wall_s": 35.0}
    unrecorded = (Spent(1, 100.0, 60.0, {}),)  # a run of before: nothing known to be fixed
    assert _fixed_costs(unrecorded, none) == {"fixed_cpu_s": 0.0, "fixed_wall_s": 0.0}


def test_a_shrunk_iteration_shares_its_games_among_the_workers():
    from tabula.plan import plan_iteration, stage_specs

    cfg = load_config(None)
    made = plan_iteration(cfg, 7, 6, lambda j: f"iter-{j}")
    specs = stage_specs(cfg, made, "champion.pt", str, None, [100], False, games=195)
    assert [w.games for w in specs.workers] == [98, 97]
    whole = stage_specs(cfg, made, "champion.pt", str, None, [100], False)
    assert [w.games for w in whole.workers] == [192, 192]
    few = stage_specs(cfg, made, "champion.pt", str, None, [100], False, games=1)
    assert [w.games for w in few.workers] == [1, 1]  # at least one a worker


def test_the_overshoot_comes_from_the_config():
    from tabula.config import load_config

    assert load_config(None).pipeline.budget_overshoot == 0.03  # the quick start ends within
    cfg = load_config(None, ["pipeline.budget_overshoot=null"])
    assert cfg.pipeline.budget_overshoot is None


def test_the_run_stops_before_an_overshooting_iteration_from_its_budget_file(tmp_path: Path):
    """`tasks.planning.upcoming` reads ``budget.json`` and the config's overshoot and shrink:
    656 of 720 CPU-s spent, the next iteration predicted at ~126, so it starts whole only
    without a limit on the overshoot, shrunk to 195 games by default, and not at all when it
    may not shrink (the meter counts this test's CPU-seconds since it started too)."""
    from tabula.config import load_config
    from tasks.planning import upcoming
    from tasks.run.cputime import process_tree_cpu_seconds

    layout = RunLayout(tmp_path, "data", "r")
    set_limits(layout, 0.2, None)
    total = 0.0
    for i, cost in enumerate(QUICK[:6], start=1):
        total += cost
        record_iteration(layout, i, total, total / 2, {"selfplay": cost})
    meter = Meter(cpu_start=process_tree_cpu_seconds(), base=read_budget(layout).spent[-1])
    plain = load_config(None, ["pipeline.budget_overshoot=null"])
    within = load_config(None, ["pipeline.budget_overshoot=0.03"])
    whole = load_config(None, ["pipeline.budget_overshoot=0.03", "pipeline.budget_shrink=null"])
    assert upcoming(plain, layout, meter, 7, None).go
    assert upcoming(plain, layout, meter, 7, None).games is None
    assert 185 <= upcoming(within, layout, meter, 7, None).games <= 195  # (the test's CPU too)
    assert not upcoming(whole, layout, meter, 7, None).go


def test_with_an_overshoot_the_schedule_plans_the_iterations_that_fit():
    """The rate schedule anneals over the iterations the run will make: without an overshoot
    the one that crosses the budget too (6 in all here), with one the whole iterations that fit
    in the budget and 3% more (5)."""
    state = RunState(3, None, 100, 1.0, None, cpu_s=1250.0, spent=_spent(600, 650), started=True)
    assert next_iteration(TRAINING, state).iterations == 2 + math.ceil(2350 / 625)  # 6
    fits = replace(state, overshoot=0.03)
    assert next_iteration(TRAINING, fits).iterations == 2 + math.floor((3708 - 1250) / 625)  # 5


def test_the_config_budget_applies_to_a_bare_first_start_only(tmp_path: Path) -> None:
    """`tasks.planning.given_limits`: the limits named win; with neither nor the iterations, a
    run without limits takes the config's (the quick start's wall clock); a run with limits
    keeps them."""
    from tasks.planning import given_limits

    layout = RunLayout(tmp_path, "data", "run")
    quick = load_config(None)
    assert (quick.pipeline.core_hours, quick.pipeline.hours) == (None, 0.2)
    assert given_limits(quick, layout, None, None, None) == (None, 0.2)
    assert given_limits(quick, layout, 3, None, None) == (None, None)  # N iterations, no budget
    assert given_limits(quick, layout, None, 1.0, None) == (1.0, None)  # the CLI's alone
    own = load_config(None, ["pipeline.core_hours=0.5", "pipeline.hours=null"])
    assert given_limits(own, layout, None, None, None) == (0.5, None)
    unbudgeted = load_config(None, ["pipeline.hours=null"])
    assert given_limits(unbudgeted, layout, None, None, None) == (None, None)
    set_limits(layout, None, 0.4)  # a run extended to 0.4 h keeps it on a bare resume
    assert given_limits(quick, layout, None, None, None) == (None, None)
    assert read_budget(layout).hours == 0.4
