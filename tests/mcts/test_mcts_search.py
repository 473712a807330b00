"""The search on positions with known answers, without a network (docs/style.md, principle 8)."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.features import apply_planes
from tabula.go.game import Game
from tabula.mcts import BatchedMCTS, SearchError, SearchParams
from tabula.mcts.trees import TERMINAL
from tests.helpers.mcts import (
    check_tree,
    game_from_diagram,
    hashed,
    path_moves,
    score_oracle,
    searched,
    uniform,
    vertex,
)

# Black to play: the white group in the corner (B5, A4, B4) is in atari at A5; capturing it
# turns the board black's, while elsewhere white's area wins.
CAPTURE = """
. O X . .
O O X . .
X X X O O
. . X O .
. . X O .
"""

# Black to play has no legal point: each empty point is a single-point eye of a white group
# with two eyes (suicide), so pass is the only legal move.
ONLY_PASS = """
. O O O .
O O O O O
O O . O O
O O O O O
. O O O O
"""


def test_visits_add_up_to_the_simulations() -> None:
    m = searched(Game(9), simulations=100)
    stats = m.root_stats(0)
    assert stats.visits.sum() == 100
    assert m.trees.N[0, 0] == 101  # + the root's own evaluation
    assert m.simulations == 100 and m.evaluations == 101
    check_tree(m, 0, Game(9))


@pytest.mark.parametrize("leaves", [1, 3, 8])
def test_virtual_loss_is_fully_undone(leaves: int) -> None:
    game = Game(7)
    for move in (24, 10, 30):
        game.play(move)
    m = searched(game, hashed, simulations=150, leaves_per_game=leaves, virtual_loss=2.5)
    assert m.root_stats(0).visits.sum() == 150
    check_tree(m, 0, game)


def test_finds_the_winning_capture() -> None:
    game = game_from_diagram(CAPTURE, to_play=1, komi=0.5)
    m = searched(game, score_oracle(0.5), simulations=200)
    assert m.root_stats(0).best_move == vertex(game, "A5")
    check_tree(m, 0, game)


def test_bandit_value_oracle_finds_the_good_child() -> None:
    """A black stone on one point wins (value 0.9 for Black); priors are uniform."""
    target = 17

    def oracle(planes, rng=None):
        priors, values = uniform(planes)
        black_to_play = planes[:, 16, 0, 0] == 1
        black = np.where(black_to_play[:, None, None], planes[:, 0], planes[:, 8])
        black = black.reshape(len(planes), -1)
        values[:] = np.where(black[:, target] == 1, 0.9, 0.0) * np.where(black_to_play, 1, -1)
        return priors, values

    m = searched(Game(5), oracle, simulations=200, random_symmetry=False)
    stats = m.root_stats(0)
    assert stats.best_move == target
    assert stats.best_value == pytest.approx(0.9, abs=0.05)
    assert stats.visits[target] > 0.5 * stats.visits.sum()


def test_only_pass_is_legal() -> None:
    game = game_from_diagram(ONLY_PASS, to_play=1)
    assert game.legal_mask().sum() == 1
    m = searched(game, simulations=40, leaves_per_game=8)  # collisions on the single path
    stats = m.root_stats(0)
    assert stats.visits[25] == 40 and stats.visits[:25].sum() == 0
    assert m.choose_move(0, 1.0) == 25
    check_tree(m, 0, game)


def test_one_point_and_pass() -> None:
    board = ONLY_PASS.replace("O O . O O", "O . . O O")  # C3 is now a legal black move
    game = game_from_diagram(board, to_play=1)
    m = searched(game, simulations=60)
    visits = m.root_stats(0).visits
    legal = np.flatnonzero(game.legal_mask())
    assert set(np.flatnonzero(visits)) <= set(legal.tolist())
    assert visits.sum() == 60
    check_tree(m, 0, game)


@pytest.mark.parametrize("fill_own_eyes", [False, True])
def test_own_eye_fills_are_searched_only_when_allowed(fill_own_eyes: bool) -> None:
    # Black's wall has single-point eyes at A5, E1 and C3: filling them is legal but pruned
    # unless `fill_own_eyes`; the other empty points stay searchable either way.
    game = game_from_diagram(
        """
        . X . . .
        X X X X X
        X X . X X
        X X X X X
        . . X X .
        """,
        to_play=1,
    )
    eyes = [vertex(game, v) for v in ("A5", "C3", "E1")]
    others = [vertex(game, v) for v in ("C5", "D5", "E5", "A1", "B1")]
    assert all(game.is_legal(p) for p in eyes + others)
    m = searched(game, hashed, simulations=200, fill_own_eyes=fill_own_eyes)
    P = m.trees.P[0, 0]
    assert ((P[eyes] >= 0) == fill_own_eyes).all()
    assert (P[others] >= 0).all() and P[25] < 0  # no early pass while a real move remains
    check_tree(m, 0, game)


@pytest.mark.parametrize("own_area_pass", [False, True])
def test_own_area_fills_leave_pass_open_only_when_asked(own_area_pass: bool) -> None:
    # Black's only legal moves but the eyes lie in its own area, the region B1-D1 and C2 that
    # reaches black alone (white's points are suicide for black): filling it gains nothing.
    # Pass is searched there only with `own_area_pass`; once white invades, the region
    # reaches white too and black must answer.
    game = game_from_diagram(
        """
        . X O O .
        X X O . O
        X X X O O
        X X . X X
        X . . . X
        """,
        to_play=1,
    )
    m = searched(game, hashed, simulations=200, own_area_pass=own_area_pass, fill_own_eyes=False)
    P = m.trees.P[0, 0]
    assert (P[25] >= 0) == own_area_pass
    assert all(P[vertex(game, v)] >= 0 for v in ("C2", "B1", "C1", "D1"))
    check_tree(m, 0, game)
    invaded = game_from_diagram(
        """
        . X O O .
        X X O . O
        X X X O O
        X X . X X
        X . O . X
        """,
        to_play=1,
    )
    m = searched(invaded, hashed, simulations=200, own_area_pass=True, fill_own_eyes=False)
    assert m.trees.P[0, 0][25] < 0
    check_tree(m, 0, invaded)


def test_when_only_own_eye_fills_remain_the_search_passes() -> None:
    game = game_from_diagram(ONLY_PASS.replace("O", "x").replace("X", "O").replace("x", "X"))
    assert game.legal_mask().sum() == 5  # four own-eye fills and pass
    m = searched(game, simulations=30)
    stats = m.root_stats(0)
    assert stats.visits[25] == 30 and m.choose_move(0, 1.0) == 25
    check_tree(m, 0, game)


def test_illegal_moves_never_get_visits() -> None:
    # After Black takes the ko at C3, White may not retake at B3 (positional superko); A1 is
    # suicide for White; stones occupy the rest.
    game = game_from_diagram(
        """
        . . . O .
        . X O . O
        X O . O .
        X X O . .
        . X . . .
        """,
        to_play=1,
    )
    game.play(vertex(game, "C3"), 1)  # captures B3: White may not retake at once
    ko, suicide = vertex(game, "B3"), vertex(game, "A1")
    assert not game.is_legal(ko) and not game.is_legal(suicide)
    m = searched(game, hashed, simulations=300, leaves_per_game=4)
    visits = m.root_stats(0).visits
    assert (visits[~game.legal_mask()] == 0).all()
    assert m.trees.P[0, 0, ko] < 0 and m.trees.P[0, 0, suicide] < 0
    check_tree(m, 0, game)  # every node's mask, superko along the path included


def test_pass_ends_a_won_game_and_is_valued_by_the_score() -> None:
    game = game_from_diagram(CAPTURE.replace("O O", "X X", 1), to_play=-1, komi=0.5)
    game.play(25, -1)  # white passed: black passing now ends the game
    assert game.score() > 0
    m = searched(game, simulations=100)
    t = m.trees
    pass_child = t.child[0, 0, 25]
    assert t.state[0, pass_child] == TERMINAL
    assert t.value[0, pass_child] == -1  # from white's view: the game is lost
    assert m.root_stats(0).best_move == 25
    assert t.W[0, pass_child] / t.N[0, pass_child] == 1.0  # Q for black
    check_tree(m, 0, game)


def test_losing_side_does_not_pass_into_a_loss() -> None:
    game = game_from_diagram(CAPTURE.replace("O O", "X X", 1), to_play=1, komi=0.5)
    game.play(25, 1)  # black passed; white, behind on the board, to play
    m = searched(game, simulations=100)
    t = m.trees
    pass_child = t.child[0, 0, 25]
    assert t.W[0, pass_child] / t.N[0, pass_child] == -1.0
    assert m.root_stats(0).best_move != 25


def test_move_limit_is_terminal() -> None:
    """At move 2 N^2 - 1 every child ends the game and is valued by the score."""
    rng = np.random.default_rng(3)
    game = Game(5, komi=0.5)
    while game.move_number < 49:
        legal = np.flatnonzero(game.legal_mask()[:25])
        game.play(int(rng.choice(legal)) if len(legal) else 25)
        assert not game.is_over()
    m = searched(game, simulations=50)
    t = m.trees
    assert all(t.state[0, c] == TERMINAL for c in t.child[0, 0] if c >= 0)
    check_tree(m, 0, game)
    move = m.choose_move(0, 0.0)
    m.play(0, move)
    assert m.is_over(0)
    game.play(move)
    assert m.score(0) == game.score()


def test_terminal_root_searches_nothing() -> None:
    game = Game(5)
    game.play(25)
    game.play(25)
    m = searched(game, simulations=10)
    assert m.is_over(0) and m.root_stats(0).visits.sum() == 0
    with pytest.raises(SearchError):
        m.play(0, 25)


def test_tree_reuse_keeps_the_subtree() -> None:
    game = Game(7)
    m = searched(game, hashed, simulations=200)
    best = m.root_stats(0).best_move
    child = m.trees.child[0, 0, best]
    kept_n, kept_w = int(m.trees.N[0, child]), float(m.trees.W[0, child])
    grandchildren = {
        a: int(m.trees.N[0, c]) for a, c in enumerate(m.trees.child[0, child]) if c >= 0
    }
    assert m.play(0, best)
    game.play(best)
    t = m.trees
    assert (t.N[0, 0], t.W[0, 0]) == (kept_n, pytest.approx(kept_w))
    visits = m.root_stats(0).visits
    assert {a: int(v) for a, v in enumerate(visits) if v} == grandchildren
    check_tree(m, 0, game)
    m.search([0], hashed)
    assert m.root_stats(0).visits.sum() == kept_n - 1 + 200
    check_tree(m, 0, game)


def test_unvisited_move_starts_a_fresh_root() -> None:
    game = Game(7)
    m = searched(game, simulations=20)
    move = int(np.flatnonzero(m.root_stats(0).visits == 0)[0])
    assert not m.play(0, move)
    game.play(move)
    assert m.trees.size[0] == 1
    m.search([0], uniform)
    assert m.root_stats(0).visits.sum() == 20
    check_tree(m, 0, game)


def test_small_capacity_drops_a_big_subtree() -> None:
    game = Game(5)
    m = BatchedMCTS(
        1, 5, 7.5, SearchParams(algorithm="puct", simulations=30, noise=False), capacity=31
    )
    m.reset(0, np.random.default_rng(0), game)
    for _ in range(6):
        m.search([0], hashed)
        assert m.root_stats(0).visits.sum() >= 30
        check_tree(m, 0, game)
        move = m.choose_move(0, 0.0)
        m.play(0, move)
        game.play(move)
    assert m.dropped > 0 and m.reused + m.dropped <= 6


def test_noise_touches_the_root_only() -> None:
    game = Game(7)
    quiet = searched(game, hashed, simulations=1, noise=False, random_symmetry=False)
    noisy = searched(game, hashed, simulations=300, noise=True, random_symmetry=False,
                     dirichlet_alpha=0.3, dirichlet_epsilon=0.25)  # fmt: skip
    p0, p = quiet.trees.P[0, 0], noisy.trees.P[0, 0]
    assert not np.allclose(p0, p) and abs(p[p >= 0].sum() - 1) < 1e-5
    assert (p[p >= 0] >= 0.75 * p0[p0 >= 0] - 1e-6).all()  # (1 - eps) p + eps eta
    # Every other node has exactly the network's priors over its legal moves.
    t = noisy.trees
    for n in range(1, int(t.size[0])):
        if t.state[0, n] != 1:
            continue
        priors, _ = hashed(noisy_planes(noisy, n))
        legal = t.P[0, n] >= 0
        expected = priors[0][legal] / priors[0][legal].sum()
        np.testing.assert_allclose(t.P[0, n][legal], expected, rtol=1e-5)


def noisy_planes(m: BatchedMCTS, node: int) -> np.ndarray:
    game = Game(7)
    for move in path_moves(m, 0, node):
        game.play(move)
    return game.features()[None]


def test_a_reused_root_gets_fresh_noise() -> None:
    game = Game(7)
    m = searched(game, hashed, simulations=100, noise=True, dirichlet_alpha=0.3)
    best = m.root_stats(0).best_move
    before = m.trees.P[0, m.trees.child[0, 0, best]].copy()
    m.play(0, best)
    m.start([0])
    after = m.trees.P[0, 0]
    assert not np.allclose(before, after)
    assert ((before >= 0) == (after >= 0)).all()


def test_random_symmetry_maps_priors_back() -> None:
    """An equivariant evaluator (prior on the points next to the opponent's stone, in
    whatever frame it is shown) must give the same root P under every transform drawn."""
    seen = set()

    def next_to_stone(planes, rng=None):
        stones = planes[:, 8].astype(bool)
        seen.update(int(np.flatnonzero(s.ravel())[0]) for s in stones)
        near = np.zeros_like(stones)
        near[:, 1:, :] |= stones[:, :-1, :]
        near[:, :-1, :] |= stones[:, 1:, :]
        near[:, :, 1:] |= stones[:, :, :-1]
        near[:, :, :-1] |= stones[:, :, 1:]
        B, M = len(planes), stones[0].size
        priors = np.full((B, M + 1), 1e-3, np.float32)
        priors[:, :M] += near.reshape(B, M)
        return priors / priors.sum(1, keepdims=True), np.zeros(B, np.float32)

    game = Game(7)
    game.play(10)  # row 1, col 3: no symmetry of the board maps it to itself
    for seed in range(12):
        m = searched(game, next_to_stone, simulations=1, seed=seed)
        p = m.trees.P[0, 0]
        assert set(np.argsort(p)[-4:].tolist()) == {3, 9, 11, 17}
    assert len(seen) > 4  # the evaluator was shown several different frames


def test_bad_evaluator_answer_is_refused() -> None:
    def wrong(planes, rng=None):
        return np.zeros((len(planes), 10), np.float32), np.zeros(len(planes), np.float32)

    m = BatchedMCTS(1, 5, 7.5, SearchParams(algorithm="puct", simulations=4))
    m.reset(0, np.random.default_rng(0))
    with pytest.raises(SearchError, match="expected"):
        m.search([0], wrong)


def test_illegal_move_to_play_is_refused() -> None:
    m = searched(Game(5), simulations=4)
    m.play(0, 12)
    with pytest.raises(SearchError, match="occupied"):
        m.play(0, 12)


@pytest.mark.parametrize("symmetry", [False, True])
def test_each_node_is_evaluated_once_on_its_own_planes(symmetry: bool) -> None:
    """The planes sent to the network are the node's position with its history (the search
    path, then the real game's earlier boards), under one of the 8 transforms."""
    game = Game(5)
    for move in (12, 6, 18, 25, 7):
        game.play(move)
    shown: list[np.ndarray] = []

    def recording(planes, rng=None):
        shown.extend(planes.copy())
        return hashed(planes)

    m = searched(game, recording, simulations=60, random_symmetry=symmetry, leaves_per_game=3)
    t = m.trees
    expanded = [n for n in range(int(t.size[0])) if t.state[0, n] == 1]
    assert len(shown) == len(expanded) == m.evaluations
    remaining = [p.tobytes() for p in shown]
    for n in expanded:
        replay = game.copy()
        for move in path_moves(m, 0, n):
            replay.play(move)
        planes = replay.features()
        frames = [apply_planes(k, planes).tobytes() for k in range(8 if symmetry else 1)]
        match = next(f for f in frames if f in remaining)
        remaining.remove(match)
    assert not remaining


def test_a_finished_game_is_not_searched() -> None:
    game = Game(5)
    rng = np.random.default_rng(0)
    while game.move_number < 60:  # past the 2 N^2 limit: Game does not refuse moves
        legal = np.flatnonzero(game.legal_mask()[:25])
        game.play(int(rng.choice(legal)) if len(legal) else 25)
    m = searched(game, simulations=8)
    assert m.is_over(0) and m.root_stats(0).visits.sum() == 0


def test_a_score_utility_values_a_finished_game_by_its_result_and_its_score() -> None:
    """search.score_utility: a finished game's value is (result + w 2/pi atan(margin / (2 N)))
    / (1 + w) from the side to move (KataGo's static score utility), in [-1, 1]; the game's
    own result (`final_value`) stays +1 / -1."""
    game = game_from_diagram(CAPTURE.replace("O O", "X X", 1), to_play=-1, komi=0.5)
    game.play(25, -1)  # white passed: black passing now ends the game, won by the score
    margin = game.score()
    m = searched(game, simulations=100, score_utility=0.5)
    t = m.trees
    pass_child = t.child[0, 0, 25]
    share = 2 / np.pi * np.arctan(-margin / 10.0)  # white's view, scale 2.0 points a line
    assert t.value[0, pass_child] == pytest.approx((-1 + 0.5 * share) / 1.5, abs=1e-6)
    assert -1 < t.value[0, pass_child] < -0.5
    assert m.root_stats(0).best_move == 25  # the win is still taken
    check_tree(m, 0, game)
    m.play(0, 25)
    assert m.is_over(0) and m.final_value(0) == -1.0  # white to move, lost: the result alone
