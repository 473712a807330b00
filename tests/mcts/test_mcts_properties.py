"""Invariants of the search over many random positions and searches (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tabula.go.game import Game
from tabula.mcts import BatchedMCTS, SearchParams
from tests.helpers.mcts import check_tree, hashed


def random_game(size: int, moves: int, seed: int) -> Game:
    """A game of up to ``moves`` random legal moves (passes rare), stopped at its end."""
    rng = np.random.default_rng(seed)
    game = Game(size, komi=rng.choice([0.5, 5.5, 7.5]))
    for _ in range(moves):
        if game.is_over():
            break
        legal = np.flatnonzero(game.legal_mask())
        move = int(rng.choice(legal)) if rng.random() > 0.05 or game.passes else game.size**2
        if game.passes and move == game.size**2:
            break
        game.play(move)
    return game


params = st.builds(
    SearchParams,
    algorithm=st.sampled_from(["puct", "gumbel"]),
    simulations=st.integers(1, 80),
    c_puct=st.floats(0.1, 4.0),
    fpu=st.sampled_from([0.0, -1.0, 0.5]),
    leaves_per_game=st.integers(1, 8),
    virtual_loss=st.sampled_from([0.0, 1.0, 3.0]),
    noise=st.booleans(),
    dirichlet_alpha=st.sampled_from([0.03, 0.3]),
)


def search_along_a_game(size: int, moves: int, seed: int, p: SearchParams, turns: int) -> None:
    """After every search of a game played with tree reuse: N and W recount exactly (every
    virtual loss undone), every node's board, hash and side to move replay with `Game`, and
    every node's legal moves are exactly the engine's (superko along the path included)."""
    game = random_game(size, moves, seed)
    m = BatchedMCTS(1, size, game.komi, p)
    m.reset(0, np.random.default_rng(seed), game)
    for _ in range(turns):
        if game.is_over():
            assert m.is_over(0)
            break
        kept = int(m.trees.N[0, 0]) - 1 if m.trees.state[0, 0] == 1 else 0
        if p.config.algorithm == "gumbel":
            kept = 0  # its schedule counts the root's visits from zero (`tabula.mcts.gumbel`)
        m.search([0], hashed)
        assert m.root_stats(0).visits.sum() == kept + p.simulations
        check_tree(m, 0, game)
        move = m.choose_move(0, 1.0)
        assert game.is_legal(move)
        m.play(0, move)
        game.play(move)
        assert (m.board(0) == game.board.ravel()).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.sampled_from([5, 7, 9]),
    moves=st.integers(0, 60),
    seed=st.integers(0, 2**31),
    p=params,
    turns=st.integers(1, 4),
)
def test_tree_recounts_and_legality_along_a_game(size, moves, seed, p, turns) -> None:
    search_along_a_game(size, moves, seed, p, turns)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.sampled_from([5, 6, 9, 13, 19]),
    moves=st.integers(0, 400),
    seed=st.integers(0, 2**31),
    p=params,
    turns=st.integers(1, 6),
)
def test_tree_recounts_and_legality_many_games(size, moves, seed, p, turns) -> None:
    search_along_a_game(size, moves, seed, p, turns)


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), leaves=st.integers(1, 6))
def test_a_game_searched_among_others_is_searched_as_alone(algorithm, seed, leaves) -> None:
    """Slots do not interact: each slot's tree, given the same generator, ends up identical
    whether it is searched alone or batched with other games."""
    p = SearchParams(algorithm=algorithm, simulations=40, leaves_per_game=leaves, noise=True)
    games = [random_game(7, k * 7, seed + k) for k in range(4)]
    together = BatchedMCTS(4, 7, 7.5, p)
    for k, g in enumerate(games):
        together.reset(k, np.random.default_rng([seed, k]), g)
    together.search(range(4), hashed, max_batch=7)
    for k, g in enumerate(games):
        alone = BatchedMCTS(1, 7, 7.5, p)
        alone.reset(0, np.random.default_rng([seed, k]), g)
        alone.search([0], hashed)
        n = int(alone.trees.size[0])
        assert together.trees.size[k] == n
        for name in ("N", "W", "move", "parent"):
            a, b = getattr(alone.trees, name)[0, :n], getattr(together.trees, name)[k, :n]
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(alone.trees.P[0, :n], together.trees.P[k, :n])
