"""Players without a network: the random player, and the arena adapter for one-game players.

`RandomPlayer` is the weakest anchor of the Elo scale and the default GTP player; it implements
`tabula.gtp.Player` (``genmove(game, color)``), and `SequentialPlayer` lets the arena play any
such player. Network players live in `model.players`, GTP engines run as subprocesses in
`tasks.engines`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tabula.arena import Failure, MoveRequest
from tabula.go.board import own_eyes
from tabula.go.game import Game
from tabula.gtp import Player


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


class SequentialPlayer:
    """Adapts a one-game `tabula.gtp.Player` (``genmove(game, color)``) to the arena.

    It answers the games of a batch one after another; it keeps no per-game state. It is
    still a `tabula.gtp.Player` itself (``genmove`` is passed through), for the GTP server.
    """

    def __init__(self, player: Player, name: str, max_concurrent: int | None = None) -> None:
        self.player = player
        self.name = name
        self.max_concurrent = max_concurrent

    def start_game(self, slot: int, game: Game, color: int) -> Failure | None:
        return None

    def genmoves(self, requests: Sequence[MoveRequest]) -> list[int | Failure]:
        return [int(self.player.genmove(r.game.copy(), r.color)) for r in requests]

    def genmove(self, game: Game, color: int) -> int:
        return self.player.genmove(game, color)

    def observe(self, slot: int, color: int, move: int) -> Failure | None:
        return None

    def end_game(self, slot: int) -> None:
        return None
