"""Seeded opening sets, so that matches between near-deterministic players play games that differ.

GnuGo is close to deterministic and an evaluation player (tau -> 0, no noise) nearly so: a
match that starts every game from the empty board repeats a handful of games, and its win rate
says less than its game count suggests (measured: 17 of 20 games against GnuGo level 1 ended
with one of two identical results). Each game of a match therefore starts from an opening: a
short sequence of legal moves from a fixed, seeded set.

Balance. The moves of an opening lie on the third line or higher (at least two points from
every edge on boards of 7 and up, one on smaller boards), where no single move decides a game,
and an opening has an even number of plies, so Black is to move after it as after an empty
board and komi keeps its meaning. What imbalance remains cancels in pairs: a match plays opening
``k`` in games ``2k`` and ``2k + 1`` with colours swapped (`opening_for_game`), so either side of
an opening is played once by each player.

Distinct. No two openings of a set are the same position up to the board's eight symmetries
(which would be one game seen in a mirror).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tabula.errors import UsageError
from tabula.features import inverse_symmetry_permutations
from tabula.go.game import Game

#: The seed of every match's opening set: the same openings for every run, config and bench.
OPENINGS_SEED = 14

Opening = tuple[int, ...]
"""Flat moves (row * N + col, GTP row 1 at the bottom as everywhere), Black first."""


def opening_region(size: int) -> np.ndarray:
    """int64[K]: the points an opening move may take (third line and up; second on 5x5, 6x6)."""
    margin = 2 if size >= 7 else 1
    rows = np.arange(size)
    inner = (rows >= margin) & (rows < size - margin)
    return np.flatnonzero(np.outer(inner, inner).ravel())


def _canonical(moves: Sequence[int], size: int) -> Opening:
    """The smallest of the eight transformed move sequences: one key per symmetry class."""
    inverse = inverse_symmetry_permutations(size)
    return min(tuple(int(inverse[k][m]) for m in moves) for k in range(inverse.shape[0]))


def opening_set(size: int, count: int, plies: int, seed: int) -> tuple[Opening, ...]:
    """``count`` distinct openings of ``plies`` moves each, the same set for the same ``seed``.

    ``plies`` must be even (Black to move after the opening, see the module docstring); 0 gives
    ``count`` empty openings (every game from the empty board). Raises `UsageError` when the
    region has fewer distinct openings than asked for.
    """
    _check(count, plies)
    if plies == 0:
        return ((),) * count
    openings = _draw(size, count, plies, seed)
    if len(openings) < count:
        raise UsageError(
            f"only {len(openings)} distinct {plies}-move openings found on {size}x{size} for "
            f"the {count} asked for: play fewer games or longer openings"
        )
    return openings


def match_openings(size: int, games: int, plies: int) -> tuple[Opening, ...]:
    """The openings of a ``games``-game match, one per pair of games, from the fixed set of
    `OPENINGS_SEED`; on a board with fewer distinct openings, all it has (the set then cycles,
    and the arena reports the repeated games)."""
    count = max(1, (games + 1) // 2)
    _check(count, plies)
    if plies == 0:
        return ((),) * count
    openings = _draw(size, count, plies, OPENINGS_SEED)
    if not openings:
        raise UsageError(f"no {plies}-move opening fits on {size}x{size}: use fewer plies")
    return openings


def _check(count: int, plies: int) -> None:
    if plies < 0 or plies % 2:
        raise UsageError(f"opening plies must be an even number >= 0, got {plies}")
    if count < 1:
        raise UsageError(f"an opening set needs at least one opening, got {count}")


def _draw(size: int, count: int, plies: int, seed: int) -> tuple[Opening, ...]:
    """Up to ``count`` openings distinct up to symmetry, in the order ``seed`` draws them."""
    region = opening_region(size)
    rng = np.random.default_rng([seed, size, plies])
    seen: set[Opening] = set()
    openings: list[Opening] = []
    # Each draw is a fresh class with probability (classes - found) / classes; 64 draws per
    # opening asked for is far past what any feasible request needs.
    for _ in range(64 * count):
        game = Game(size, komi=0.0)
        moves: list[int] = []
        for _ in range(plies):
            legal = region[game.legal_mask()[region]]
            if legal.size == 0:  # more plies than the region has room for
                return tuple(openings)
            move = int(rng.choice(legal))
            game.play(move)
            moves.append(move)
        key = _canonical(moves, size)
        if key not in seen:
            seen.add(key)
            openings.append(tuple(moves))
            if len(openings) == count:
                break
    return tuple(openings)


def opening_for_game(openings: Sequence[Opening], game: int) -> Opening:
    """The opening of game ``game``: opening ``game // 2``, so games 2k and 2k+1 (colours
    swapped by the arena) share one; the set is cycled when a match has more games."""
    return openings[(game // 2) % len(openings)]
