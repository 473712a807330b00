"""``Game``: one Go game with its full history, for GTP, SGF, the arena and the tests.

Rules (PAPER_NOTES "Game"): captures, suicide illegal, positional superko (no whole-board
position may repeat; passes are exempt, they repeat the board by definition), the game
ends after two passes in a row or 2*N*N moves, Tromp-Taylor area score with komi to White.

Every position of the game is kept (a stack of boards and hashes), so ``undo`` is O(1)
apart from one hash-set removal, and ``recent_boards`` is a slice. The hash set of all
positions (``hash_set()``) is what the search checks superko against.
"""

from __future__ import annotations

import numpy as np

from tabula.errors import TabulaError
from tabula.features import HISTORY, NUM_PLANES, fill_planes
from tabula.go.board import (
    EMPTY_HASH,
    LEGAL,
    OFF_BOARD,
    REASONS,
    area_ownership,
    area_score,
    legal_mask,
    play_checked,
    rules_context,
)
from tabula.go.coords import check_size, to_gtp
from tabula.go.hashset import hashset_insert, hashset_new, hashset_remove

_NO_PATH = np.zeros(0, dtype=np.uint64)
_COLOR_NAMES = {1: "black", -1: "white"}


class IllegalMoveError(TabulaError, ValueError):
    """A move the rules forbid; ``reason`` is one of "occupied", "suicide",
    "superko (repeats an earlier position)", "off the board"."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class Game:
    """A game in progress. Colours: +1 black, -1 white; moves are flat indices, pass = N*N.

    Attributes: ``size`` (N), ``komi``, ``to_play`` (+1/-1; may be set, e.g. by GTP),
    ``move_number`` (moves played, passes included), ``passes`` (consecutive passes at the
    end of the history).
    """

    def __init__(self, size: int = 9, komi: float = 7.5) -> None:
        check_size(size)
        self.size = size
        self.komi = float(komi)
        self._ctx = rules_context(size)
        M = size * size
        self.to_play = 1
        self.passes = 0
        self._boards: list[np.ndarray] = [np.zeros(M, dtype=np.int8)]
        self._hashes: list[int] = [int(EMPTY_HASH)]
        # (colour, move, to_play before, passes before) per move, for exact undo
        self._moves: list[tuple[int, int, int, int]] = []
        self._set = hashset_new(2 * M + 1)
        hashset_insert(self._set, EMPTY_HASH)

    # -- state -------------------------------------------------------------------------

    @property
    def move_number(self) -> int:
        return len(self._moves)

    @property
    def board(self) -> np.ndarray:
        """int8[N, N], +1 black, -1 white, 0 empty, row 0 = top (a copy)."""
        return self._boards[-1].reshape(self.size, self.size).copy()

    @property
    def history(self) -> list[tuple[int, int]]:
        """(colour, move) for every move so far, in order."""
        return [(c, m) for c, m, _, _ in self._moves]

    @property
    def position_hash(self) -> int:
        """Zobrist hash of the current board (``board.board_hash``)."""
        return self._hashes[-1]

    def hash_set(self) -> np.ndarray:
        """The hash set of every position so far (``hashset.py``); do not modify it."""
        return self._set

    # -- rules -------------------------------------------------------------------------

    def _color(self, color: int | None) -> int:
        if color is None:
            return self.to_play
        if color not in (1, -1):
            raise ValueError(f"colour must be +1 (black) or -1 (white), got {color!r}")
        return int(color)

    def _try(self, move: int, color: int, out: np.ndarray) -> tuple[int, int]:
        """(status, hash) of playing ``move``; the new board goes to ``out`` when LEGAL."""
        if not isinstance(move, int | np.integer) or isinstance(move, bool):
            return OFF_BOARD, 0
        ctx = self._ctx
        status, h = play_checked(
            self._boards[-1], int(move), color, ctx.neighbors, ctx.zobrist,
            np.uint64(self._hashes[-1]), self._set, _NO_PATH, 0, out,
        )  # fmt: skip
        return status, h

    def legal_mask(self) -> np.ndarray:
        """bool[M+1] legal moves of ``to_play``; the last entry (pass) is always True."""
        ctx = self._ctx
        out = np.empty(ctx.M + 1, dtype=np.bool_)
        legal_mask(
            self._boards[-1], self.to_play, ctx.neighbors, ctx.zobrist,
            np.uint64(self._hashes[-1]), self._set, _NO_PATH, 0, out,
        )  # fmt: skip
        return out

    def is_legal(self, move: int, color: int | None = None) -> bool:
        """Whether ``color`` (default ``to_play``) may play ``move`` now."""
        return self._try(move, self._color(color), np.empty(self._ctx.M, np.int8))[0] == LEGAL

    def play(self, move: int, color: int | None = None) -> None:
        """Play ``move`` for ``color`` (default ``to_play``); then ``to_play = -color``.

        Raises ``IllegalMoveError`` (the position is unchanged). Moves after the end of the
        game are not refused: callers check ``is_over()``."""
        color = self._color(color)
        ctx = self._ctx
        new = np.empty(ctx.M, dtype=np.int8)
        status, h = self._try(move, color, new)
        if status != LEGAL:
            where = to_gtp(int(move), self.size) if status != OFF_BOARD else repr(move)
            reason = REASONS[status]
            raise IllegalMoveError(
                f"illegal move {where} for {_COLOR_NAMES[color]}: {reason}", reason
            )
        move = int(move)
        self._moves.append((color, move, self.to_play, self.passes))
        self._boards.append(new)
        self._hashes.append(int(h))
        if move != ctx.M:
            if 2 * (len(self._boards) + 1) > self._set.shape[0]:
                self._grow_set()
            hashset_insert(self._set, np.uint64(h))
        self.passes = self.passes + 1 if move == ctx.M else 0
        self.to_play = -color

    def _grow_set(self) -> None:
        table = hashset_new(self._set.shape[0])
        for v in self._set[self._set != 0]:
            hashset_insert(table, v)
        self._set = table

    def undo(self) -> None:
        """Take back the last move, restoring every attribute exactly; IndexError if none."""
        if not self._moves:
            raise IndexError("undo: no move to take back")
        _, move, self.to_play, self.passes = self._moves.pop()
        self._boards.pop()
        h = self._hashes.pop()
        if move != self._ctx.M:  # a pass repeats the previous position, which stays in the set
            hashset_remove(self._set, np.uint64(h))

    def copy(self) -> Game:
        """An independent copy (boards are never modified in place, so they are shared)."""
        other = Game.__new__(Game)
        other.__dict__.update(self.__dict__)
        other._boards = list(self._boards)
        other._hashes = list(self._hashes)
        other._moves = list(self._moves)
        other._set = self._set.copy()
        return other

    def is_over(self) -> bool:
        """Two consecutive passes, or ``move_number >= 2*N*N`` (PAPER_NOTES)."""
        return self.passes >= 2 or self.move_number >= 2 * self._ctx.M

    def score(self) -> float:
        """Tromp-Taylor area score: black area - white area - komi."""
        return area_score(self._boards[-1], self._ctx.neighbors) - self.komi

    def ownership(self) -> np.ndarray:
        """int8[N*N]: the owner of each point under Tromp-Taylor area scoring (+1 black, -1
        white, 0 dame); its sum is the score before komi."""
        return area_ownership(self._boards[-1], self._ctx.neighbors)

    def winner(self) -> int:
        """+1 if black wins, -1 if white wins, 0 for a draw (jigo)."""
        s = self.score()
        return 1 if s > 0 else -1 if s < 0 else 0

    # -- network input -----------------------------------------------------------------

    def recent_boards(self, k: int = HISTORY) -> np.ndarray:
        """int8[k, N*N]: the board now, one move ago, ...; zeros before the game start."""
        out = np.zeros((k, self._ctx.M), dtype=np.int8)
        for t, b in enumerate(reversed(self._boards[-k:])):
            out[t] = b
        return out

    def features(self) -> np.ndarray:
        """uint8[17, N, N] planes from the side to move's view (``tabula.features``)."""
        out = np.empty((NUM_PLANES, self.size, self.size), dtype=np.uint8)
        fill_planes(self.recent_boards(HISTORY), self.to_play, out)
        return out

    def __repr__(self) -> str:
        return f"Game(size={self.size}, komi={self.komi}, move_number={self.move_number})"
