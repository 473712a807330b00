"""What a search thinks, as Go GUIs draw it: per root move its visits, value, prior and
principal variation (`root_moves`), and a search that grows in steps for as long as a GUI
watches (`Analysis`). `tabula.gtp` writes them as ``lz-analyze`` lines.

Analysis searches with PUCT and no root noise whatever the player's algorithm: visit counts
that keep growing are what the GUIs' move circles and win-rate bars show (the Gumbel search's
root schedule is fixed by its budget, which an analysis does not have).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tabula.go.game import Game
from tabula.mcts.search import BatchedMCTS, Evaluate, SearchParams

#: Nodes of an analysis tree: the search stops growing there (about 15 MB on 9x9, 66 MB on
#: 19x19, `BatchedMCTS`'s ``capacity``).
ANALYSIS_NODES = 20_000
#: Simulations between two looks at the tree: a few network batches, so that a GUI's next
#: command is answered within a fraction of a second.
STEP = 32


@dataclass(frozen=True)
class MoveInfo:
    """One root move: ``move`` (flat, N*N = pass), ``visits`` N(root, a), ``value`` Q(root, a)
    from the side to move in [-1, 1], ``prior`` P(root, a), and the principal variation
    ``pv`` (this move, then the most visited child at each node below it)."""

    move: int
    visits: int
    value: float
    prior: float
    pv: tuple[int, ...]


def root_moves(search: BatchedMCTS, slot: int, limit: int | None = None) -> list[MoveInfo]:
    """The visited moves at ``slot``'s root, most visited first (ties: higher prior first),
    at most ``limit``."""
    t = search.trees
    children = t.child[slot, 0]
    infos = []
    for a in np.flatnonzero(children >= 0):
        c = int(children[a])
        n = int(t.N[slot, c])
        if n > 0:
            value = float(t.W[slot, c]) / n
            infos.append(MoveInfo(int(a), n, value, float(t.P[slot, 0, a]), _pv(t, slot, c)))
    infos.sort(key=lambda m: (-m.visits, -m.prior, m.move))
    return infos[:limit]


def _pv(t, slot: int, node: int) -> tuple[int, ...]:
    """The moves from the root to ``node``'s last move, then the most visited child at each
    node below (lowest move on ties) while it has visits."""
    line = [int(t.move[slot, node])]
    while True:
        children = t.child[slot, node]
        visits = np.where(children >= 0, t.N[slot, np.maximum(children, 0)], 0)
        best = int(np.argmax(visits))
        if visits[best] <= 0:
            return tuple(line)
        node = int(children[best])
        line.append(best)


class Analysis:
    """A search of one position that grows by `STEP` simulations per step (`steps`) until
    its tree holds `ANALYSIS_NODES` nodes; after each step, `root_moves` and the root value."""

    def __init__(
        self,
        game: Game,
        params: SearchParams,
        evaluate: Evaluate,
        rng: np.random.Generator,
        max_batch: int | None = None,
    ) -> None:
        self.params = SearchParams(params.config, noise=False, algorithm="puct", simulations=STEP)
        self.evaluate, self.max_batch = evaluate, max_batch
        self.search = BatchedMCTS(1, game.size, game.komi, self.params, capacity=ANALYSIS_NODES)
        self.search.reset(0, rng, game)

    @property
    def visits(self) -> int:
        """Simulations so far (the root's visit count)."""
        return int(self.search.trees.N[0, 0])

    @property
    def full(self) -> bool:
        """No room for another step (or the game is over): the analysis stands as it is."""
        size = int(self.search.trees.size[0])
        return self.search.is_over(0) or size + STEP + 1 > self.search.capacity

    def steps(self) -> Iterator[list[MoveInfo]]:
        """Search a step, yield the root's moves; until `full`."""
        while not self.full:
            self.search.search([0], self.evaluate, max_batch=self.max_batch)
            yield root_moves(self.search, 0)
