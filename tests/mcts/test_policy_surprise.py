"""KataGo's policy surprise weighting (``selfplay.policy_surprise_weight``): a game's full rows
share their weight by how far the search's policy target lies from the network's prior."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.config import load_config
from tabula.selfplay import SelfPlayParams, policy_surprise, surprise_weights
from tests.mcts.test_playout_caps import params, play


def test_the_surprise_is_the_kl_divergence_from_the_prior_to_the_target() -> None:
    prior = np.array([[0.5, 0.25, 0.25, 0.0], [0.5, 0.25, 0.25, 0.0]])
    policy = np.array([[0.5, 0.25, 0.25, 0.0], [0.0, 0.5, 0.5, 0.0]])
    np.testing.assert_allclose(policy_surprise(policy, prior), [0.0, np.log(2.0)])
    # a move the prior gave nothing stays finite (the prior floored as pi' floors it: 1e-30)
    far = policy_surprise(np.array([[0.0, 0.0, 0.0, 1.0]]), prior[:1])
    assert np.isfinite(far).all() and far[0] == pytest.approx(30 * np.log(10.0))


def test_the_weights_spread_a_share_by_surprise_and_keep_the_games_total() -> None:
    weights = surprise_weights(np.array([0.0, 1.0, 3.0]), 0.5)
    np.testing.assert_allclose(weights, [0.5, 0.875, 1.625])
    assert weights.sum() == pytest.approx(3.0) and weights.dtype == np.float32
    assert (surprise_weights(np.array([0.0, 1.0, 3.0]), 0.0) == 1.0).all()
    assert (surprise_weights(np.zeros(4), 0.5) == 1.0).all()  # nothing surprising
    assert surprise_weights(np.zeros(0), 0.5).shape == (0,)


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
def test_weighting_changes_only_the_rows_weights(algorithm: str) -> None:
    """The same games, move for move; the full rows of each game weigh as many as they are,
    the fast ones 1, and some full row weighs other than 1; without the switch every row
    weighs 1 (a run's shards stay as they were)."""
    plain = play(params(algorithm), 6)
    weighted = play(params(algorithm, surprise_weight=0.5), 6)
    spread = 0
    for a, b in zip(plain, weighted, strict=True):
        assert (a.moves == b.moves).all() and (a.pi == b.pi).all()
        assert (a.weights() == 1.0).all()
        assert b.surprise is not None and np.isfinite(b.surprise).all()
        # (the prior is a distribution over the legal moves: no clamped zero blows it up)
        assert (b.surprise >= -1e-6).all() and b.surprise.max() < 20.0
        w = b.weights()
        assert (w[~b.full_search] == 1.0).all() and (w > 0).all()
        assert w[b.full_search].sum() == pytest.approx(b.full_search.sum(), rel=1e-5)
        spread += int((np.abs(w[b.full_search] - 1.0) > 1e-3).sum())
    assert spread > 10


def test_surprise_weighting_from_config() -> None:
    assert SelfPlayParams.from_config(load_config(None)).surprise_weight == 0.0  # off
    cfg = load_config(None, ["selfplay.policy_surprise_weight=0.5"])
    assert SelfPlayParams.from_config(cfg).surprise_weight == 0.5
    with pytest.raises(ValueError, match="policy_surprise_weight"):
        load_config(None, ["selfplay.policy_surprise_weight=1.0"])
