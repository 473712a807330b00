"""Search test helpers: network-free evaluators, positions from diagrams, and
from-scratch recounts of a tree (docs/style.md, principle 8: test search without a network).

Diagrams are in GTP orientation (row N on top), ``X`` black, ``O`` white, ``.`` empty.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tabula.go.board import area_score, rules_context
from tabula.go.coords import from_gtp
from tabula.go.game import Game
from tabula.mcts import BatchedMCTS, SearchParams
from tabula.mcts.trees import EXPANDED, TERMINAL, UNEXPANDED


def game_from_diagram(text: str, to_play: int = 1, komi: float = 0.5) -> Game:
    """A Game whose board is the diagram (stones placed one by one with their colours)."""
    rows = [line.split() for line in text.strip().splitlines()]
    board = np.array([[{"X": 1, "O": -1, ".": 0}[c] for c in r] for r in rows], np.int8).ravel()
    N = len(rows)
    game = Game(N, komi=komi)
    for p in np.flatnonzero(board):
        game.play(int(p), int(board[p]))
    game.to_play = to_play
    assert (game.board.ravel() == board).all()
    return game


def vertex(game: Game, name: str) -> int:
    return from_gtp(name, game.size)


def uniform(planes: np.ndarray, rng: np.random.Generator | None = None):
    """Uniform priors over all moves, value 0."""
    B, M = planes.shape[0], planes.shape[2] * planes.shape[3]
    return np.full((B, M + 1), 1.0 / (M + 1), np.float32), np.zeros(B, np.float32)


def hashed(planes: np.ndarray, rng: np.random.Generator | None = None):
    """Arbitrary but deterministic answers: each position's priors and value come from a
    generator seeded by its planes' bytes, so equal positions get equal answers in any batch."""
    B, M = planes.shape[0], planes.shape[2] * planes.shape[3]
    priors = np.empty((B, M + 1), np.float32)
    values = np.empty(B, np.float32)
    for i in range(B):
        r = np.random.default_rng(zlib.crc32(planes[i].tobytes()))
        p = r.dirichlet(np.ones(M + 1))
        priors[i], values[i] = p, r.uniform(-0.9, 0.9)
    return priors, values


def score_oracle(komi: float):
    """Value = the Tromp-Taylor result now, from the side to move (a perfect-ish endgame
    judge); priors uniform."""

    def evaluate(planes: np.ndarray, rng: np.random.Generator | None = None):
        B, N = planes.shape[0], planes.shape[2]
        nbr = rules_context(N).neighbors
        priors, values = uniform(planes)
        for i in range(B):
            black_to_play = planes[i, 16, 0, 0] == 1
            own = planes[i, 0].astype(np.int8).ravel()
            opp = planes[i, 8].astype(np.int8).ravel()
            board = own - opp if black_to_play else opp - own
            s = area_score(board, nbr) - komi
            values[i] = np.sign(s) * (1 if black_to_play else -1)
        return priors, values

    return evaluate


def searched(
    game: Game,
    evaluate=uniform,
    seed: int = 0,
    **params,
) -> BatchedMCTS:
    """A one-slot search from ``game``'s position, already run."""
    defaults = dict(algorithm="puct", simulations=64, leaves_per_game=4, noise=False)
    m = BatchedMCTS(1, game.size, game.komi, SearchParams(**(defaults | params)))
    m.reset(0, np.random.default_rng(seed), game)
    m.search([0], evaluate)
    return m


def path_moves(m: BatchedMCTS, g: int, node: int) -> list[int]:
    """The moves from the root to ``node``."""
    t = m.trees
    moves = []
    while node > 0:
        moves.append(int(t.move[g, node]))
        node = int(t.parent[g, node])
    return moves[::-1]


def search_mask(
    game: Game, early_pass: bool, fill_own_eyes: bool = True, own_area_pass: bool = False
) -> np.ndarray:
    """The moves a search may take, recomputed in plain Python: the legal moves; without
    early passes, pass only after the opponent passed or when every other legal move fills
    one's own eye (with ``own_area_pass``: or lies in an empty region that reaches one's own
    stones alone); without ``fill_own_eyes``, no move that fills one's own eye."""
    mask = game.legal_mask()
    board, color, N = game.board.ravel(), game.to_play, game.size

    def around(p: int) -> list[int]:
        r, c = divmod(p, N)
        return [
            q * N + k
            for q, k in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
            if 0 <= q < N and 0 <= k < N
        ]

    def own_eye(p: int) -> bool:
        return all(board[q] == color for q in around(p))

    def own_area(p: int) -> bool:  # flood p's empty region: does it reach ``color`` alone?
        region, todo, reach = {p}, [p], set()
        while todo:
            for q in around(todo.pop()):
                if board[q] != 0:
                    reach.add(int(board[q]))
                elif q not in region:
                    region.add(q)
                    todo.append(q)
        return reach == {color}

    moves = [int(p) for p in np.flatnonzero(mask[:-1])]
    eye_fills = [p for p in moves if own_eye(p)]
    settled = [p for p in moves if own_eye(p) or (own_area_pass and own_area(p))]
    if not early_pass and game.passes == 0 and len(settled) < len(moves):
        mask[-1] = False
    if not fill_own_eyes:
        mask[eye_fills] = False
    return mask


def check_tree(m: BatchedMCTS, g: int, game: Game | None = None) -> None:
    """Recount a finished search: nothing in flight; for every node N = 1 + sum of its
    children's N and W = -own value - sum of its children's W (so every virtual loss has
    been undone); terminal nodes carry N copies of their final value (the result, with the
    score's share under ``search.score_utility``, recomputed here). With the real
    ``game``, also replay every node's path and compare board, hash, side to move and the
    legal moves (P >= 0 exactly where the engine allows the move, superko included)."""
    t = m.trees
    assert t.inflight[g] == 0
    for n in range(int(t.size[g])):
        kids = [int(c) for c in t.child[g, n] if c >= 0]
        state = t.state[g, n]
        if state == EXPANDED:
            assert t.N[g, n] == 1 + sum(int(t.N[g, c]) for c in kids), n
            expected = -float(t.value[g, n]) - sum(float(t.W[g, c]) for c in kids)
            assert abs(float(t.W[g, n]) - expected) < 1e-3 * max(1, t.N[g, n]), n
            assert abs(t.P[g, n][t.P[g, n] >= 0].sum() - 1) < 1e-4
        elif state == TERMINAL:
            assert not kids and t.N[g, n] >= 1
            assert abs(float(t.W[g, n]) + t.N[g, n] * float(t.value[g, n])) < 1e-3
        else:
            assert state == UNEXPANDED and n == 0 and t.N[g, n] == 0
        for a, c in enumerate(t.child[g, n]):
            if c >= 0:
                assert t.parent[g, c] == n and t.move[g, c] == a and c > n
        if game is not None:
            replay = game.copy()
            for move in path_moves(m, g, n):
                replay.play(move)
            assert (t.board[g, n] == replay.board.ravel()).all()
            assert int(t.hash[g, n]) == replay.position_hash
            assert t.to_play[g, n] == replay.to_play
            if state == EXPANDED:
                c = m.params.config
                legal = search_mask(replay, c.early_pass, c.fill_own_eyes, c.own_area_pass)
                assert ((t.P[g, n] >= 0) == legal).all(), n
            if state == TERMINAL:
                assert replay.is_over()
                margin = replay.score() * replay.to_play
                w, scale = m.params.config.score_utility, m.params.config.score_scale * game.size
                result = np.sign(margin)
                expected = (result + w * 2 / np.pi * np.arctan(margin / scale)) / (1 + w)
                assert t.value[g, n] == pytest.approx(expected, abs=1e-6)
