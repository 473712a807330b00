"""Gating (tabula.gating): the paper's fixed 55% gate, the SPRT, the Wilson interval."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tabula.gating import Gate, GateConfig, GateError, GateReason, decide, win_rate_interval

SPRT = GateConfig(sprt=True)  # Leela Zero's numbers: elo0 0, elo1 35, alpha = beta = 0.05
P1 = 1.0 / (1.0 + 10.0 ** (-35.0 / 400.0))  # expected score at +35 Elo
UPPER = math.log(0.95 / 0.05)  # ln((1 - beta) / alpha); the lower bound is its negative here


def spread(wins: int, games: int) -> list[float]:
    """``wins`` wins spread as evenly as possible over ``games`` (no long streaks)."""
    return [float((k + 1) * wins // games > k * wins // games) for k in range(games)]


def run_gate(config: GateConfig, results: list[float]) -> Gate:
    gate = Gate(config)
    for result in results:
        gate.update(result)
    return gate


# --- Wilson interval -------------------------------------------------------------------------


def test_wilson_interval_known_values() -> None:
    assert win_rate_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert win_rate_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert win_rate_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert win_rate_interval(0, 0) == (0.0, 1.0)


@given(st.integers(1, 2000), st.floats(0, 1))
def test_wilson_interval_holds_the_observed_rate(games: int, fraction: float) -> None:
    wins = round(fraction * games * 2) / 2  # draws make half wins
    low, high = win_rate_interval(wins, games)
    assert 0.0 <= low <= wins / games <= high <= 1.0
    wide_low, wide_high = win_rate_interval(wins, games, confidence=0.99)
    assert wide_low <= low and high <= wide_high


def test_wilson_interval_rejects_impossible_counts() -> None:
    with pytest.raises(GateError):
        win_rate_interval(11, 10)


# --- the paper's fixed gate: 400 games, strictly more than 55% ---------------------------------


def test_exactly_55_percent_is_not_promoted_and_one_more_win_is() -> None:
    at = run_gate(GateConfig(), spread(220, 400)).decision()
    above = run_gate(GateConfig(), spread(221, 400)).decision()
    assert (at.promoted, at.reason, at.games, at.win_rate) == (False, "threshold", 400, 0.55)
    assert (above.promoted, above.reason, above.wins, above.losses) == (True, "threshold", 221, 179)
    assert at.llr is None and at.llr_bounds is None


def test_draws_count_half_at_the_threshold() -> None:
    exactly = [1.0] * 219 + [0.5] * 2 + [0.0] * 179  # 220 points of 400
    half_more = [1.0] * 220 + [0.5] + [0.0] * 179  # 220.5 points
    assert not run_gate(GateConfig(), exactly).decision().promoted
    decision = run_gate(GateConfig(), half_more).decision()
    assert decision.promoted and decision.draws == 1 and decision.win_rate == 220.5 / 400


@pytest.mark.parametrize("games", [1, 7, 100, 400])
def test_the_fixed_gate_plays_every_game(games: int) -> None:
    gate = run_gate(GateConfig(games=games), [1.0] * (games - 1))
    assert not gate.decided  # even a perfect record waits for the last game
    gate.update(1.0)
    assert gate.decided and gate.decision().promoted


# --- SPRT ----------------------------------------------------------------------------------


def test_sprt_accepts_a_winning_streak_as_soon_as_the_ratio_crosses() -> None:
    need = math.ceil(UPPER / math.log(P1 / 0.5))  # 31 wins in a row
    gate = run_gate(SPRT, [1.0] * (need - 1))
    assert not gate.decided
    gate.update(1.0)
    decision = gate.decision()
    assert (decision.promoted, decision.reason, decision.games) == (True, "sprt-accept-h1", need)
    assert decision.llr is not None and decision.llr >= UPPER
    assert decision.llr_bounds == pytest.approx((-UPPER, UPPER))


def test_sprt_rejects_a_losing_streak_early() -> None:
    need = math.ceil(UPPER / -math.log((1 - P1) / 0.5))  # 28 losses in a row
    decision = decide([0.0] * 1000, SPRT)
    assert (decision.promoted, decision.reason, decision.games) == (False, "sprt-accept-h0", need)


def simulated_gates(elo: float, runs: int, config: GateConfig, seed: int) -> list:
    rng = np.random.default_rng(seed)
    p = 1.0 / (1.0 + 10.0 ** (-elo / 400.0))
    return [decide((float(x) for x in rng.random(config.games) < p), config) for _ in range(runs)]


def test_sprt_stops_early_for_a_strong_candidate() -> None:
    decisions = simulated_gates(150.0, runs=100, config=SPRT, seed=1)
    assert all(d.reason == "sprt-accept-h1" and d.promoted for d in decisions)
    assert np.mean([d.games for d in decisions]) < 100  # far fewer than the 400 of the paper


def test_sprt_stops_early_for_a_weak_candidate() -> None:
    decisions = simulated_gates(-100.0, runs=100, config=SPRT, seed=2)
    assert all(d.reason == "sprt-accept-h0" and not d.promoted for d in decisions)
    assert np.mean([d.games for d in decisions]) < 100


def test_sprt_equal_candidate_runs_to_max_games_and_the_threshold_decides() -> None:
    decision = decide([1.0, 0.0] * 200, SPRT)  # exactly even: the ratio drifts but never crosses
    assert (decision.reason, decision.games, decision.promoted) == ("max-games", 400, False)
    assert decision.llr is not None and -UPPER < decision.llr < UPPER


def test_sprt_max_games_promotes_above_the_threshold() -> None:
    gate = run_gate(SPRT, spread(222, 399))  # 55.5% spread evenly: no bound is reached
    assert not gate.decided
    gate.update(0.0)
    decision = gate.decision()
    assert (decision.reason, decision.promoted, decision.wins) == ("max-games", True, 222)


@pytest.mark.parametrize(("elo", "wrong"), [(0.0, "promoted"), (35.0, "rejected")])
def test_sprt_error_rates_are_about_alpha_and_beta(elo: float, wrong: str) -> None:
    # No game cap, so only the SPRT decides; Wald: each error rate is at most about 0.05.
    decisions = simulated_gates(elo, runs=300, config=GateConfig(sprt=True, games=20_000), seed=3)
    assert all(d.reason.startswith("sprt") for d in decisions)
    promoted = np.mean([d.promoted for d in decisions])
    error = promoted if wrong == "promoted" else 1.0 - promoted
    assert error < 0.09


def test_a_draw_moves_the_ratio_by_half_a_win_and_half_a_loss() -> None:
    gate = run_gate(SPRT, [0.5])
    half = 0.5 * (math.log(P1 / 0.5) + math.log((1 - P1) / 0.5))
    assert gate.llr == pytest.approx(half) and gate.draws == 1 and gate.score == 0.5


# --- the streaming contract ----------------------------------------------------------------


def test_no_result_after_the_decision_and_no_decision_before_it() -> None:
    gate = Gate(GateConfig(games=2))
    with pytest.raises(GateError, match="undecided"):
        gate.decision()
    gate.update(1.0)
    gate.update(1.0)
    with pytest.raises(GateError, match="already decided"):
        gate.update(1.0)
    assert gate.decision().games == 2


@pytest.mark.parametrize("result", [2, -1, 0.25, float("nan")])
def test_a_result_is_a_win_a_loss_or_a_draw(result: float) -> None:
    with pytest.raises(GateError):
        Gate().update(result)


@pytest.mark.parametrize(
    "config",
    [
        GateConfig(games=0),
        GateConfig(threshold=1.0),
        GateConfig(sprt=True, elo0=35.0, elo1=0.0),
        GateConfig(sprt=True, alpha=0.0),
        GateConfig(sprt=True, beta=0.5),
    ],
)
def test_bad_settings_are_one_clear_error(config: GateConfig) -> None:
    with pytest.raises(GateError):
        Gate(config)
    assert issubclass(GateError, ValueError)


def test_any_object_with_the_numbers_configures_a_gate() -> None:
    settings = SimpleNamespace(
        games=10, threshold=0.5, sprt=False, elo0=0.0, elo1=35.0, alpha=0.05, beta=0.05
    )
    assert decide([1.0] * 6 + [0.0] * 4, settings).promoted


def test_decide_needs_enough_results() -> None:
    with pytest.raises(GateError, match="ran out"):
        decide([1.0] * 10, GateConfig())


def test_decision_to_dict_is_json_evidence() -> None:
    decision = decide([1.0] * 40, SPRT)
    assert decision.reason is GateReason.SPRT_ACCEPT_H1
    evidence = json.loads(json.dumps(decision.to_dict()))
    assert evidence["reason"] == "sprt-accept-h1" and evidence["promoted"] is True
    assert evidence["llr_bounds"] == pytest.approx([-UPPER, UPPER])
    assert set(evidence) == {
        "promoted", "reason", "wins", "losses", "draws", "games",
        "win_rate", "low", "high", "llr", "llr_bounds",
    }  # fmt: skip
