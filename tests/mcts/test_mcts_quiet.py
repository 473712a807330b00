"""Quiet searches (the cheap searches of playout caps, as KataGo's: Wu 2019, section 3.1): with
noise on in the params, a search started ``quiet`` draws no root noise, PUCT's and Gumbel's
alike, and a search started after it draws its noise again."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.go.game import Game
from tabula.mcts import BatchedMCTS, SearchParams
from tests.helpers.mcts import hashed


def _search(algorithm: str, quiet: bool, reuse: BatchedMCTS | None = None) -> BatchedMCTS:
    params = SearchParams(algorithm=algorithm, simulations=16, leaves_per_game=2, noise=True,
                          random_symmetry=False, dirichlet_alpha=0.3,
                          dirichlet_epsilon=0.25)  # fmt: skip
    m = reuse or BatchedMCTS(1, 7, 7.5, params)
    if reuse is None:
        m.reset(0, np.random.default_rng(5), Game(7))
    m.start([0], quiet=quiet)
    active = m.unfinished([0])
    leaves = m.new_leaves(4)
    while len(active):
        n = m.gather(active, leaves)
        if n:
            m.backup(leaves, n, *hashed(leaves.planes[:n]))
        active = m.unfinished(active)
    return m


def _network_priors(m: BatchedMCTS) -> np.ndarray:
    priors, _ = hashed(Game(7).features()[None])
    legal = m.trees.P[0, 0] >= 0
    return priors[0][legal] / priors[0][legal].sum()


def test_a_quiet_puct_search_keeps_the_network_priors_at_the_root():
    quiet, noisy = _search("puct", True), _search("puct", False)
    legal = quiet.trees.P[0, 0] >= 0
    np.testing.assert_allclose(quiet.trees.P[0, 0][legal], _network_priors(quiet), rtol=1e-5)
    assert not np.allclose(noisy.trees.P[0, 0][legal], _network_priors(noisy), rtol=1e-3)


@pytest.mark.parametrize("first_quiet", [True, False])
def test_a_quiet_gumbel_search_draws_no_gumbel_noise(first_quiet: bool):
    m = _search("gumbel", first_quiet)
    drawn = m.trees.gumbel[0][m.trees.P[0, 0] >= 0]
    assert (drawn == 0.0).all() == first_quiet  # noise, or none
    m = _search("gumbel", not first_quiet, reuse=m)  # the next search of the same game
    drawn = m.trees.gumbel[0][m.trees.P[0, 0] >= 0]
    assert (drawn == 0.0).all() == (not first_quiet)


def test_without_noise_a_quiet_search_is_the_search():
    params = SearchParams(algorithm="gumbel", simulations=16, noise=False, random_symmetry=False)
    runs = []
    for quiet in (False, True):
        m = BatchedMCTS(1, 7, 7.5, params)
        m.reset(0, np.random.default_rng(5), Game(7))
        m.search([0], hashed, quiet=quiet)
        runs.append(m.decide([0]))
    assert runs[0].move[0] == runs[1].move[0]
    np.testing.assert_array_equal(runs[0].policy, runs[1].policy)
