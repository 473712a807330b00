"""What the search kernels work on: the trees' arrays, the leaves waiting for the network,
and the two bundles of constants every kernel call takes (`Rules` of the board, `Knobs` of
the search).

`tabula.mcts.kernels` documents the layout (a leading game axis, statistics on the child node
of each edge) and searches these arrays; `tabula.mcts.reuse` re-roots them after a move.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tabula.features import HISTORY

UNEXPANDED, EXPANDED, TERMINAL = 0, 1, 2
NOISY, QUIET = 1, 2  # noise_pending: the root, once evaluated, gets its noise / none
FRESH, KEPT, DROPPED = 0, 1, 2  # advance_root: no subtree to keep / kept / too big to keep
FULL = -2  # _descend found no free node


class Trees(NamedTuple):
    """The arrays of G trees (G game slots, C nodes each, M points). See the module docstring.

    Per node, [G, C]: parent (int32, -1 at the root), move (int16, the move from the parent,
    -1 at the root), state (int8: UNEXPANDED = pending evaluation, EXPANDED, TERMINAL),
    to_play (int8, +1/-1), passes (int8, consecutive passes ending here), move_number (int16,
    moves played in the game up to this node), N (int32), W (float32, the mover's view),
    value (float32, this node's own evaluation from its to_play's view: network or final
    score), hash (uint64, Zobrist of the board). board: int8[G, C, M]; P: float32[G, C, M+1];
    child: int32[G, C, M+1].

    Per game, [G]: size (nodes in use), done / inflight / target (simulations finished,
    waiting for the network, and wanted in this search), noise_pending (int8: the root is
    prepared once it has been evaluated: NOISY, with its root noise; QUIET, the Gumbel search's
    root without noise; 0, nothing pending), sym_state and rand_state (the game's
    `tabula.mcts.random` streams: dihedral transforms; root noise and move choice).
    gumbel: float32[G, M+1], the root's Gumbel noise; schedule: int32[G, C], the root's
    Sequential Halving schedule (`tabula.mcts.gumbel`; the Gumbel search only).
    history: int8[G, 8, M], the real game's boards, most recent (= the root board) first,
    zeros before the start. game_set: uint64[G, S], the hash set of every position of the
    real game (`tabula.go.hashset`).
    """

    parent: np.ndarray
    move: np.ndarray
    state: np.ndarray
    to_play: np.ndarray
    passes: np.ndarray
    move_number: np.ndarray
    N: np.ndarray
    W: np.ndarray
    value: np.ndarray
    hash: np.ndarray
    board: np.ndarray
    P: np.ndarray
    child: np.ndarray
    size: np.ndarray
    done: np.ndarray
    inflight: np.ndarray
    target: np.ndarray
    noise_pending: np.ndarray
    sym_state: np.ndarray
    rand_state: np.ndarray
    history: np.ndarray
    game_set: np.ndarray
    gumbel: np.ndarray
    schedule: np.ndarray


def new_trees(G: int, C: int, M: int, set_size: int) -> Trees:
    """Zeroed arrays for G trees of C nodes on a board of M points (pages are touched lazily)."""
    per_node = {
        "parent": np.int32, "move": np.int16, "state": np.int8, "to_play": np.int8,
        "passes": np.int8, "move_number": np.int16, "N": np.int32, "W": np.float32,
        "value": np.float32, "hash": np.uint64,
    }  # fmt: skip
    arrays = {name: np.zeros((G, C), dtype=dtype) for name, dtype in per_node.items()}
    return Trees(
        **arrays,
        board=np.zeros((G, C, M), dtype=np.int8),
        P=np.zeros((G, C, M + 1), dtype=np.float32),
        child=np.zeros((G, C, M + 1), dtype=np.int32),
        size=np.zeros(G, dtype=np.int32),
        done=np.zeros(G, dtype=np.int32),
        inflight=np.zeros(G, dtype=np.int32),
        target=np.zeros(G, dtype=np.int32),
        noise_pending=np.zeros(G, dtype=np.int8),
        sym_state=np.zeros(G, dtype=np.uint64),
        rand_state=np.zeros(G, dtype=np.uint64),
        history=np.zeros((G, HISTORY, M), dtype=np.int8),
        game_set=np.zeros((G, set_size), dtype=np.uint64),
        gumbel=np.zeros((G, M + 1), dtype=np.float32),
        schedule=np.zeros((G, C), dtype=np.int32),
    )


class Leaves(NamedTuple):
    """Leaves waiting for the network: slot, node, dihedral transform k and the 17 planes
    (already transformed by k) of leaf i; ``planes[:n]`` is the network batch.

    Collisions (a selection that ended at a leaf already waiting) keep their virtual loss
    until the batch is backed up, so the next selections of the same game look elsewhere:
    ``coll_slot[:n_coll[0]]`` / ``coll_node`` list them for `undo_collisions`."""

    slot: np.ndarray  # int32[B]
    node: np.ndarray  # int32[B]
    sym: np.ndarray  # int8[B]
    planes: np.ndarray  # uint8[B, 17, N, N]
    coll_slot: np.ndarray  # int32[4 B]
    coll_node: np.ndarray  # int32[4 B]
    n_coll: np.ndarray  # int64[1]


class Rules(NamedTuple):
    """The board and its rules, fixed for a `BatchedMCTS` (M = N * N points).

    neighbors: int32[M, 4] (`tabula.go.board.rules_context`, -1 off the board); zobrist:
    uint64 keys of the same context; perms: int64[8, M+1], the dihedral gather indices
    (`tabula.features.symmetry_permutations`); komi: added to white's area; max_moves: 2 M
    (paper: a game ends after 2 N^2 moves); score_utility, score_scale: how a finished game is
    valued, its result and a share of its score (`tabula.mcts.utility`; weight 0: the result).
    """

    neighbors: np.ndarray
    zobrist: np.ndarray
    perms: np.ndarray
    komi: float
    max_moves: int
    score_utility: float
    score_scale: float


class Knobs(NamedTuple):
    """The search's settings as the kernels read them (`SearchParams` resolved; the paper's
    names). Built by `SearchParams.knobs`, which fixes each field's type so numba compiles once.

    per_game: leaves selected per game and gather; c_puct, fpu: the selection's constants;
    virtual_loss: W taken from a path while its leaf waits; random_symmetry: evaluate a leaf
    under a random dihedral transform; early_pass, own_area_pass, fill_own_eyes: the move
    pruning of `tabula.mcts.kernels.expand_and_backup`; noise: Dirichlet noise at the root,
    Dir(alpha) with weight epsilon (PUCT), or Gumbel noise (Gumbel). gumbel: the Gumbel search
    (`tabula.mcts.gumbel`) instead of PUCT, with gumbel_m moves considered at the root and
    sigma's constants c_visit and c_scale.
    """

    per_game: int
    c_puct: float
    fpu: float
    virtual_loss: float
    random_symmetry: bool
    early_pass: bool
    own_area_pass: bool
    fill_own_eyes: bool
    noise: bool
    alpha: float
    epsilon: float
    gumbel: bool
    gumbel_m: int
    c_visit: float
    c_scale: float
