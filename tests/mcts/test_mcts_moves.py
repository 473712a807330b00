"""After a search: the move at temperature tau (pi ~ N^(1/tau); tau -> 0 the most visited), and
the per-move work for many slots at once (`BatchedMCTS.roots`, `choose_moves`, `play_many`):
the same answers as one slot at a time, and all-or-nothing on a bad move."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tabula.go.game import Game
from tabula.mcts import BatchedMCTS, SearchError, SearchParams
from tabula.mcts.trees import KEPT
from tests.helpers.mcts import hashed, searched


def searched_slots(games: int = 4, size: int = 7, seed: int = 0) -> BatchedMCTS:
    m = BatchedMCTS(games, size, 7.5, SearchParams(algorithm="puct", simulations=40, noise=True))
    for s in range(games):
        m.reset(s, np.random.default_rng([seed, s]))
    m.search(np.arange(games), hashed)
    return m


def test_roots_of_many_slots_match_each_slot_alone() -> None:
    m = searched_slots()
    r = m.roots([3, 0, 2])
    for i, s in enumerate([3, 0, 2]):
        one = m.root_stats(s)
        np.testing.assert_array_equal(r.visits[i], one.visits)
        assert r.best_move[i] == one.best_move and r.visits[i].sum() == 40
        assert r.value[i] == pytest.approx(one.value) and -1 <= one.value <= 1
        assert r.best_value[i] == pytest.approx(one.best_value)


def test_choosing_together_draws_what_each_slot_draws_alone() -> None:
    m = searched_slots()
    apart = copy.deepcopy(m)
    slots = np.arange(4)
    visits = m.roots(slots).visits
    tau = np.array([1.0, 0.0, 1.0, 0.0])
    together = m.choose_moves(slots, tau, visits)
    alone = [apart.choose_move(s, tau[s], visits[s]) for s in slots]
    assert together.tolist() == alone
    assert together[1] == np.argmax(visits[1]) or visits[1, together[1]] == visits[1].max()


def test_temperature_zero_takes_the_most_visited() -> None:
    m = searched(Game(7), hashed, simulations=200)
    visits = m.root_stats(0).visits
    assert m.choose_move(0, 0.0) == int(np.argmax(visits))
    tied = np.zeros(50, np.int32)
    tied[[3, 7]] = 5
    picks = {m.choose_move(0, 0.0, tied) for _ in range(40)}
    assert picks == {3, 7}


def test_temperature_one_samples_in_proportion() -> None:
    m = searched(Game(5), simulations=1)
    visits = np.zeros(26, np.int32)
    visits[[0, 1]] = [1, 3]
    draws = np.array([m.choose_move(0, 1.0, visits) for _ in range(2000)])
    assert set(draws) == {0, 1}
    assert 0.7 < (draws == 1).mean() < 0.8


def test_temperature_sharpens_the_visit_distribution() -> None:
    """pi ~ N^(1/tau): visits 1 and 3 at tau = 0.5 weigh 1 and 9."""
    m = searched_slots(games=1)
    visits = np.zeros(50, np.int32)
    visits[[4, 9]] = [1, 3]
    draws = m.choose_moves(np.zeros(4000, np.int64), np.full(4000, 0.5), np.tile(visits, (4000, 1)))
    assert set(draws.tolist()) == {4, 9}
    assert 0.88 < (draws == 9).mean() < 0.92


def test_play_many_plays_every_move_and_reuses_the_subtrees() -> None:
    m = searched_slots()
    slots = np.arange(4)
    best = m.roots(slots).best_move
    outcome = m.play_many(slots, best)
    assert (outcome == KEPT).all() and m.reused == 4
    for s in slots:
        game = Game(7)
        game.play(int(best[s]))
        np.testing.assert_array_equal(m.board(int(s)), game.board.ravel())


def test_one_illegal_move_plays_none_and_names_it() -> None:
    m = searched_slots()
    m.play_many([1], [24])
    boards = [m.board(s).copy() for s in range(4)]
    with pytest.raises(SearchError, match=r"slot 1: move 24 is illegal \(occupied"):
        m.play_many([0, 1, 2], [10, 24, 11])
    for s in range(4):
        np.testing.assert_array_equal(m.board(s), boards[s])
    assert m.move_number(0) == 0 and m.move_number(1) == 1


def test_choosing_without_a_search_is_refused() -> None:
    m = BatchedMCTS(2, 5, 7.5, SearchParams(algorithm="puct", simulations=4))
    m.reset(0, np.random.default_rng(0))
    with pytest.raises(SearchError, match="slot 1 has no game"):
        m.choose_moves([1], np.ones(1), np.ones((1, 26), np.int32))
    with pytest.raises(SearchError, match="slot 0: no visits"):
        m.choose_moves([0], np.ones(1), np.zeros((1, 26), np.int32))
