"""The Elo fit (tabula.elo): recovers known ratings, honest intervals, anchors, edge cases."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tabula.elo import (
    ELO_TO_LOGIT,
    GameResult,
    InvalidResultError,
    RatingError,
    UnknownAnchorError,
    expected_score,
    fit_ratings,
)

NAMES = ["random", "a", "b", "c", "d"]
TRUE_ELO = np.array([0.0, 150.0, 300.0, 450.0, 600.0])


def simulate(games: int, seed: int) -> list[tuple[str, str, float]]:
    """Games between random pairs of NAMES, won with the logistic Elo probability."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, len(NAMES), games)
    j = (i + rng.integers(1, len(NAMES), games)) % len(NAMES)
    p = 1.0 / (1.0 + 10.0 ** ((TRUE_ELO[j] - TRUE_ELO[i]) / 400.0))
    won = rng.random(games) < p
    return [(NAMES[a], NAMES[b], float(w)) for a, b, w in zip(i, j, won, strict=True)]


def test_expected_score_uses_the_standard_elo_scale() -> None:
    # Paper: a 200-point gap is about 75%; exactly 1 / (1 + 10^-0.5).
    assert expected_score(200, 0) == pytest.approx(0.7597, abs=1e-4)
    assert expected_score(0, 0) == 0.5
    assert expected_score(123, 45) + expected_score(45, 123) == pytest.approx(1.0)
    assert expected_score(1e6, 0) == 1.0 and expected_score(0, 1e6) == 0.0  # no overflow


def test_fit_recovers_known_ratings_within_their_intervals() -> None:
    ratings = fit_ratings(simulate(3000, seed=1))
    assert ratings["random"].elo == 0.0
    for name, truth in zip(NAMES[1:], TRUE_ELO[1:], strict=True):
        r = ratings[name]
        assert r.low <= truth <= r.high, r
        assert abs(r.elo - truth) < 60
        assert 40 < r.high - r.low < 200  # a few thousand games: tens of Elo


def test_intervals_cover_the_truth_at_about_the_stated_rate() -> None:
    covered = []
    for seed in range(100):
        ratings = fit_ratings(simulate(400, seed=1000 + seed))
        for name, truth in zip(NAMES[1:], TRUE_ELO[1:], strict=True):
            covered.append(ratings[name].low <= truth <= ratings[name].high)
    assert 0.88 <= np.mean(covered) <= 0.99


def test_two_players_match_the_closed_form_maximum_likelihood() -> None:
    # a wins 60 of 100: MLE gap 400 log10(60 / 40); Laplace sd 1 / sqrt(n p (1 - p)) in logits.
    results = [("a", "b", 1.0)] * 60 + [("a", "b", 0.0)] * 40
    r = fit_ratings(results, anchor="b", prior_games=1e-9)["a"]
    assert r.elo == pytest.approx(400 * math.log10(1.5), abs=1e-4)
    sd = 1.0 / math.sqrt(100 * 0.6 * 0.4) / ELO_TO_LOGIT
    assert r.high - r.elo == pytest.approx(1.959964 * sd, rel=1e-4)
    assert (r.games, r.wins) == (100, 60.0)


def test_a_player_who_won_every_game_gets_a_finite_rating_with_a_wide_interval() -> None:
    results = simulate(1000, seed=2) + [("perfect", "random", 1.0)] * 10
    perfect = fit_ratings(results)["perfect"]
    assert math.isfinite(perfect.elo) and math.isfinite(perfect.high)
    assert perfect.elo > 200
    assert perfect.high - perfect.low > 400  # far wider than the well-measured players
    assert (perfect.games, perfect.wins) == (10, 10.0)


def test_a_player_who_lost_every_game_gets_a_finite_rating() -> None:
    hopeless = fit_ratings([("random", "hopeless", 1.0)] * 25)["hopeless"]
    assert math.isfinite(hopeless.low) and hopeless.elo < -200
    assert hopeless.wins == 0.0


def test_disconnected_groups_stay_finite_and_uncertain() -> None:
    results = simulate(500, seed=3) + [("x", "y", 1.0), ("y", "x", 0.0), ("x", "y", 0.5)]
    ratings = fit_ratings(results)
    assert all(math.isfinite(r.low) and math.isfinite(r.high) for r in ratings.values())
    assert ratings["x"].elo > ratings["y"].elo
    assert ratings["x"].high - ratings["x"].low > 500  # no game links x to the anchor


def test_named_anchor_is_fixed_at_its_value_and_shifts_everyone() -> None:
    results = simulate(800, seed=4)
    at_zero = fit_ratings(results, anchor="c", anchor_elo=0.0)
    at_1500 = fit_ratings(results, anchor="c", anchor_elo=1500.0)
    c = at_1500["c"]
    assert (c.elo, c.low, c.high) == (1500.0, 1500.0, 1500.0)
    for name in NAMES:
        assert at_1500[name].elo - at_zero[name].elo == pytest.approx(1500.0)
        assert at_1500[name].high - at_1500[name].low == pytest.approx(
            at_zero[name].high - at_zero[name].low
        )


def test_gaps_do_not_depend_on_the_anchor() -> None:
    results = simulate(800, seed=5)
    by_random, by_d = fit_ratings(results), fit_ratings(results, anchor="d")
    gap = by_random["b"].elo - by_random["a"].elo
    assert by_d["b"].elo - by_d["a"].elo == pytest.approx(gap, abs=1e-6)


def test_several_anchors_are_held_at_their_offsets_and_place_the_others_on_that_scale() -> None:
    # The ladder's use: GnuGo levels fixed at calibrated offsets, a new player rated against them.
    results = simulate(3000, seed=7)
    fixed = {"random": 0.0, "b": 300.0, "d": 600.0}
    ratings = fit_ratings(results, anchors=fixed)
    for name, elo in fixed.items():
        r = ratings[name]
        assert (r.elo, r.low, r.high) == (elo, elo, elo)
    for name, truth in (("a", 150.0), ("c", 450.0)):
        assert ratings[name].low <= truth <= ratings[name].high
    # Offsets that contradict the games move the free players, not the anchors.
    skewed = fit_ratings(results, anchors={"random": 0.0, "d": 900.0})
    assert skewed["d"].elo == 900.0 and skewed["c"].elo > ratings["c"].elo
    # Anchors without games are left out; with none left, the single anchor applies.
    alone = fit_ratings(results, anchors={"gnugo-l1": -400.0, "c": 450.0})
    assert alone["c"].elo == 450.0 and "gnugo-l1" not in alone
    fallback = fit_ratings(results, anchors={"gnugo-l1": -400.0})
    assert fallback["random"].elo == 0.0
    assert fallback["d"].elo == pytest.approx(fit_ratings(results)["d"].elo)


def test_without_the_default_anchor_the_mean_is_fixed() -> None:
    results = [("p", "q", 1.0), ("q", "r", 1.0), ("r", "p", 0.5), ("p", "r", 1.0)]
    for anchor in ("random", None):
        ratings = fit_ratings(results, anchor=anchor, anchor_elo=100.0)
        assert np.mean([r.elo for r in ratings.values()]) == pytest.approx(100.0)
        assert all(r.high > r.low for r in ratings.values())


def test_an_unknown_named_anchor_is_an_error() -> None:
    with pytest.raises(UnknownAnchorError, match="gnugo"):
        fit_ratings([("a", "b", 1.0)], anchor="gnugo")


def test_game_results_and_score_triples_agree_and_colour_is_not_modelled() -> None:
    games = [GameResult("a", "b", 1), GameResult("b", "a", 1), GameResult("a", "b", 0)] * 5
    triples = [("a", "b", 1.0), ("b", "a", 1.0), ("a", "b", 0.5)] * 5
    swapped = [GameResult(g.white, g.black, -g.winner) for g in games]
    by_games, by_triples = fit_ratings(games, anchor="b"), fit_ratings(triples, anchor="b")
    by_swapped = fit_ratings(swapped, anchor="b")
    assert by_games["a"].elo == pytest.approx(by_triples["a"].elo)
    assert by_games["a"].elo == pytest.approx(by_swapped["a"].elo)
    assert by_games["a"].wins == 7.5  # two wins and a half per round of three


def test_draws_only_means_equal_ratings() -> None:
    ratings = fit_ratings([GameResult("a", "b", 0)] * 30, anchor="a")
    assert ratings["b"].elo == pytest.approx(0.0, abs=1e-9)
    assert ratings["b"].wins == 15.0


def test_the_order_of_results_does_not_matter() -> None:
    results = simulate(300, seed=6)
    shuffled = results[:]
    random.Random(0).shuffle(shuffled)
    a, b = fit_ratings(results), fit_ratings(shuffled)
    for name in NAMES:
        assert a[name].elo == pytest.approx(b[name].elo, abs=1e-6)


def test_no_results_no_ratings() -> None:
    assert fit_ratings([]) == {}


@pytest.mark.parametrize(
    "bad",
    [("a", "a", 1.0), ("a", "b", 1.5), ("a", "b", float("nan")), ("a", "", 1.0), ("a", "b")],
)
def test_malformed_results_are_rejected(bad: tuple) -> None:
    with pytest.raises(InvalidResultError):
        fit_ratings([bad])


def test_bad_settings_are_rating_errors() -> None:
    assert issubclass(RatingError, ValueError)
    with pytest.raises(InvalidResultError):
        GameResult("a", "b", 2)
    with pytest.raises(RatingError):
        fit_ratings([("a", "b", 1.0)], prior_games=0.0)
    with pytest.raises(RatingError):
        fit_ratings([("a", "b", 1.0)], confidence=1.0)
