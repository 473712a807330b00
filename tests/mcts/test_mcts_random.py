"""The search kernels' per-game random streams (`tabula.mcts.random`) and the root noise drawn
from them: the right distributions (Kolmogorov-Smirnov tests against scipy, fixed seeds, so a
failure is a real change), and streams that do not depend on each other."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit
from scipy import stats

from tabula.go.game import Game
from tabula.mcts import BatchedMCTS, SearchParams
from tabula.mcts.kernels import add_root_noise
from tabula.mcts.random import gamma, normal, uniform

KINDS = {"uniform": 0, "normal": 1, "gamma": 2}


@njit(cache=True)
def _draw(state, g, kind, alpha, n):
    out = np.empty(n)
    for i in range(n):
        if kind == 0:
            out[i] = uniform(state, g)
        elif kind == 1:
            out[i] = normal(state, g)
        else:
            out[i] = gamma(state, g, alpha)
    return out


def draws(kind: str, n: int = 20_000, alpha: float = 1.0, seed: int = 12345) -> np.ndarray:
    state = np.array([seed], dtype=np.uint64)
    return _draw(state, 0, KINDS[kind], alpha, n)


def test_uniform_is_uniform_on_the_unit_interval() -> None:
    x = draws("uniform")
    assert x.min() >= 0.0 and x.max() < 1.0
    assert stats.kstest(x, "uniform").pvalue > 1e-3


def test_normal_is_standard_normal() -> None:
    assert stats.kstest(draws("normal"), "norm").pvalue > 1e-3


# 0.03: the paper's alpha on 19x19; 0.134: its scaled 9x9 default; a shape above 1 too.
@pytest.mark.parametrize("alpha", [0.03, 0.134, 0.5, 1.0, 3.0])
def test_gamma_has_the_gamma_distribution(alpha: float) -> None:
    x = draws("gamma", alpha=alpha)
    assert (x >= 0).all() and np.isfinite(x).all()
    assert stats.kstest(x, stats.gamma(alpha).cdf).pvalue > 1e-3
    assert abs(x.mean() - alpha) < 4 * np.sqrt(alpha / len(x))  # variance alpha


def test_a_slot_draws_the_same_whatever_the_others_draw() -> None:
    alone = np.array([7, 0], dtype=np.uint64)
    shared = alone.copy()
    a = [uniform(alone, 0) for _ in range(5)]
    b = []
    for _ in range(5):
        b.append(uniform(shared, 0))
        uniform(shared, 1)
    assert a == b and shared[1] != alone[1]


def test_root_noise_is_a_dirichlet_mix_over_the_legal_moves() -> None:
    """P = (1 - eps) p + eps eta, eta ~ Dir(alpha): mean and variance of each legal move's
    noise match the Dirichlet's; illegal moves stay -1; the priors still sum to 1."""
    alpha, eps, draws_n = 0.3, 0.25, 4000
    m = BatchedMCTS(1, 5, 7.5, SearchParams(algorithm="puct", simulations=1, dirichlet_alpha=alpha))
    m.reset(0, np.random.default_rng(3), Game(5))
    P = m.trees.P[0, 0]
    p0 = np.full(26, -1.0, np.float32)
    legal = np.arange(26) % 3 != 0
    p0[legal] = np.linspace(1, 2, legal.sum()) / np.linspace(1, 2, legal.sum()).sum()
    eta = np.empty((draws_n, legal.sum()))
    for i in range(draws_n):
        P[:] = p0
        add_root_noise(m.trees, 0, alpha, eps)
        assert (P[~legal] == -1).all() and abs(P[legal].sum() - 1) < 1e-5
        eta[i] = (P[legal] - (1 - eps) * p0[legal]) / eps
    k = legal.sum()
    var = (1 / k) * (1 - 1 / k) / (k * alpha + 1)  # Dir(alpha, ..., alpha) marginal variance
    np.testing.assert_allclose(eta.mean(axis=0), 1 / k, atol=5 * np.sqrt(var / draws_n))
    np.testing.assert_allclose(eta.var(axis=0), var, rtol=0.2)
