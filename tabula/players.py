"""The random player: the weakest anchor of the Elo scale and the default GTP player.

It implements `tabula.gtp.Player` (``genmove(game, color)``); the arena plays it through
`tabula.arena.SequentialPlayer`. Network players live in `model.players`, GTP engines run as
subprocesses in `tasks.engines`.
"""

from __future__ import annotations

import numpy as np

from tabula.go.game import Game


def own_eyes(board: np.ndarray, color: int) -> np.ndarray:
    """Single-point eyes of `color`: empty points whose on-board neighbours are all `color`.

    board: int8[N, N] (+1 black, -1 white, 0 empty). Returns bool[N, N]. The board edge
    counts as `color`, so a corner needs two stones. Diagonals are not looked at.
    """
    padded = np.pad(board, 1, constant_values=color)
    surrounded = (
        (padded[:-2, 1:-1] == color)
        & (padded[2:, 1:-1] == color)
        & (padded[1:-1, :-2] == color)
        & (padded[1:-1, 2:] == color)
    )
    return (board == 0) & surrounded


class RandomPlayer:
    """Uniform among legal moves, except moves that fill a single-point eye of its own colour.

    Excluding own-eye fills is what makes random games end (two passes) instead of running
    to the move limit: it passes when nothing else is left, and never resigns.
    """

    def __init__(self, seed: int | None = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def genmove(self, game: Game, color: int) -> int:
        M = game.size * game.size
        if color == game.to_play:
            legal = np.asarray(game.legal_mask(), dtype=bool)[:M].copy()
        else:
            legal = np.array([game.is_legal(m, color) for m in range(M)], dtype=bool)
        legal &= ~own_eyes(game.board, color).reshape(M)
        candidates = np.flatnonzero(legal)
        if candidates.size == 0:
            return M
        return int(self._rng.choice(candidates))
