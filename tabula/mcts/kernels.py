"""Numba kernels of the batched MCTS (`tabula.mcts` is the Python face; read that first).

Trees are structs of arrays with a leading game axis ``g`` (one tree per game slot) and a node
axis ``n`` (``capacity`` nodes per game). Node 0 is always the root. Nodes are allocated in
creation order, so a parent's index is always below its children's; re-rooting keeps the
played child's subtree and compacts it to the front in the same order
(`tabula.mcts.reuse.advance_root`). The arrays themselves are defined in `tabula.mcts.trees`.

Statistics live on the child node of each edge: ``N[g, c]`` and ``W[g, c]`` are the paper's
N(s, a) and W(s, a) for the edge (s, a) that leads to ``c``, with W summed from the view of
the player who made the move a (the side to move at s), so Q(s, a) = W / N is read directly
by the parent. ``P[g, n, a]`` is the prior of move a at node n (renormalised over the legal
moves); ``P < 0`` marks an illegal move, which selection never looks at. ``child[g, n, a]``
is the node reached by a, or -1 while the edge is unvisited (N = W = 0).

Invariant (tested): for every expanded node, ``N[n] = 1 + sum of N over its children``: the
1 is the visit that expanded it, and an in-flight simulation counts as a visit everywhere on
its path (virtual loss adds 1 to N and ``-virtual_loss`` to W; the backup adds
``v + virtual_loss`` to W and leaves N, so nothing of the virtual loss is left afterwards).
So ``sum_b N(s, b) = N[s] - 1`` in U.

The board's constants come in one `tabula.mcts.trees.Rules` tuple (``rules``) and the search
settings in one `tabula.mcts.trees.Knobs` tuple (``knobs``). All kernels are
``@njit(cache=True, nogil=True)``: nothing compiles at import, and the self-play loop runs them
in one thread while the network evaluates in another.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from tabula.features import HISTORY, fill_planes
from tabula.go.board import area_score, fills_own_eye, flood_region, legal_mask, play_move
from tabula.mcts.gumbel import prepare_root, select_interior, select_root
from tabula.mcts.random import gamma, next_u64
from tabula.mcts.trees import EXPANDED, FULL, NOISY, TERMINAL, UNEXPANDED
from tabula.mcts.utility import utility


@njit(cache=True, nogil=True, inline="always")
def _final_value(board, to_play, rules) -> float:
    """Tromp-Taylor result (+1 win, -1 loss, 0 jigo) from ``to_play``'s view, with the score's
    share of ``rules.score_utility`` (`tabula.mcts.utility`)."""
    s = (area_score(board, rules.neighbors) - rules.komi) * to_play
    w = 1.0 if s > 0 else (-1.0 if s < 0 else 0.0)
    return utility(w, s, rules.score_utility, rules.score_scale)


@njit(cache=True, nogil=True)
def init_root(t, g, board, h, to_play, passes, move_number, rules) -> None:
    """Make node 0 of game g a fresh, unexpanded root at the given position (tree emptied)."""
    t.size[g] = 1
    t.parent[g, 0] = -1
    t.move[g, 0] = -1
    t.board[g, 0, :] = board
    t.hash[g, 0] = h
    t.to_play[g, 0] = to_play
    t.passes[g, 0] = passes
    t.move_number[g, 0] = move_number
    t.N[g, 0] = 0
    t.W[g, 0] = 0.0
    t.child[g, 0, :] = -1
    t.done[g] = 0
    t.inflight[g] = 0
    t.target[g] = 0
    t.noise_pending[g] = 0
    if passes >= 2 or move_number >= rules.max_moves:
        t.state[g, 0] = TERMINAL
        t.value[g, 0] = _final_value(board, to_play, rules)
    else:
        t.state[g, 0] = UNEXPANDED
        t.value[g, 0] = 0.0


@njit(cache=True, nogil=True)
def add_root_noise(t, g, alpha, eps) -> None:
    """P = (1 - eps) P + eps eta at game g's (expanded) root, eta ~ Dir(alpha) over its legal
    moves (paper, Methods "Self-play"), from the game's ``rand_state`` stream."""
    P = t.P[g, 0]
    eta = np.zeros(P.shape[0])
    total = 0.0
    for a in range(P.shape[0]):
        if P[a] >= 0.0:
            eta[a] = gamma(t.rand_state, g, alpha)
            total += eta[a]
    if total > 0.0 and math.isfinite(total):  # a tiny alpha could underflow every draw to 0
        for a in range(P.shape[0]):
            if P[a] >= 0.0:
                P[a] = (1.0 - eps) * P[a] + eps * eta[a] / total


@njit(cache=True, nogil=True, inline="always")
def _select(t, g, node, c_puct, fpu) -> int:
    """argmax_a Q + U with U = c_puct P sqrt(sum_b N_b) / (1 + N_a) over legal a (P >= 0).

    Ties (all of them on a node's first visit, where sum_b N_b = 0) go to the larger P, then
    to the lower index.
    """
    sqrt_n = math.sqrt(max(t.N[g, node] - 1, 0))
    best_a, best_s, best_p = -1, -np.inf, -1.0
    P = t.P[g, node]
    ch = t.child[g, node]
    for a in range(P.shape[0]):
        p = P[a]
        if p < 0.0:
            continue
        c = ch[a]
        n = 0
        q = fpu
        if c >= 0:
            n = t.N[g, c]
            if n > 0:
                q = t.W[g, c] / n
        s = q + c_puct * p * sqrt_n / (1 + n)
        if s > best_s or (s == best_s and p > best_p):
            best_a, best_s, best_p = a, s, p
    return best_a


@njit(cache=True, nogil=True, inline="always")
def _new_node(t, g, parent, a, rules) -> int:
    """Create the child of ``parent`` by move ``a`` (legal by the parent's mask)."""
    c = t.size[g]
    t.size[g] = c + 1
    color = t.to_play[g, parent]
    _, h = play_move(
        t.board[g, parent], a, color, rules.neighbors, rules.zobrist, t.hash[g, parent],
        t.board[g, c],
    )  # fmt: skip
    M = t.board.shape[2]
    t.parent[g, c] = parent
    t.move[g, c] = a
    t.hash[g, c] = h
    t.to_play[g, c] = -color
    t.passes[g, c] = t.passes[g, parent] + 1 if a == M else 0
    t.move_number[g, c] = t.move_number[g, parent] + 1
    t.N[g, c] = 0
    t.W[g, c] = 0.0
    t.child[g, c, :] = -1
    t.child[g, parent, a] = c
    if t.passes[g, c] >= 2 or t.move_number[g, c] >= rules.max_moves:
        t.state[g, c] = TERMINAL  # valued by the rules, never by the network
        t.value[g, c] = _final_value(t.board[g, c], -color, rules)
    else:
        t.state[g, c] = UNEXPANDED
    return c


@njit(cache=True, nogil=True, inline="always")
def _visit(t, g, node, vl) -> None:
    t.N[g, node] += 1  # the in-flight visit; it stays as the real one after the backup
    t.W[g, node] -= vl


@njit(cache=True, nogil=True, inline="always")
def _unvisit(t, g, node, vl) -> None:
    while node >= 0:
        t.N[g, node] -= 1
        t.W[g, node] += vl
        node = t.parent[g, node]


@njit(cache=True, nogil=True, inline="always")
def _backup(t, g, node, v, vl) -> None:
    """Back up ``v`` (from ``node``'s side to move) to the root, undoing the virtual loss.

    W of a node is from the view of the player who moved into it, so the leaf gets -v, its
    parent +v, and so on: the sign flips each ply.
    """
    x = -v
    while node >= 0:
        t.W[g, node] += x + vl
        x = -x
        node = t.parent[g, node]


@njit(cache=True, nogil=True, inline="always")
def _descend(t, g, rules, knobs, scratch):
    """One selection from the root, adding virtual loss along the path (PUCT, or the Gumbel
    search's rules with ``knobs.gumbel``; ``scratch`` is float64[M+1] for the latter). Returns
    (node, fresh): a node created by this call (UNEXPANDED: a leaf for the network, or
    TERMINAL), an existing TERMINAL node, an existing UNEXPANDED node (a collision: that leaf
    is already waiting for the network), or (FULL, False) with the virtual loss taken back."""
    vl = knobs.virtual_loss
    node = 0
    _visit(t, g, 0, vl)
    while t.state[g, node] == EXPANDED:
        if not knobs.gumbel:
            a = _select(t, g, node, knobs.c_puct, knobs.fpu)
        elif node == 0:
            a = select_root(t, g, knobs, scratch)
        else:
            a = select_interior(t, g, node, knobs, scratch)
        c = t.child[g, node, a]
        if c < 0:
            if t.size[g] >= t.N.shape[1]:
                _unvisit(t, g, node, vl)
                return FULL, False
            c = _new_node(t, g, node, a, rules)
            _visit(t, g, c, vl)
            return c, True
        _visit(t, g, c, vl)
        node = c
    return node, False


@njit(cache=True, nogil=True, inline="always")
def _write_planes(t, g, node, perm, recent, out) -> None:
    """The 17 planes of ``node`` under the gather index ``perm`` (a dihedral transform):
    its board and its ancestors' in the tree, then the real game's earlier boards."""
    M = t.board.shape[2]
    k = 0
    x = node
    while k < HISTORY and x >= 0:
        b = t.board[g, x]
        for j in range(M):
            recent[k, j] = b[perm[j]]
        k += 1
        x = t.parent[g, x]
    for h in range(1, HISTORY - k + 1):
        b = t.history[g, h]
        for j in range(M):
            recent[k, j] = b[perm[j]]
        k += 1
    fill_planes(recent, t.to_play[g, node], out)


@njit(cache=True, nogil=True, inline="always")
def _add_leaf(t, g, node, leaves, i, rules, knobs, recent) -> None:
    k = np.int64(0)
    if knobs.random_symmetry:
        k = np.int64(next_u64(t.sym_state, g) >> np.uint64(61))  # one of the 8 transforms
    leaves.slot[i] = g
    leaves.node[i] = node
    leaves.sym[i] = k
    _write_planes(t, g, node, rules.perms[k], recent, leaves.planes[i])
    t.inflight[g] += 1


@njit(cache=True, nogil=True)
def gather(t, slots, leaves, rules, knobs):
    """Select up to ``per_game`` leaves (`Knobs`) in each game of ``slots`` into ``leaves``
    (virtual loss keeps them apart). Terminal nodes reached on the way are backed up at once
    (they count as simulations, not as leaves); collisions are listed in ``leaves`` (see
    `Leaves`). A game makes at most ``4 * per_game`` selections, and none once its search has
    all its simulations finished or in flight. Returns (leaves written, terminal visits)."""
    M = t.board.shape[2]
    per_game, vl = knobs.per_game, knobs.virtual_loss
    recent = np.empty((HISTORY, M), dtype=np.int8)
    scratch = np.empty(M + 1)
    n, terminal, n_coll = 0, 0, 0
    for g in slots:
        if t.state[g, 0] == UNEXPANDED:  # a fresh root: evaluate it first (not a simulation)
            if t.inflight[g] == 0:
                _visit(t, g, 0, vl)
                _add_leaf(t, g, 0, leaves, n, rules, knobs, recent)
                n += 1
            continue
        got, tries = 0, 0
        while got < per_game and tries < 4 * per_game and t.done[g] + t.inflight[g] < t.target[g]:
            tries += 1
            node, fresh = _descend(t, g, rules, knobs, scratch)
            if node == FULL:
                t.target[g] = t.done[g] + t.inflight[g]  # cannot grow: end this search early
                break
            if t.state[g, node] == TERMINAL:
                _backup(t, g, node, t.value[g, node], vl)
                t.done[g] += 1
                terminal += 1
            elif fresh:
                _add_leaf(t, g, node, leaves, n, rules, knobs, recent)
                n += 1
                got += 1
            else:  # keep the virtual loss until the backup: the next selection looks elsewhere
                leaves.coll_slot[n_coll] = g
                leaves.coll_node[n_coll] = node
                n_coll += 1
    leaves.n_coll[0] = n_coll
    return n, terminal


@njit(cache=True, nogil=True)
def undo_collisions(t, leaves, vl) -> None:
    """Take back the virtual loss of the collisions listed in ``leaves`` (after a backup)."""
    for i in range(leaves.n_coll[0]):
        _unvisit(t, leaves.coll_slot[i], leaves.coll_node[i], vl)
    leaves.n_coll[0] = 0


@njit(cache=True, nogil=True)
def _restrict_pass(board, color, passes, mask, nbr, own_area) -> int:
    """Without early passes, pass stays legal only after the opponent passed or when every
    other legal move fills one's own eye, or with ``own_area`` lies in one's own area (an empty
    region that reaches one's own stones alone: under area scoring a move there gains nothing
    and can only take away an eye). Returns the change in the legal-move count."""
    M = board.shape[0]
    if passes > 0 or not mask[M]:
        return 0
    own = np.zeros(M if own_area else 0, dtype=np.bool_)  # the own regions flooded so far
    stack = np.empty(M if own_area else 0, dtype=np.int32)
    for p in range(M):
        if not mask[p] or fills_own_eye(board, p, color, nbr):
            continue
        if own_area and (own[p] or _own_region(board, p, color, nbr, own, stack)):
            continue  # (a False ends the loop: ``own`` then holds a partial region)
        mask[M] = False
        return -1
    return 0


@njit(cache=True, nogil=True)
def _own_region(board, p, color, nbr, seen, stack) -> bool:
    """Whether the empty region of ``p`` reaches ``color``'s stones and no others. Its points
    are marked in ``seen`` as it is flooded (`tabula.go.board.flood_region`), which stops at
    the first stone of the other colour: after a True they are all own area (so each region is
    flooded once)."""
    _, reach_black, reach_white = flood_region(board, p, nbr, seen, stack, -color)
    return (reach_black and not reach_white) if color > 0 else (reach_white and not reach_black)


@njit(cache=True, nogil=True)
def _drop_own_eye_fills(board, color, mask, nbr) -> int:
    """Take the moves that fill one's own single-point eye out of ``mask`` (pass is kept).
    Returns the change in the legal-move count."""
    removed = 0
    for p in range(board.shape[0]):
        if mask[p] and fills_own_eye(board, p, color, nbr):
            mask[p] = False
            removed += 1
    return -removed


@njit(cache=True, nogil=True)
def _set_priors(P, priors, perm, mask, count) -> None:
    """Write a leaf's priors ``P`` (original frame) from the network's ``priors`` (the frame
    ``perm`` transformed): -1 for the moves ``mask`` rules out, the rest renormalised (uniform
    over the ``count`` legal moves if the network gave them no mass)."""
    total = 0.0
    for j in range(P.shape[0]):
        a = perm[j]  # transformed point j is original point perm[j]
        if mask[a]:
            p = max(float(priors[j]), 0.0)
            P[a] = p
            total += p
        else:
            P[a] = -1.0
    for a in range(P.shape[0]):
        if mask[a]:
            P[a] = P[a] / total if total > 0.0 else 1.0 / count


@njit(cache=True, nogil=True)
def expand_and_backup(t, leaves, n, priors, values, rules, knobs) -> None:
    """Expand leaves ``0..n-1`` with the network's output and back their values up.

    priors: float32[n, M+1] softmax over all moves in the leaf's transformed frame (mapped
    back here), values: float32[n] from the leaf's side to move. Illegal moves (occupied,
    suicide, positional superko against the real game and the leaf's path) get P = -1; the
    rest are renormalised (uniform if the network gave them no mass). Without
    ``knobs.early_pass``, pass is pruned as ``_restrict_pass`` says (with
    ``knobs.own_area_pass``, less often); without
    ``knobs.fill_own_eyes``, so are the moves that fill one's own single-point eye (pass then
    remains whenever nothing else does). The root's expansion (node 0) does not count as a
    simulation; a root whose search asked for noise (``noise_pending``) gets it now,
    Dir(``knobs.alpha``) with weight ``knobs.epsilon``, or with ``knobs.gumbel`` its Gumbel
    noise and schedule (`tabula.mcts.gumbel.prepare_root`).
    """
    M = t.board.shape[2]
    nbr, zob = rules.neighbors, rules.zobrist
    path = np.empty(t.move_number.shape[1] + 1, dtype=np.uint64)
    mask = np.empty(M + 1, dtype=np.bool_)
    for i in range(n):
        g, node = leaves.slot[i], leaves.node[i]
        n_path = 0
        x = node
        while x > 0:  # the root's position is already in the real game's set
            path[n_path] = t.hash[g, x]
            n_path += 1
            x = t.parent[g, x]
        count = legal_mask(
            t.board[g, node], t.to_play[g, node], nbr, zob, t.hash[g, node],
            t.game_set[g], path, n_path, mask,
        )  # fmt: skip
        if not knobs.early_pass:
            count += _restrict_pass(
                t.board[g, node], t.to_play[g, node], t.passes[g, node], mask, nbr,
                knobs.own_area_pass,
            )  # fmt: skip
        if not knobs.fill_own_eyes:
            count += _drop_own_eye_fills(t.board[g, node], t.to_play[g, node], mask, nbr)
        _set_priors(t.P[g, node], priors[i], rules.perms[leaves.sym[i]], mask, count)
        t.state[g, node] = EXPANDED
        t.value[g, node] = values[i]
        if node == 0 and t.noise_pending[g]:
            pending, t.noise_pending[g] = t.noise_pending[g], 0
            if knobs.gumbel:
                prepare_root(t, g, knobs, pending == NOISY)
            else:
                add_root_noise(t, g, knobs.alpha, knobs.epsilon)
        _backup(t, g, node, values[i], knobs.virtual_loss)
        t.inflight[g] -= 1
        if node != 0:
            t.done[g] += 1
