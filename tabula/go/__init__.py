"""Go rules: coordinates, numba kernels over flat boards, and the ``Game`` class.

- ``coords``: every coordinate system (flat, (row, col), GTP, SGF) and conversions.
- ``board``: stateless rules kernels for the search (play, legal mask, score, hashing).
- ``hashset``: the uint64 hash set used for positional superko.
- ``game``: ``Game``, a full game with history and undo.
"""

from tabula.go.board import RulesContext, rules_context
from tabula.go.coords import CoordinateError
from tabula.go.game import Game, IllegalMoveError

__all__ = ["CoordinateError", "Game", "IllegalMoveError", "RulesContext", "rules_context"]
