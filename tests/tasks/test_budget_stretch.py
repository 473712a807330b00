"""The end of a budgeted run (`tabula.plan.next_iteration` with ``pipeline.budget_stretch``):
its last iteration plays the games that fit in what is left of the budget, more or fewer than
an iteration's, so that the run ends within its overshoot of the budget, its last anchored."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest

from tabula.config import load_config
from tabula.plan import RunState, Spend, next_iteration, plays_anchors, predicted_cost

TRAINING = load_config(None).training

# Seven quick starts from fresh clones on a 2-core AMD EPYC with AVX2 only (2026-12-06/07,
# config formats 11 and 12, `bench.quickstart`): each iteration's wall seconds without its
# anchor matches, and what the anchor matches of iterations 6 and the last cost. They ended at
# 0.939, 0.955, 0.979, 0.955, 0.993, 0.976 and 1.011 of their 648 s: stopping before a last
# iteration that the anchor matches would not let fit.
# fmt: off
AVX2_WALL = [
    ([48.9, 48.4, 46.2, 50.4, 41.1, 48.4, 49.3, 48.6, 42.7, 42.8, 40.7, 42.8], [30.1, 27.6]),
    ([46.0, 43.5, 45.0, 47.3, 47.4, 45.8, 48.0, 43.2, 41.2, 43.7, 38.2, 37.3, 38.4], [28.4, 25.3]),
    ([49.5, 47.6, 43.4, 44.4, 41.2, 48.0, 49.1, 43.4, 43.3, 41.3, 41.4, 42.4, 40.8], [28.6, 29.9]),
    ([48.4, 50.3, 46.5, 45.6, 48.1, 45.0, 46.8, 42.7, 39.1, 38.7, 36.9, 38.1, 39.1], [28.5, 25.2]),
    ([47.5, 44.8, 44.0, 43.8, 41.6, 45.8, 42.1, 45.2, 39.6, 38.7, 39.1, 38.8, 38.3, 39.3],
     [29.4, 25.3]),
    ([42.7, 40.2, 41.0, 42.4, 40.4, 42.8, 44.5, 44.4, 40.0, 38.8, 39.6, 37.8, 36.1, 37.8],
     [35.7, 28.0]),
    ([46.8, 46.3, 47.3, 47.1, 42.0, 50.0, 44.6, 43.5, 36.6, 38.4, 39.1, 39.2, 39.8, 40.4],
     [28.8, 25.2]),
]
# fmt: on
GAMES = 384


@dataclass(frozen=True)
class Costs:
    """A replayed run's costs in wall seconds: its iterations at 384 games (``steady``, the
    last repeated past them), of which ``fixed`` does not scale with the games (the gate, the
    bookkeeping), and its anchor matches, every ``every`` iterations and in the last planned."""

    steady: list[float]
    matches: float
    fixed: float = 0.0
    every: int = 6


def _replay(costs: Costs, budget_s: float, stretch: float | None) -> tuple[float, bool]:
    """Where a run ends as a fraction of its wall budget ``budget_s``, each iteration scaled
    to the games it was planned with, and whether its last iteration played the anchors."""
    spent: tuple[Spend, ...] = ()
    total, anchored = 0.0, False
    for i, cost in enumerate([*costs.steady, *[costs.steady[-1]] * 200], start=1):
        fixed = costs.fixed if spent else 0.0
        state = RunState(i, None, 5, None, budget_s / 3600.0, cpu_s=total, wall_s=total,
                         spent=spent, overshoot=0.03, games=GAMES, shrink=0.25, stretch=stretch,
                         fixed_cpu_s=fixed, fixed_wall_s=fixed, anchor_every=costs.every,
                         anchor_skip=True)  # fmt: skip
        upcoming = next_iteration(TRAINING, state)
        if not upcoming.go:
            return total / budget_s, anchored
        anchored = plays_anchors(i, costs.every, True, upcoming.iterations)
        games = GAMES if upcoming.games is None else upcoming.games
        paid = costs.matches if anchored else 0.0
        total += costs.fixed + (cost - costs.fixed) * games / GAMES + paid
        spent = (*spent, Spend(i, total, total, paid, paid, games / GAMES))
    raise AssertionError("the run never stopped")


def _ends(runs: list[Costs], budgets: range, stretch: float | None) -> list[tuple[float, bool]]:
    return [(e, a) for c in runs for e, a in (_replay(c, float(b), stretch) for b in budgets)]


RECORDED = [Costs(steady, max(matches), fixed=0.7) for steady, matches in AVX2_WALL]


def test_the_recorded_quick_starts_end_within_the_overshoot_when_the_last_may_stretch():
    """Replayed on the recorded costs at budgets of 560 to 698 s, a planner that stops before
    a last iteration that does not fit ends more than 3% short of the budget in about two
    budgets of five (down to 0.93); one whose last stretches, or is followed by a shrunk one
    that plays the anchors, ends within 1.5% short and at most the overshoot and a
    misprediction past it, its last anchored."""
    before = _ends(RECORDED, range(560, 700, 2), None)
    assert sum(abs(e - 1.0) > 0.03 for e, _ in before) > 0.3 * len(before)
    assert min(e for e, _ in before) < 0.94
    after = _ends(RECORDED, range(560, 700, 2), 0.25)
    assert all(0.985 <= e <= 1.04 for e, _ in after)
    assert sum(abs(e - 1.0) > 0.03 for e, _ in after) < 0.05 * len(after)
    assert all(anchored for _, anchored in before + after)


@pytest.mark.parametrize(
    ("costs", "budgets"),
    [
        (Costs([40.0], 5.0, fixed=4.0), range(560, 700, 2)),  # cheap anchors, a dear gate
        (Costs([40.0], 5.0, fixed=4.0, every=1), range(560, 700, 2)),  # anchors every iteration
        (Costs([40.0], 5.0, fixed=4.0, every=2), range(560, 700, 2)),
        (Costs([45.0], 30.0, fixed=1.0), range(560, 700, 2)),  # the quick start's proportions
        (Costs([40.0], 5.0, fixed=4.0), range(3000, 4200, 23)),  # 3% holds an iteration
    ],
)
def test_a_stretched_budget_ends_within_its_overshoot_and_rates_its_last(costs, budgets):
    """Steady costs: every run ends within 1.5% short and 3% past its budget, and its last
    iteration plays the anchors, also where the gate and bookkeeping cost a tenth of an
    iteration (so that two iterations pay them twice) and where the overshoot is longer than an
    iteration (an iteration planned as the last must start before the budget is spent)."""
    ends = _ends([costs], budgets, 0.25)
    assert all(0.985 <= e <= 1.031 for e, _ in ends)
    assert all(anchored for _, anchored in ends)


def test_without_the_stretch_a_long_budget_leaves_its_final_network_unrated():
    """Format 12 and before, as they run: a last planned iteration that would start past the
    budget never starts, so a run whose overshoot holds a whole iteration ends unrated."""
    ends = _ends([Costs([40.0], 5.0, fixed=4.0)], range(3000, 4200, 23), None)
    assert all(0.99 <= e <= 1.031 for e, _ in ends)
    assert not any(anchored for _, anchored in ends)


def _state(**changes) -> RunState:
    """Iteration 13 of a quick start after 12 iterations of 40 s, the anchors (30 s) played
    in iteration 6: ``changes`` set the rest."""
    spent, total = [], 0.0
    for i in range(1, 13):
        paid = 30.0 if i == 6 else 0.0
        total += 40.0 + paid
        spent.append(Spend(i, total, total, paid, paid))
    base = RunState(13, None, 5, None, None, cpu_s=total, wall_s=total, spent=tuple(spent),
                    overshoot=0.03, games=GAMES, shrink=0.25, stretch=0.25, anchor_every=6,
                    anchor_skip=True)  # fmt: skip
    return replace(base, **changes)


def _budget(left_s: float) -> float:
    """The wall budget in hours that leaves ``left_s`` after the 12 iterations of `_state`."""
    return (12 * 40.0 + 30.0 + left_s) / 3600.0


@pytest.mark.parametrize(
    ("left_s", "iterations", "games"),
    [
        (75.0, 13, math.floor(45 / 40 * GAMES)),  # 1.125 of one fits: the last plays 432
        (110.0, 14, None),  # 2 fit: two iterations, whole
        (85.0, 14, None),  # 1.375: this one whole, a shrunk one after it plays the anchors
        (70.0, 13, None),  # exactly one fits, the anchors paid
    ],
)
def test_the_last_planned_iteration_plays_the_games_that_fit(left_s, iterations, games):
    upcoming = next_iteration(TRAINING, _state(hours=_budget(left_s)))
    assert upcoming.go and (upcoming.iterations, upcoming.games) == (iterations, games)


def test_a_stretch_is_capped_and_comes_only_with_the_switch_and_a_budget_planned_last():
    # 1.24 of one fits: stretched to 1.24 x 384 (under the 1.25 cap)
    near = next_iteration(TRAINING, _state(hours=_budget(30 + 49.6)))
    assert near.games == math.floor(1.24 * GAMES) and near.iterations == 13
    capped = next_iteration(TRAINING, _state(hours=_budget(30 + 49.6), stretch=0.1))
    assert capped.games == math.floor(1.1 * GAMES)
    assert next_iteration(TRAINING, _state(hours=_budget(75.0), stretch=None)).games is None
    asked = next_iteration(TRAINING, _state(hours=_budget(75.0), asked=13))
    assert asked.go and asked.games is None  # the run asked for 13: its last, not the budget's
    begun = next_iteration(TRAINING, _state(hours=_budget(75.0), started=True))
    assert begun.games is None  # a plan written before is kept


def test_after_an_iteration_planned_not_to_be_the_last_any_games_that_fit_play_the_anchors():
    """Predicted to leave 0.375 of an iteration, iteration 13 was not the last; it cost 49 s,
    not 40, and 36 s are left: the anchors (30 s) and 6 s of games fit, 0.12 of an iteration at
    the predicted 51.25 s (the last and its trend), under the 0.25 floor. Stopping would leave
    6% of the budget unspent and the run's last network unrated, so the 44 games that fit play,
    and the anchors; without the switch, it stops."""
    spent = _state().spent
    total = spent[-1].wall_s + 49.0
    state = _state(iteration=14, spent=(*spent, Spend(13, total, total)), wall_s=total,
                   cpu_s=total, hours=(total + 36.0) / 3600.0)  # fmt: skip
    last = next_iteration(TRAINING, state)
    assert last.go and last.iterations == 14
    assert last.games == math.floor(6.0 / (49.0 + 9.0 / 4) * GAMES) == 44
    assert not next_iteration(TRAINING, replace(state, stretch=None)).go
    # within the overshoot of the budget, it stops: nothing worth an iteration is left
    assert not next_iteration(TRAINING, replace(state, hours=(total + 15.0) / 3600.0)).go


def test_a_shrunk_iteration_counts_as_a_whole_one_in_the_next_prediction():
    """Iteration 13 played 77 of 384 games (8 s) and the anchors, and the run has 40 s left (it
    ran faster than predicted): counted as a fifth of an iteration, the next is predicted at
    40 s, not at nothing (the last 8 s and a trend of -8 s), so it plays the quarter that fits
    with the anchors instead of a whole one; with 2 s left the run stops."""
    spent = _state().spent
    total = spent[-1].wall_s + 8.0 + 30.0
    shrunk = Spend(13, total, total, 30.0, 30.0, share=77 / GAMES)
    state = _state(iteration=14, spent=(*spent, shrunk), wall_s=total, cpu_s=total,
                   hours=(total + 40.0) / 3600.0)  # fmt: skip
    assert predicted_cost(state.spent, "wall_s") == pytest.approx(40.0, abs=0.2)
    upcoming = next_iteration(TRAINING, state)
    assert upcoming.go and upcoming.games is not None and upcoming.games < GAMES // 3
    assert not next_iteration(TRAINING, replace(state, hours=(total + 2.0) / 3600.0)).go
    # counted whole, it would predict nothing, and the planner would have no share to scale
    blind = replace(state, spent=(*spent, replace(shrunk, share=1.0)))
    assert predicted_cost(blind.spent, "wall_s") == 0.0
    assert next_iteration(TRAINING, blind).games is None
