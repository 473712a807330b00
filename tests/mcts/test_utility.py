"""The search's utility: the win/loss value with a share of the score (tabula.mcts.utility)."""

from __future__ import annotations

import numpy as np

from tabula.mcts.utility import utilities, utility


def test_no_weight_is_the_value_alone() -> None:
    for v, s in ((1.0, -30.0), (-1.0, 80.0), (0.25, 0.0)):
        assert utility(v, s, 0.0, 18.0) == v
    values = np.array([0.5, -0.75], np.float32)
    np.testing.assert_array_equal(utilities(values, np.array([10.0, -3.0]), 0.0, 18.0), values)


def test_bounded_and_increasing_in_the_score() -> None:
    scores = np.linspace(-400.0, 400.0, 81)
    for v in (-1.0, 0.0, 1.0):
        got = np.array([utility(v, s, 0.4, 18.0) for s in scores])
        assert (np.diff(got) > 0).all() and (np.abs(got) <= 1).all()
    assert utility(1.0, 0.0, 0.4, 18.0) == 1 / 1.4  # a win by nothing: the score adds nothing
    assert utility(-1.0, -18.0, 1.0, 18.0) == (-1 - 0.5) / 2  # atan(-1) = -pi/4


def test_the_batched_form_is_the_scalar_one() -> None:
    rng = np.random.default_rng(0)
    values, scores = rng.uniform(-1, 1, 50).astype(np.float32), rng.normal(0, 30, 50)
    got = utilities(values, scores, 0.3, 18.0)
    assert got.dtype == np.float32
    want = [utility(float(v), float(s), 0.3, 18.0) for v, s in zip(values, scores, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
