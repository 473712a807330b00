"""What a search thinks, as Go GUIs and review tools show it: per root move its visits, value,
prior, principal variation and expected score (`root_moves`), and a search that grows in steps
for as long as a GUI watches or up to a number of visits (`Analysis`). `tabula.gtp` writes
them as ``lz-analyze``/``kata-analyze`` lines, `tabula.katago` as KataGo's JSON.

Analysis searches with PUCT and no root noise whatever the player's algorithm: visit counts
that keep growing are what the GUIs' move circles and win-rate bars show (the Gumbel search's
root schedule is fixed by its budget, which an analysis does not have). Its values are win
rates: the player's score utility (``search.score_utility``) is left out, and the scores
are shown apart.

With a network that has the ownership and score heads (an `EvaluateAux`), every node the
network evaluates keeps its score and ownership; a move's score is their mean over its
subtree, one term per visit (KataGo's scoreMean: a terminal node counts its Tromp-Taylor
result once per visit), and the root's ownership the same mean over the whole tree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from tabula.go.board import area_ownership
from tabula.go.game import Game
from tabula.mcts.search import BatchedMCTS, Evaluate, SearchParams
from tabula.mcts.trees import EXPANDED, TERMINAL, Leaves

#: Nodes of an analysis tree: the search stops growing there (about 15 MB on 9x9, 66 MB on
#: 19x19, `BatchedMCTS`'s ``capacity``; with the score heads 4 bytes a point more per node).
ANALYSIS_NODES = 20_000
#: Simulations between two looks at the tree: a few network batches, so that a GUI's next
#: command is answered within a fraction of a second.
STEP = 32

EvaluateAux = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
"""``planes uint8[B, 17, N, N] -> (priors float32[B, M+1], values float32[B], ownership
float32[B, M], score float32[B])``: `Evaluate`'s two (no transform: the search applies its
own), then each point's expected owner in [-1, 1] (+1 the side to move) and the expected final
score margin, komi included, in points, both from the side to move
(`model.evaluator.Evaluator.evaluate_aux`)."""


def aux_of(evaluate: object) -> EvaluateAux | None:
    """``evaluate``'s `EvaluateAux` when its network has the ownership and score heads
    (``has_aux`` and ``evaluate_aux``, as `model.evaluator.Evaluator`), else None."""
    if getattr(evaluate, "has_aux", False) and callable(getattr(evaluate, "evaluate_aux", None)):
        return evaluate.evaluate_aux  # type: ignore[attr-defined, no-any-return]
    return None


@dataclass(frozen=True)
class MoveInfo:
    """One root move: ``move`` (flat, N*N = pass), ``visits`` N(root, a), ``value`` Q(root, a)
    from the side to move in [-1, 1], ``prior`` P(root, a), the principal variation ``pv``
    (this move, then the most visited child at each node below it), and ``score``: the
    expected final score margin after it, in points, from the side to move (None without the
    score head)."""

    move: int
    visits: int
    value: float
    prior: float
    pv: tuple[int, ...]
    score: float | None = None


def root_moves(
    search: BatchedMCTS, slot: int, limit: int | None = None, scores: np.ndarray | None = None
) -> list[MoveInfo]:
    """The visited moves at ``slot``'s root, most visited first (ties: higher prior first),
    at most ``limit``; ``scores``: float[nodes], each node's mean score from the root's side
    to move (`Analysis.subtree_scores`), or None."""
    t = search.trees
    children = t.child[slot, 0]
    infos = []
    for a in np.flatnonzero(children >= 0):
        c = int(children[a])
        n = int(t.N[slot, c])
        if n > 0:
            value = float(t.W[slot, c]) / n
            score = None if scores is None else float(scores[c])
            pv = _pv(t, slot, c)
            infos.append(MoveInfo(int(a), n, value, float(t.P[slot, 0, a]), pv, score))
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
    """A search of one position that grows by `STEP` simulations per step (`steps`), or to a
    number of visits (`search_to`), until its tree holds `ANALYSIS_NODES` nodes; after each
    step, `moves` and the root's `value`, and with ``aux`` (`EvaluateAux`) its `score` and
    `ownership`."""

    def __init__(
        self,
        game: Game,
        params: SearchParams,
        evaluate: Evaluate,
        rng: np.random.Generator,
        max_batch: int | None = None,
        aux: EvaluateAux | None = None,
    ) -> None:
        # Win rates, as the GUIs show them: no score utility (the scores are shown apart).
        self.params = SearchParams(
            params.config, noise=False, algorithm="puct", simulations=STEP, score_utility=0.0
        )
        self.evaluate, self.max_batch, self.aux = evaluate, max_batch, aux
        self.to_play, self.komi = game.to_play, game.komi
        self.search = BatchedMCTS(1, game.size, game.komi, self.params, capacity=ANALYSIS_NODES)
        self.search.reset(0, rng, game)
        if aux is not None:  # per node, from black's view: score, ownership (network's)
            self._score = np.zeros(ANALYSIS_NODES, np.float64)
            self._owner = np.zeros((ANALYSIS_NODES, self.search.M), np.float32)

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
            self._search(STEP)
            yield self.moves()

    def search_to(self, visits: int) -> None:
        """Search until the root has ``visits`` visits (its own evaluation is the first) or the
        tree is full."""
        while not self.search.is_over(0) and self.visits < visits:
            room = self.search.capacity - int(self.search.trees.size[0]) - 1
            wanted = min(max(visits - max(self.visits, 1), 1), room)  # (the root needs one)
            if wanted <= 0:
                return
            self._search(wanted)

    def moves(self, limit: int | None = None) -> list[MoveInfo]:
        """`root_moves`, with their scores when the network has the score head."""
        return root_moves(self.search, 0, limit, self.subtree_scores())

    def value(self) -> float:
        """The root's value from the side to move: the mean of its visits' values (a finished
        game: its Tromp-Taylor result)."""
        t = self.search.trees
        if self.search.is_over(0) or t.N[0, 0] == 0:
            return self.search.final_value(0) if self.search.is_over(0) else 0.0
        return -float(t.W[0, 0]) / int(t.N[0, 0])  # W is the view of the root's mover

    def score(self) -> float | None:
        """The root's mean score from the side to move (None without the score head)."""
        scores = self.subtree_scores()
        if scores is None:
            return None
        if self.search.is_over(0) or self.visits == 0:
            return self.to_play * self.search.score(0)
        return float(scores[0])

    def ownership(self) -> np.ndarray | None:
        """float[M]: each point's mean owner over the tree's visits, +1 the side to move's
        (None without the ownership head)."""
        if self.aux is None:
            return None
        if self.search.is_over(0) or self.visits == 0:
            return self.to_play * area_ownership(self.search.board(0), self.search.ctx.neighbors)
        t, size = self.search.trees, int(self.search.trees.size[0])
        expanded = np.flatnonzero(t.state[0, :size] == EXPANDED)
        total = self._owner[expanded].sum(axis=0, dtype=np.float64)
        for node in np.flatnonzero(t.state[0, :size] == TERMINAL):
            owner = area_ownership(t.board[0, node], self.search.ctx.neighbors)
            total += int(t.N[0, node]) * owner
        return self.to_play * total / self.visits

    def subtree_scores(self) -> np.ndarray | None:
        """float[nodes]: each node's mean score over its subtree's visits, from the root's
        side to move (None without the score head)."""
        if self.aux is None:
            return None
        t, size = self.search.trees, int(self.search.trees.size[0])
        state, N = t.state[0, :size], t.N[0, :size].astype(np.float64)
        own = np.where(state == EXPANDED, self._score[:size], 0.0)
        for node in np.flatnonzero(state == TERMINAL):
            own[node] = N[node] * _black_score(self.search, t.board[0, node])
        total = own.copy()
        parent = t.parent[0, :size]
        for child in range(size - 1, 0, -1):  # children come after their parents
            total[parent[child]] += total[child]
        return self.to_play * total / np.maximum(N, 1.0)

    def _search(self, simulations: int) -> None:
        """``simulations`` more visits below the root (network batches of the leaves)."""
        search = self.search
        if self.aux is None:
            search.search([0], self.evaluate, simulations=simulations, max_batch=self.max_batch)
            return
        search.start([0], simulations)
        slots = np.zeros(1, dtype=np.int64)
        leaves = search.new_leaves(search.knobs.per_game)
        while len(search.unfinished(slots)):
            n = search.gather(slots, leaves)
            if n:
                priors, values, ownership, score = self.aux(leaves.planes[:n])
                search.backup(leaves, n, priors, values)
                self._keep(leaves, n, ownership, score)

    def _keep(self, leaves: Leaves, n: int, ownership: np.ndarray, score: np.ndarray) -> None:
        """Store the evaluated leaves' score and ownership, from black's view, on the board as
        it is (the leaves were evaluated under a dihedral transform)."""
        nodes = leaves.node[:n]
        M = self.search.M
        perm = self.search.perms[leaves.sym[:n].astype(np.int64)][:, :M]
        owner = np.empty((n, M), np.float32)
        np.put_along_axis(owner, perm, np.asarray(ownership, np.float32), axis=1)  # j -> perm[j]
        colour = self.search.trees.to_play[0, nodes].astype(np.float32)
        self._score[nodes] = colour * np.asarray(score, np.float64)
        self._owner[nodes] = colour[:, None] * owner


def _black_score(search: BatchedMCTS, board: np.ndarray) -> float:
    """Tromp-Taylor score of ``board`` for black, komi included."""
    return float(area_ownership(board, search.ctx.neighbors).sum()) - search.komi
