"""The Gumbel search (`tabula.mcts.gumbel`): the Sequential Halving schedule, a bandit whose
best arm must win, pi' against hand-computed and from-scratch values, the policy-improvement
property, and the self-play loop's determinism with it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tabula.features import HISTORY
from tabula.mcts import BatchedMCTS, SearchParams
from tabula.mcts.gumbel import considered_visits, gumbel_decisions, improved_root_values
from tabula.mcts.trees import EXPANDED, new_trees
from tabula.selfplay import SelfPlayParams, play_games
from tests.helpers.mcts import hashed


def reference_schedule(m: int, n: int) -> list[int]:
    """Sequential Halving as Danihelka et al. state it, one list entry per simulation."""
    if m <= 1:
        return list(range(n))
    phases = math.ceil(math.log2(m))
    visits, out, considered = [0] * m, [], m
    while len(out) < n:
        for _ in range(max(1, n // (phases * considered))):
            out.extend(visits[:considered])
            for i in range(considered):
                visits[i] += 1
        considered = max(2, considered // 2)
    return out[:n]


@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 8, 16, 32])
@pytest.mark.parametrize("n", [1, 2, 5, 16, 50, 200])
def test_schedule_is_sequential_halving(m: int, n: int) -> None:
    out = np.full(n, -1, dtype=np.int32)
    considered_visits(m, n, out)
    assert out.tolist() == reference_schedule(m, n)


def test_schedule_examples() -> None:
    out = np.zeros(16, dtype=np.int32)
    considered_visits(8, 16, out)  # 8 moves once each, the best 4 once more, then 2 twice
    assert out.tolist() == [0] * 8 + [1] * 4 + [2, 2, 3, 3]


# -- a bandit: 25 arms (the first move on an empty 5x5 board), each with a fixed value ----

ARM_VALUES = np.linspace(-0.9, -0.5, 25)
BEST = 17
ARM_VALUES[BEST] = 0.9


def bandit(planes: np.ndarray, rng: np.random.Generator | None = None):
    """Uniform priors; the value of every position below an arm is that arm's value (from
    black's side), found as black's stone on the oldest non-empty board in the history; the
    empty root is worth 0."""
    B, M = planes.shape[0], planes.shape[2] * planes.shape[3]
    values = np.zeros(B, np.float32)
    for i in range(B):
        black_to_move = planes[i, 2 * HISTORY, 0, 0] == 1
        black = planes[i, :HISTORY] if black_to_move else planes[i, HISTORY : 2 * HISTORY]
        played = [t for t in range(HISTORY) if black[t].any()]
        if not played:  # the root: the empty board
            continue
        (arm,) = np.flatnonzero(black[played[-1]])
        values[i] = ARM_VALUES[arm] if black_to_move else -ARM_VALUES[arm]
    return np.full((B, M + 1), 1.0 / (M + 1), np.float32), values


def gumbel_params(noise: bool = True, **changes: object) -> SearchParams:
    settings = {"algorithm": "gumbel", "simulations": 200, "gumbel_m": 32, "leaves_per_game": 1}
    return SearchParams(noise=noise, random_symmetry=False, **(settings | changes))


@pytest.mark.parametrize("noise", [False, True])
@pytest.mark.parametrize("leaves", [1, 4])
def test_the_best_arm_wins(noise: bool, leaves: int) -> None:
    search = BatchedMCTS(8, 5, 0.5, gumbel_params(noise, leaves_per_game=leaves))
    for slot in range(8):
        search.reset(slot, np.random.default_rng(slot))
    search.search(range(8), bandit)
    decided = search.decide(range(8))
    assert (decided.move == BEST).all()
    assert (decided.policy.argmax(axis=1) == BEST).all()
    visits = search.roots(range(8)).visits
    assert (visits.sum(axis=1) == 200).all()
    assert (visits[:, BEST] == visits.max(axis=1)).all()  # (the last two tie on visits)


def test_few_simulations_visit_the_top_of_gumbel_plus_logits() -> None:
    """With n <= m, each simulation visits a new move, in the order of g + logits."""
    search = BatchedMCTS(1, 5, 0.5, gumbel_params(simulations=6))
    search.reset(0, np.random.default_rng(3))
    search.search([0], bandit)
    visits = search.roots([0]).visits[0]
    t = search.trees
    score = t.gumbel[0] + np.log(np.maximum(t.P[0, 0], 1e-30))
    score[t.P[0, 0] < 0] = -np.inf
    assert set(np.flatnonzero(visits)) == set(np.argsort(-score)[:6])
    assert visits.max() == 1


# -- pi' ----------------------------------------------------------------------------------


def hand_tree(P: list[float], visits: list[int], W: list[float], value: float):
    """A one-game tree whose root has priors P (-1 illegal) and children with N and W."""
    A = len(P)
    t = new_trees(1, A + 1, A - 1, 8)
    t.state[0, 0] = EXPANDED
    t.value[0, 0] = value
    t.P[0, 0] = P
    t.child[0, 0] = -1
    size = 1
    for a, (n, w) in enumerate(zip(visits, W, strict=True)):
        if n:
            t.child[0, 0, a] = size
            t.N[0, size], t.W[0, size] = n, w
            size += 1
    t.size[0] = size
    t.N[0, 0] = 1 + sum(visits)
    return t


def decide(t, **changes: object):
    knobs = SearchParams(algorithm="gumbel", **changes).knobs()
    move = np.zeros(1, dtype=np.int64)
    policy = np.zeros((1, t.P.shape[2]), dtype=np.float32)
    gumbel_decisions(t, np.zeros(1, dtype=np.int64), knobs, move, policy)
    return int(move[0]), policy[0]


def test_policy_target_by_hand() -> None:
    """P = (.5, .3, .2, illegal); a0 visited twice (Q .5), a1 once (Q -.5), a2 never;
    the root's own value .1.

    v_mix = (.1 + 3 (.5 * .5 + .3 * -.5) / .8) / 4 = .11875; completed Q = (.5, -.5, .11875),
    rescaled (1, 0, .61875); sigma = (50 + 2) .1 q_hat = (5.2, 0, 3.2175);
    pi' ~ P exp(sigma) = (.5 e^5.2, .3, .2 e^3.2175)."""
    t = hand_tree([0.5, 0.3, 0.2, -1.0], [2, 1, 0, 0], [1.0, -0.5, 0.0, 0.0], 0.1)
    move, pi = decide(t)
    raw = np.array([0.5 * math.exp(5.2), 0.3, 0.2 * math.exp(3.2175), 0.0])
    np.testing.assert_allclose(pi, raw / raw.sum(), rtol=1e-5)
    assert move == 0  # the most visited move


def reference_policy(P: np.ndarray, N: np.ndarray, W: np.ndarray, value: float,
                     c_visit: float = 50.0, c_scale: float = 0.1):  # fmt: skip
    """(pi', completed Q) from the paper's formulas, in numpy (illegal moves: P < 0)."""
    legal = P >= 0
    p = np.where(legal, np.maximum(P, 1e-30), 0.0)
    visited = legal & (N > 0)
    q = np.where(visited, W / np.maximum(N, 1), 0.0)
    if visited.any():
        v_mix = (value + N.sum() * (p * q)[visited].sum() / p[visited].sum()) / (1 + N.sum())
    else:
        v_mix = value
    completed = np.where(visited, q, v_mix)
    lo, hi = completed[legal].min(), completed[legal].max()
    sig = (c_visit + N.max()) * c_scale * (completed - lo) / max(hi - lo, 1e-8)
    logits = np.where(legal, np.log(p, where=legal, out=np.full_like(p, -np.inf)) + sig, -np.inf)
    pi = np.exp(logits - logits[legal].max())
    return pi / pi.sum(), completed


def random_tree(rng: np.random.Generator, A: int = 12):
    P = rng.dirichlet(np.ones(A) * 0.5)
    P[rng.random(A) < 0.2] = -1.0
    P[0] = abs(P[0])  # at least one legal move
    N = np.where((P >= 0) & (rng.random(A) < 0.6), rng.integers(1, 20, A), 0)
    W = N * rng.uniform(-1, 1, A)
    return P, N, W, float(rng.uniform(-1, 1))


def test_policy_target_matches_the_formulas_on_random_trees() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        P, N, W, value = random_tree(rng)
        _, pi = decide(hand_tree(P.tolist(), N.tolist(), W.tolist(), value))
        expected, _ = reference_policy(P, N, W, value)
        np.testing.assert_allclose(pi, expected, rtol=1e-4, atol=1e-7)


def test_policy_improvement_on_random_trees() -> None:
    """E_pi'[completed Q] >= E_prior[completed Q] (the paper's policy-improvement property)."""
    rng = np.random.default_rng(11)
    for _ in range(1000):
        P, N, W, value = random_tree(rng)
        _, pi = decide(hand_tree(P.tolist(), N.tolist(), W.tolist(), value))
        _, completed = reference_policy(P, N, W, value)
        prior = np.where(P >= 0, P, 0.0)
        prior /= prior.sum()
        assert (pi * completed).sum() >= (prior * completed).sum() - 1e-6


def test_the_move_is_the_best_of_the_most_visited() -> None:
    """Two moves tie at the most visits: the one with the higher completed Q is played."""
    t = hand_tree([0.4, 0.4, 0.2], [3, 3, 1], [0.3, 1.5, 0.9], 0.0)
    assert decide(t)[0] == 1


# -- the search and the self-play loop ----------------------------------------------------


def test_simulation_count_and_tree_invariants() -> None:
    search = BatchedMCTS(5, 7, 7.5, SearchParams(algorithm="gumbel", simulations=24,
                                                 gumbel_m=8, leaves_per_game=4))  # fmt: skip
    for slot in range(5):
        search.reset(slot, np.random.default_rng(slot))
    for _ in range(6):
        search.search(range(5), hashed)
        roots = search.roots(range(5))
        assert (roots.visits.sum(axis=1) == 24).all()  # a fresh count every move
        t = search.trees
        for g in range(5):
            for node in range(t.size[g]):
                if t.state[g, node] == EXPANDED:
                    kids = t.child[g, node][t.child[g, node] >= 0]
                    assert t.N[g, node] == 1 + t.N[g, kids].sum()
        search.play_many(range(5), search.decide(range(5)).move)


def test_unsearched_root_and_a_search_bigger_than_the_tree_are_errors() -> None:
    search = BatchedMCTS(1, 5, 0.5, SearchParams(algorithm="gumbel", simulations=8))
    search.reset(0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="no search at the root"):
        search.decide([0])
    with pytest.raises(ValueError, match="27 simulations need a capacity above 27"):
        search.start([0], simulations=27)


def selfplay_params(**changes: object) -> SelfPlayParams:
    base = SelfPlayParams(
        board_size=5,
        komi=0.5,
        search=SearchParams(algorithm="gumbel", simulations=12, gumbel_m=6, leaves_per_game=3),
        temperature_moves=4,
        v_resign=-0.9,
        resign_disabled_fraction=0.5,
        concurrent_games=4,
        batch_size=7,
    )
    return dataclasses.replace(base, **changes)


def play(p: SelfPlayParams, n: int, seed: int = 0, **kw: object):
    records = list(play_games(hashed, p, n, np.random.default_rng(seed), **kw))
    return sorted(records, key=lambda r: r.index)


@pytest.mark.parametrize("changes", [{"concurrent_games": 1}, {"concurrent_games": 6},
                                     {"batch_size": 3}])  # fmt: skip
def test_gumbel_games_do_not_depend_on_the_others(changes: dict[str, int]) -> None:
    reference = play(selfplay_params(), 6)
    for overlap in (False, True):
        other = play(selfplay_params(**changes), 6, overlap=overlap)
        for a, b in zip(reference, other, strict=True):
            assert (a.moves == b.moves).all() and (a.pi == b.pi).all()
            assert (a.root_values == b.root_values).all()


def test_gumbel_records_carry_the_improved_policy() -> None:
    records = play(selfplay_params(), 4)
    seeds = play(selfplay_params(), 4, seed=1)
    assert any(a.history() != b.history() for a, b in zip(records, seeds, strict=True))
    for r in records:
        np.testing.assert_allclose(r.pi.sum(axis=1), 1.0, rtol=1e-5)
        assert (r.pi > 0).sum(axis=1).max() > 12  # pi' covers unvisited moves, not 12 visits


# -- the improved root value ---------------------------------------------------------------


def improved(t, policy: np.ndarray) -> float:
    values = np.zeros(1)
    improved_root_values(t, np.zeros(1, dtype=np.int64), policy[None].astype(np.float32), values)
    return float(values[0])


def test_improved_root_value_by_hand() -> None:
    """The tree of `test_policy_target_by_hand`: completed Q = (.5, -.5, .11875), so the value
    of pi' is .5 pi'(a0) - .5 pi'(a1) + .11875 pi'(a2); the root's plain mean is
    (.1 + 1 - .5) / 4 = .15."""
    t = hand_tree([0.5, 0.3, 0.2, -1.0], [2, 1, 0, 0], [1.0, -0.5, 0.0, 0.0], 0.1)
    _, pi = decide(t)
    expected = 0.5 * pi[0] - 0.5 * pi[1] + 0.11875 * pi[2]
    assert improved(t, pi) == pytest.approx(expected, rel=1e-5)
    assert improved(t, np.array([0.0, 0.0, 1.0, 0.0])) == pytest.approx(0.11875, rel=1e-5)
    assert improved(t, np.array([0.0, 1.0, 0.0, 0.0])) == pytest.approx(-0.5, rel=1e-5)


def test_improved_root_value_matches_the_formulas_on_random_trees() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        P, N, W, value = random_tree(rng)
        t = hand_tree(P.tolist(), N.tolist(), W.tolist(), value)
        _, pi = decide(t)
        expected_pi, completed = reference_policy(P, N, W, value)
        assert improved(t, pi) == pytest.approx((expected_pi * completed).sum(), abs=1e-5)


def test_an_unexpanded_root_keeps_its_own_value() -> None:
    t = hand_tree([0.5, 0.5], [0, 0], [0.0, 0.0], 0.3)
    t.state[0, 0] = 0  # never expanded (a finished game's root)
    assert improved(t, np.array([0.5, 0.5])) == pytest.approx(0.3)
