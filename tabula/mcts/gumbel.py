"""Gumbel search kernels (Danihelka et al., ICLR 2022, "Policy improvement by planning with
Gumbel"; ``search.algorithm: gumbel``). `tabula.mcts.search` is the Python face.

At the root, with logits = log P and g ~ Gumbel(0, 1) per legal move (g = 0 without noise):

- Gumbel-top-k and Sequential Halving in one rule (as mctx states it): the root's k-th
  simulation goes to the move with the highest g + logits + sigma(q) among the moves whose
  visit count equals ``schedule[k]``, the visits that Sequential Halving gives each considered
  move at that point (`considered_visits`). The first m = min(``gumbel_m``, legal moves)
  simulations visit the top m of g + logits, one each; each phase then keeps the better half;
- the move played is the best of the most visited moves by the same score (the last one
  standing); the policy target is pi' = softmax(logits + sigma(completed q)) (paper, eq. 11);
- below the root, the deterministic selection argmax_a pi'(a) - N(a) / (1 + sum_b N(b))
  (paper, section 5).

sigma(q) = (c_visit + max_b N(b)) * c_scale * q_hat, where q_hat is the completed Q rescaled
to [0, 1] over the node's legal moves: Q = W / N of a visited move, and the mixed value v_mix
(paper, appendix D) for an unvisited one, v_mix = (v + sum_b N(b) * sum_visited P q / sum_visited
P) / (1 + sum_b N(b)), v the node's own network value. Values are read from the side to move
at the node, as `tabula.mcts.kernels` stores them.

A search always starts from a root without children (`clear_root`): the schedule counts the
root's visits from zero. The root's own evaluation is kept, so a reused root costs nothing.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from tabula.mcts.random import gumbel
from tabula.mcts.trees import EXPANDED

#: Floor of a prior inside log and products: a legal move the network gave no mass stays legal.
TINY = 1e-30
#: The rescaling's floor of max - min (mctx's epsilon).
SPREAD = 1e-8


@njit(cache=True, nogil=True)
def considered_visits(m, n, out) -> None:
    """out[k], k < n: the visit count a move must have to get the root's k-th simulation
    under Sequential Halving over m moves (each phase gives every remaining move
    max(1, n // (ceil(log2 m) * remaining)) visits, then keeps the better half, at least 2).
    m <= 1: every simulation goes to the one move, out[k] = k."""
    if m <= 1:
        for k in range(n):
            out[k] = k
        return
    log2m = int(math.ceil(math.log2(m)))
    considered, visits, k = m, 0, 0
    while k < n:
        extra = max(1, n // (log2m * considered))
        for _ in range(extra):
            for _i in range(considered):
                if k < n:
                    out[k] = visits
                k += 1
            visits += 1
        considered = max(2, considered // 2)


@njit(cache=True, nogil=True)
def clear_root(t, g) -> None:
    """Drop the children of game g's expanded root, keeping its priors and its own value."""
    t.size[g] = 1
    t.child[g, 0, :] = -1
    t.N[g, 0] = 1  # the visit that expanded it
    t.W[g, 0] = -t.value[g, 0]  # W is from the view of the player who moved into the root


@njit(cache=True, nogil=True)
def prepare_root(t, g, knobs, noise) -> None:
    """Draw the root's Gumbel noise (zeros without ``noise``: Sequential Halving then keeps the
    moves of highest prior, and its winner is the search's argmax) and its schedule for the
    search's ``target`` simulations, once the root is expanded."""
    P = t.P[g, 0]
    legal = 0
    for a in range(P.shape[0]):
        if P[a] >= 0.0:
            legal += 1
            t.gumbel[g, a] = gumbel(t.rand_state, g) if noise else 0.0
        else:
            t.gumbel[g, a] = 0.0
    considered_visits(min(knobs.gumbel_m, legal), t.target[g], t.schedule[g])


@njit(cache=True, nogil=True, inline="always")
def completed_q(t, g, node, out) -> tuple[int, int, float, float]:
    """out[a] = completed Q(a) for each legal move a of ``node``, from its side to move: the
    mean value of a visited child, else v_mix, the node's value mixed with its children's
    prior-weighted Q (module docstring). Returns (sum_b N(b), max_b N(b), min and max of out
    over the legal moves)."""
    P = t.P[g, node]
    ch = t.child[g, node]
    sum_n, max_n, sum_pq, sum_p = 0, 0, 0.0, 0.0
    for a in range(P.shape[0]):
        if P[a] < 0.0:
            continue
        c = ch[a]
        if c >= 0 and t.N[g, c] > 0:
            n = t.N[g, c]
            q = t.W[g, c] / n
            sum_n += n
            max_n = max(max_n, n)
            p = max(P[a], TINY)
            sum_pq += p * q
            sum_p += p
    v_mix = t.value[g, node]
    if sum_n > 0:
        v_mix = (v_mix + sum_n * sum_pq / sum_p) / (1.0 + sum_n)
    lo, hi = np.inf, -np.inf
    for a in range(P.shape[0]):
        if P[a] < 0.0:
            continue
        c = ch[a]
        q = t.W[g, c] / t.N[g, c] if c >= 0 and t.N[g, c] > 0 else v_mix
        out[a] = q
        lo = min(lo, q)
        hi = max(hi, q)
    return sum_n, max_n, lo, hi


@njit(cache=True, nogil=True, inline="always")
def sigma(t, g, node, knobs, out) -> int:
    """out[a] = sigma(completed q)(a) for each legal move a of ``node`` (module docstring);
    returns sum_b N(b) over its children."""
    P = t.P[g, node]
    sum_n, max_n, lo, hi = completed_q(t, g, node, out)
    scale = (knobs.c_visit + max_n) * knobs.c_scale / max(hi - lo, SPREAD)
    for a in range(P.shape[0]):
        if P[a] >= 0.0:
            out[a] = (out[a] - lo) * scale
    return sum_n


@njit(cache=True, nogil=True)
def improved_root_values(t, slots, policy, values) -> None:
    """values[i] = sum_a policy[i, a] completed Q(a) at the i-th slot's root, from its side to
    move: the value of playing pi' (``policy``, `gumbel_decisions`) rather than the plain mean
    of the search's visits; the root's own value where it was never expanded."""
    q = np.empty(t.P.shape[2])
    for i in range(slots.shape[0]):
        g = slots[i]
        values[i] = t.value[g, 0]
        if t.state[g, 0] != EXPANDED:
            continue
        completed_q(t, g, 0, q)
        P = t.P[g, 0]
        v = 0.0
        for a in range(P.shape[0]):
            if P[a] >= 0.0:
                v += policy[i, a] * q[a]
        values[i] = v


@njit(cache=True, nogil=True, inline="always")
def _visits(t, g, node, a) -> int:
    c = t.child[g, node, a]
    return t.N[g, c] if c >= 0 else 0


@njit(cache=True, nogil=True, inline="always")
def _best_with_visits(t, g, sig, visits) -> int:
    """The legal root move with ``visits`` visits and the highest g + logits + sigma, or -1."""
    P = t.P[g, 0]
    best_a, best_s = -1, -np.inf
    for a in range(P.shape[0]):
        if P[a] < 0.0 or _visits(t, g, 0, a) != visits:
            continue
        s = t.gumbel[g, a] + math.log(max(P[a], TINY)) + sig[a]
        if s > best_s:
            best_a, best_s = a, s
    return best_a


@njit(cache=True, nogil=True)
def select_root(t, g, knobs, sig) -> int:
    """The root move of the next simulation (Sequential Halving's schedule; docstring)."""
    k = sigma(t, g, 0, knobs, sig)
    k = min(k, t.target[g] - 1)  # in-flight collisions can count ahead of the schedule
    a = _best_with_visits(t, g, sig, t.schedule[g, k])
    if a >= 0:
        return a
    # A collision undone out of order left no move at the scheduled count: take the least
    # visited of the visited moves (the next one Sequential Halving would have caught up).
    P = t.P[g, 0]
    fewest = -1
    for b in range(P.shape[0]):
        n = _visits(t, g, 0, b)
        if P[b] >= 0.0 and n > 0 and (fewest < 0 or n < fewest):
            fewest = n
    return _best_with_visits(t, g, sig, max(fewest, 0))


@njit(cache=True, nogil=True, inline="always")
def _improve(P, sig) -> None:
    """``sig`` (sigma over the legal moves of priors ``P``) becomes pi' = softmax(logits +
    sigma), in place; the entries of illegal moves are left as they are."""
    top = -np.inf
    for a in range(P.shape[0]):
        if P[a] >= 0.0:
            top = max(top, sig[a])
    z = 0.0
    for a in range(P.shape[0]):
        if P[a] >= 0.0:
            sig[a] = max(P[a], TINY) * math.exp(sig[a] - top)
            z += sig[a]
    for a in range(P.shape[0]):
        if P[a] >= 0.0:
            sig[a] /= z


@njit(cache=True, nogil=True)
def select_interior(t, g, node, knobs, sig) -> int:
    """argmax_a pi'(a) - N(a) / (1 + sum_b N(b)) over the legal moves (lowest index on ties)."""
    sum_n = sigma(t, g, node, knobs, sig)
    P = t.P[g, node]
    _improve(P, sig)
    best_a, best_s = -1, -np.inf
    for a in range(P.shape[0]):
        if P[a] < 0.0:
            continue
        s = sig[a] - _visits(t, g, node, a) / (1.0 + sum_n)
        if s > best_s:
            best_a, best_s = a, s
    return best_a


@njit(cache=True, nogil=True)
def gumbel_decisions(t, slots, knobs, moves, policy) -> None:
    """For the i-th slot g: moves[i] = the move to play (the best of the most visited root
    moves by g + logits + sigma), policy[i] = pi' = softmax(logits + sigma(completed q)) over
    the legal moves (0 elsewhere). A root never expanded (a finished game) gets move -1."""
    M1 = t.P.shape[2]
    sig = np.empty(M1)
    for i in range(slots.shape[0]):
        g = slots[i]
        policy[i, :] = 0.0
        moves[i] = -1
        if t.state[g, 0] != EXPANDED:
            continue
        sigma(t, g, 0, knobs, sig)
        P = t.P[g, 0]
        most = 0
        for a in range(M1):
            if P[a] >= 0.0:
                most = max(most, _visits(t, g, 0, a))
        moves[i] = _best_with_visits(t, g, sig, most)
        _improve(P, sig)
        for a in range(M1):
            if P[a] >= 0.0:
                policy[i, a] = sig[a]
