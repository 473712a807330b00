"""Tree reuse (paper, Methods: "the child node corresponding to the played action becomes
the new root node; the subtree below this child is retained along with all its statistics").

`advance_root` plays the move on a tree's root board and keeps the played child's subtree,
compacted to the front of the node arrays in creation order (see `tabula.mcts.kernels`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tabula.features import HISTORY
from tabula.go.board import play_move
from tabula.go.hashset import hashset_insert
from tabula.mcts.kernels import init_root
from tabula.mcts.trees import DROPPED, EXPANDED, FRESH, KEPT


@njit(cache=True, nogil=True)
def _keep_subtree(t, g, root, remap) -> int:
    """remap[i] = new index of node i in the subtree of ``root`` (creation order), else -1."""
    for i in range(t.size[g]):
        remap[i] = -1
    kept = 0
    for i in range(root, t.size[g]):
        if i == root or (t.parent[g, i] >= root and remap[t.parent[g, i]] >= 0):
            remap[i] = kept
            kept += 1
    return kept


@njit(cache=True, nogil=True)
def _compact(t, g, remap) -> None:
    """Move the kept nodes to the front; new index <= old index, so in-place is safe."""
    for i in range(t.size[g]):
        j = remap[i]
        if j < 0:
            continue
        p = t.parent[g, i]
        t.parent[g, j] = remap[p] if j > 0 else -1
        t.move[g, j] = t.move[g, i] if j > 0 else -1
        t.state[g, j] = t.state[g, i]
        t.to_play[g, j] = t.to_play[g, i]
        t.passes[g, j] = t.passes[g, i]
        t.move_number[g, j] = t.move_number[g, i]
        t.N[g, j] = t.N[g, i]
        t.W[g, j] = t.W[g, i]
        t.value[g, j] = t.value[g, i]
        t.hash[g, j] = t.hash[g, i]
        if j != i:
            t.board[g, j, :] = t.board[g, i]
            t.P[g, j, :] = t.P[g, i]
        ch = t.child[g, i]
        for a in range(ch.shape[0]):
            c = ch[a]
            t.child[g, j, a] = remap[c] if c >= 0 else -1


@njit(cache=True, nogil=True)
def advance_root(t, g, move, reserve, rules) -> int:
    """Play ``move`` (legal) in game g's real game and re-root its tree.

    The real game's history and hash set get the new position. If the move's child is an
    expanded node whose subtree leaves room for ``reserve`` more nodes, it becomes the root
    with all its statistics (paper, Methods: tree reuse) and the rest is freed; otherwise the
    tree restarts from a fresh root. Returns KEPT, DROPPED (too big) or FRESH (no subtree).
    """
    c = t.child[g, 0, move]
    color = t.to_play[g, 0]
    h = t.hash[g, 0]
    board = np.empty(t.board.shape[2], dtype=np.int8)
    _, h = play_move(t.board[g, 0], move, color, rules.neighbors, rules.zobrist, h, board)
    for k in range(HISTORY - 1, 0, -1):
        t.history[g, k, :] = t.history[g, k - 1]
    t.history[g, 0, :] = board
    hashset_insert(t.game_set[g], h)  # a pass repeats a stored position: no change
    M = t.board.shape[2]
    passes = t.passes[g, 0] + 1 if move == M else 0
    move_number = t.move_number[g, 0] + 1
    if c >= 0 and t.state[g, c] == EXPANDED:
        remap = np.empty(t.size[g], dtype=np.int32)
        kept = _keep_subtree(t, g, c, remap)
        if kept + reserve <= t.N.shape[1]:
            _compact(t, g, remap)
            t.size[g] = kept
            t.done[g] = 0
            t.target[g] = 0
            t.noise_pending[g] = 0
            return KEPT
        init_root(t, g, board, h, -color, passes, move_number, rules)
        return DROPPED
    init_root(t, g, board, h, -color, passes, move_number, rules)
    return FRESH
