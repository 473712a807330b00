"""The scores and ownership of an analysis, with a network-free evaluator whose answers are
known: it counts stones. Each node's score is its stone difference (plus one half) and its
ownership its stones, from its side to move, so a move's score and the root's ownership are
plain means that can be written down. The evaluator is equivariant, so whatever dihedral
transform the search evaluates a leaf under, the ownership must come back on the points the
stones are on."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.go import coords
from tabula.go.game import Game
from tabula.mcts import SearchParams
from tabula.mcts.analysis import Analysis, aux_of

N = 9
M = N * N


def stone_counter(planes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`EvaluateAux`: uniform priors, value 0, ownership = own stones - opponent's, score =
    their sum + 0.5 (all from the side to move)."""
    b = planes.shape[0]
    ownership = (planes[:, 0].astype(np.float32) - planes[:, 8]).reshape(b, M)
    priors = np.full((b, M + 1), 1.0 / (M + 1), np.float32)
    return priors, np.zeros(b, np.float32), ownership, ownership.sum(axis=1) + 0.5


def uniform(planes: np.ndarray, rng: object = None) -> tuple[np.ndarray, np.ndarray]:
    return stone_counter(planes)[:2]


def position() -> Game:
    """Black C7 and H8, white G3: white to move (an asymmetric position)."""
    game = Game(size=N, komi=7.5)
    for colour, vertex in ((1, "C7"), (-1, "G3"), (1, "H8")):
        game.play(coords.from_gtp(vertex, N), colour)
    return game


@pytest.mark.parametrize("seed", range(8))
def test_one_simulation_means_the_root_and_its_child(seed):
    analysis = Analysis(position(), SearchParams(), uniform, np.random.default_rng(seed),
                        aux=stone_counter)  # fmt: skip
    analysis.search_to(2)
    assert analysis.visits == 2
    (move,) = analysis.moves()
    # White's view: at the root 1 - 2 stones, after its move 2 - 2; plus one half for the
    # side to move at each (white at the root, black after the move: -0.5 for white).
    assert move.score == pytest.approx(-0.5)
    assert analysis.score() == pytest.approx(((1 - 2 + 0.5) + (2 - 2 - 0.5)) / 2)
    expected = np.zeros(M)
    expected[[coords.from_gtp(v, N) for v in ("C7", "H8")]] = -1.0
    expected[coords.from_gtp("G3", N)] = 1.0
    expected[move.move] = 0.5  # white's in one of the two visits
    assert analysis.ownership() == pytest.approx(expected)


def test_scores_follow_the_visits_of_a_larger_search():
    analysis = Analysis(position(), SearchParams(), uniform, np.random.default_rng(0),
                        aux=stone_counter)  # fmt: skip
    analysis.search_to(60)
    moves = analysis.moves()
    assert analysis.visits == 60 and sum(m.visits for m in moves) == 59
    # The root's mean is its own evaluation and its moves' means, weighted by their visits.
    total = (1 - 2 + 0.5) + sum(m.score * m.visits for m in moves)
    assert analysis.score() == pytest.approx(total / 60)
    ownership = analysis.ownership()
    assert ownership.shape == (M,) and np.abs(ownership).max() <= 1.0
    assert ownership[coords.from_gtp("G3", N)] == pytest.approx(1.0)  # never captured here


def test_without_the_heads_there_are_no_scores():
    analysis = Analysis(position(), SearchParams(), uniform, np.random.default_rng(0))
    analysis.search_to(10)
    assert analysis.score() is None and analysis.ownership() is None
    assert all(m.score is None for m in analysis.moves())
    assert aux_of(uniform) is None


def test_a_finished_game_is_its_result():
    game = Game(size=N, komi=7.5)
    game.play(coords.from_gtp("E5", N), 1)
    game.play(M, -1)
    game.play(M, 1)
    game.play(M, -1)  # (two passes in a row end it)
    analysis = Analysis(game, SearchParams(), uniform, np.random.default_rng(0),
                        aux=stone_counter)  # fmt: skip
    analysis.search_to(10)
    assert analysis.moves() == [] and analysis.value() == 1.0  # black, to move, won
    assert analysis.score() == pytest.approx(M - 7.5)
    assert analysis.ownership() == pytest.approx(np.ones(M))
