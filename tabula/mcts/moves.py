"""The per-move kernels of the batched MCTS: everything between two searches, for many game
slots in one call (`tabula.mcts.BatchedMCTS` is the Python face).

After a search: `root_stats` reads each root's visit counts and values, `choose_moves` picks
the moves (pi proportional to N^(1/tau), sampled from the game's ``rand_state`` stream,
`tabula.mcts.random`), `play_moves` plays them and re-roots the trees
(`tabula.mcts.reuse.advance_root`), and `start_searches` sets up the next searches with fresh
root noise. Doing this in numba over all slots that finished a search, rather than a few numpy
calls per slot in Python, keeps the per-move cost a small part of a move's network time on
small boards at few simulations (the self-play issue's (b)/(a) goal).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tabula.go.board import LEGAL, move_status
from tabula.mcts.gumbel import clear_root, prepare_root
from tabula.mcts.kernels import add_root_noise
from tabula.mcts.random import uniform
from tabula.mcts.reuse import advance_root
from tabula.mcts.trees import EXPANDED, NOISY, QUIET, TERMINAL


@njit(cache=True, nogil=True)
def start_searches(t, slots, simulations, knobs, quiet=False) -> None:
    """Begin a search of ``simulations`` new visits at each slot's root (none if the game is
    over). With ``knobs.noise`` and not ``quiet``, the root gets Dir(alpha) noise now if it is
    expanded, else once its evaluation comes back (`tabula.mcts.kernels.expand_and_backup`).
    The Gumbel search starts from the root without its children, and draws its noise (none
    when ``quiet``) and schedule (`tabula.mcts.gumbel.prepare_root`) at the same points."""
    noise = knobs.noise and not quiet
    for g in slots:
        t.done[g] = 0
        t.noise_pending[g] = 0
        t.target[g] = 0 if t.state[g, 0] == TERMINAL else simulations
        if knobs.gumbel and t.target[g] > 0:
            if t.state[g, 0] == EXPANDED:
                clear_root(t, g)
                prepare_root(t, g, knobs, noise)
            else:
                t.noise_pending[g] = NOISY if noise else QUIET
        elif noise and t.target[g] > 0:
            if t.state[g, 0] == EXPANDED:
                add_root_noise(t, g, knobs.alpha, knobs.epsilon)
            else:
                t.noise_pending[g] = NOISY


@njit(cache=True, nogil=True)
def root_stats(t, slots, visits, value, best_move, best_value) -> None:
    """For the i-th slot g: visits[i, a] = N(root, a); value[i] = the root's W / N from the side
    to move (0 if unvisited); best_move[i] = the most visited move (lowest index on ties);
    best_value[i] = its Q from the side to move (= value[i] if nothing was visited)."""
    for i in range(slots.shape[0]):
        g = slots[i]
        ch = t.child[g, 0]
        best, most = 0, -1
        for a in range(ch.shape[0]):
            c = ch[a]
            n = t.N[g, c] if c >= 0 else 0
            visits[i, a] = n
            if n > most:
                best, most = a, n
        n_root = t.N[g, 0]
        v = -t.W[g, 0] / n_root if n_root > 0 else 0.0
        value[i] = v
        best_move[i] = best
        c = ch[best]
        best_value[i] = t.W[g, c] / t.N[g, c] if most > 0 else v


@njit(cache=True, nogil=True)
def _choose(state, g, visits, tau) -> int:
    """pi(a) ~ visits[a]^(1/tau) sampled from stream g; tau = 0: the most visited move, ties
    broken uniformly at random. visits must not be all zero."""
    if tau == 0.0:
        most, ties = -1, 0
        for a in range(visits.shape[0]):
            if visits[a] > most:
                most, ties = visits[a], 1
            elif visits[a] == most:
                ties += 1
        k = int(uniform(state, g) * ties) if ties > 1 else 0
        for a in range(visits.shape[0]):
            if visits[a] == most:
                if k == 0:
                    return a
                k -= 1
    total = 0.0
    for a in range(visits.shape[0]):
        if visits[a] > 0:
            total += float(visits[a]) ** (1.0 / tau)
    x = uniform(state, g) * total
    last = -1
    for a in range(visits.shape[0]):
        if visits[a] > 0:
            last = a
            x -= float(visits[a]) ** (1.0 / tau)
            if x < 0.0:
                return a
    return last  # rounding left x >= 0 after the last visited move


@njit(cache=True, nogil=True)
def choose_moves(t, slots, visits, tau, out) -> None:
    """out[i] = the move for slot ``slots[i]`` from ``visits[i]`` at temperature ``tau[i]``."""
    for i in range(slots.shape[0]):
        out[i] = _choose(t.rand_state, slots[i], visits[i], tau[i])


@njit(cache=True, nogil=True)
def play_moves(t, slots, moves, reserve, rules, outcome) -> int:
    """Play ``moves[i]`` in slot ``slots[i]``'s real game and re-root its tree, keeping the
    subtree when ``reserve`` nodes stay free (outcome[i] = FRESH, KEPT or DROPPED).

    All moves are checked first: if one is illegal, nothing is played, its status (a
    `tabula.go.board` reason) goes to outcome[i] and i is returned; else -1."""
    no_path = np.zeros(0, dtype=np.uint64)
    for i in range(slots.shape[0]):
        g = slots[i]
        status = move_status(
            t.board[g, 0], moves[i], t.to_play[g, 0], rules.neighbors, rules.zobrist,
            t.hash[g, 0], t.game_set[g], no_path, 0,
        )  # fmt: skip
        if status != LEGAL:
            outcome[i] = status
            return i
    for i in range(slots.shape[0]):
        outcome[i] = advance_root(t, slots[i], moves[i], reserve, rules)
    return -1
