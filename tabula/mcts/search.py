"""`BatchedMCTS`: the search over many game slots (Silver et al. 2017, Methods "Search algorithm").

One `BatchedMCTS` holds a tree per game slot; a search step selects up to
``leaves_per_game`` leaves in every game (kept apart by virtual loss), evaluates all of them
in one network call, then expands them and backs their values up. The tree and rules work is
in numba (`tabula.mcts.kernels`), so the network dominates the cost.

The search, exactly as the paper states it:

- select a = argmax Q + U, U = c_puct P sqrt(sum_b N_b) / (1 + N), Q = W / N; an unvisited
  edge has Q = ``fpu`` (paper 0). Ties go to the larger P (on a node's first visit all scores
  tie, so it starts with the most probable move), then the lower index;
- P is the network's policy renormalised over the legal moves (occupied points, suicide and
  positional superko against the real game plus the search path are illegal: P = -1, never
  selected, never visited); each leaf is evaluated under a random dihedral transform d_i
  (drawn from the game's own stream, so a game's search does not depend on the other games
  in the batch) and its policy mapped back;
- the value v (side to move at the leaf) is backed up with its sign flipped at each ply;
  positions after two passes or 2 N^2 moves are terminal and valued by the Tromp-Taylor
  result with komi (+1 / -1 / 0 from the side to move), never by the network;
- the root gets Dirichlet noise P = (1 - eps) p + eps eta, eta ~ Dir(alpha) over its legal
  moves, drawn afresh for every move's search, also on a reused root;
- after the move, the played child becomes the root with its subtree and statistics (the
  rest is freed; a subtree too big for the tree's capacity is dropped, see `BatchedMCTS`).

With ``search.algorithm: gumbel`` the same batched loop runs the Gumbel search instead
(Danihelka et al. 2022; `tabula.mcts.gumbel`): Gumbel noise and Sequential Halving at the root,
its deterministic selection below, a policy target pi' (`BatchedMCTS.decide`), no Dirichlet
noise, and every search from a root without children.

Counting: ``simulations`` is the number of new visits below the root per search, so the root's
children's N sum to the kept subtree's visits plus ``simulations``. A fresh root's own
evaluation comes first and is not a simulation (as in mctx).

Randomness comes only from the ``np.random.Generator`` given to `BatchedMCTS.reset` for each
slot: it seeds the slot's two streams in the kernels (`tabula.mcts.random`), one for the
dihedral transforms, one for root noise, move sampling and tie breaks. The evaluator is
called with ``rng=None`` (the search applies the transforms itself).

The per-move calls (`BatchedMCTS.roots`, `choose_moves`, `play_many`, `start`) take many
slots at once, so a self-play step costs a few calls, not a few per game.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tabula.config import Config, SearchConfig
from tabula.features import NUM_PLANES, symmetry_permutations
from tabula.go.board import EMPTY_HASH, REASONS, area_score, rules_context
from tabula.go.game import Game
from tabula.go.hashset import hashset_insert, hashset_new
from tabula.mcts.gumbel import gumbel_decisions, improved_root_values
from tabula.mcts.kernels import expand_and_backup, gather, init_root, undo_collisions
from tabula.mcts.moves import choose_moves, play_moves, root_stats, start_searches
from tabula.mcts.trees import (
    DROPPED,
    KEPT,
    TERMINAL,
    UNEXPANDED,
    Knobs,
    Leaves,
    Rules,
    new_trees,
)

Evaluate = Callable[[np.ndarray, np.random.Generator | None], tuple[np.ndarray, np.ndarray]]
"""``(planes uint8[B, 17, N, N], rng) -> (priors float32[B, M+1], values float32[B])``:
softmax priors over all moves (unmasked), values in [-1, 1] from the side to move."""


class SearchError(ValueError):
    """Bad search input: an illegal move to play, an evaluator answer of the wrong shape."""


#: Dirichlet alpha when neither the caller nor the config sets one and no board is known
#: (`SearchParams.from_config` resolves it for the board instead): the paper's 19x19 value.
DEFAULT_ALPHA = 0.03


@dataclass(frozen=True, init=False)
class SearchParams:
    """How `BatchedMCTS` searches: the config's `search` section, resolved, and the two
    choices that are not configuration.

    config: the `SearchConfig`, with ``dirichlet_alpha`` set (the board-scaled default
    resolved) and ``simulations`` the count per move (a caller's override applied).
    noise: whether roots get Dirichlet noise (self-play yes; evaluation matches no).
    random_symmetry: evaluate each leaf under a random dihedral transform (paper: yes).

    ``SearchParams(simulations=64, leaves_per_game=1)`` sets `SearchConfig` fields by name on
    top of ``config`` (default: the config's defaults); the result is validated like a config.
    """

    config: SearchConfig
    noise: bool
    random_symmetry: bool

    def __init__(
        self,
        config: SearchConfig | None = None,
        *,
        noise: bool = True,
        random_symmetry: bool = True,
        **settings: object,
    ) -> None:
        config = SearchConfig() if config is None else config
        if settings:
            config = SearchConfig.model_validate(config.model_dump() | settings)
        if config.dirichlet_alpha is None:
            config = config.model_copy(update={"dirichlet_alpha": DEFAULT_ALPHA})
        object.__setattr__(self, "config", config)
        object.__setattr__(self, "noise", bool(noise))
        object.__setattr__(self, "random_symmetry", bool(random_symmetry))

    @classmethod
    def from_config(
        cls, cfg: Config, *, simulations: int | None = None, noise: bool = True
    ) -> SearchParams:
        """The config's search (alpha scaled to its board), ``simulations`` overriding."""
        search = cfg.resolve().search
        if simulations is not None:
            search = search.model_copy(update={"simulations": simulations})
        return cls(search, noise=noise)

    @property
    def simulations(self) -> int:
        """Simulations per search (new visits below the root)."""
        return self.config.simulations

    @property
    def dirichlet_alpha(self) -> float:
        """The root noise's alpha (resolved: never None)."""
        alpha = self.config.dirichlet_alpha
        assert alpha is not None  # set by __init__
        return alpha

    def knobs(self) -> Knobs:
        """These settings as the kernels take them (types fixed: numba compiles once)."""
        c = self.config
        return Knobs(
            per_game=int(c.leaves_per_game),
            c_puct=float(c.c_puct),
            fpu=float(c.fpu),
            virtual_loss=float(c.virtual_loss),
            random_symmetry=self.random_symmetry,
            early_pass=bool(c.early_pass),
            own_area_pass=bool(c.own_area_pass),
            fill_own_eyes=bool(c.fill_own_eyes),
            noise=self.noise,
            alpha=self.dirichlet_alpha,
            epsilon=float(c.dirichlet_epsilon),
            gumbel=c.algorithm == "gumbel",
            gumbel_m=int(c.gumbel_m),
            c_visit=float(c.gumbel_c_visit),
            c_scale=float(c.gumbel_c_scale),
        )

    @property
    def gumbel(self) -> bool:
        """Whether this is the Gumbel search (`tabula.mcts.gumbel`)."""
        return self.config.algorithm == "gumbel"


@dataclass(frozen=True)
class Games:
    """The real games in a search's slots (`BatchedMCTS.games`): a read-only snapshot, row i
    for the i-th slot asked.

    to_play: int8[k], the side to move (+1 black, -1 white); move_number: int16[k], moves
    played so far; passes: int8[k], consecutive passes just played; over: bool[k], the game
    has ended (two passes in a row or 2 N^2 moves; resignation is the caller's business).
    """

    to_play: np.ndarray
    move_number: np.ndarray
    passes: np.ndarray
    over: np.ndarray


@dataclass(frozen=True)
class RootStats:
    """The root after a search. visits: int32[M+1], N(root, a) per move. value: W/N of the
    root, from the side to move, in [-1, 1]. best_move: the most visited move (lowest index
    on ties). best_value: Q of best_move from the side to move (= value if nothing visited)."""

    visits: np.ndarray
    value: float
    best_move: int
    best_value: float


@dataclass(frozen=True)
class Decisions:
    """What k searches decided (`BatchedMCTS.decide`), row i for the i-th slot asked.

    move: int64[k], the move to play; policy: float32[k, M+1], the policy target: the visit
    distribution N / sum N (PUCT), or pi' = softmax(logits + sigma(completed Q)) (Gumbel)."""

    move: np.ndarray
    policy: np.ndarray


@dataclass(frozen=True)
class Roots:
    """`RootStats` of k slots at once (`BatchedMCTS.roots`): visits int32[k, M+1], value
    float32[k], best_move int64[k], best_value float32[k], row i for the i-th slot asked."""

    visits: np.ndarray
    value: np.ndarray
    best_move: np.ndarray
    best_value: np.ndarray


class BatchedMCTS:
    """Search trees for ``n_games`` game slots on an N x N board (see the module docstring).

    capacity: nodes per tree; default ``3 * (simulations + 1)``. Each simulation adds at most
    one node, so a search needs ``simulations + 1`` free nodes; a kept subtree bigger than
    ``capacity - simulations - 1`` is dropped (the search restarts from a fresh root) rather
    than pruned. With the default that happens only once the played child holds more than
    twice a search's visits (a search that keeps choosing the same line at tau -> 0).
    Memory is about ``capacity * (9 M + 40)`` bytes per slot.

    Counters: ``simulations`` (visits below roots), ``evaluations`` (network positions),
    ``reused`` / ``dropped`` (moves whose subtree was kept / too big to keep).

    Callers read the games through `games` and the roots through `roots`; the tree arrays
    (``trees``, `tabula.mcts.trees.Trees`) belong to the kernels and the package's tests.
    """

    def __init__(
        self,
        n_games: int,
        board_size: int,
        komi: float,
        params: SearchParams,
        *,
        capacity: int | None = None,
    ) -> None:
        if n_games < 1:
            raise SearchError(f"n_games must be >= 1 (got {n_games})")
        self.ctx = rules_context(board_size)
        self.N, self.M = board_size, board_size * board_size
        self.komi = float(komi)
        self.params = params
        self.max_moves = 2 * self.M  # paper: games end after 2 N^2 moves
        self.capacity = capacity or 3 * (params.simulations + 1)
        if self.capacity < params.simulations + 1:
            raise SearchError(f"capacity {self.capacity} < simulations + 1")
        set_size = hashset_new(self.max_moves + 1).shape[0]
        self.trees = new_trees(n_games, self.capacity, self.M, set_size)
        self.perms = np.ascontiguousarray(symmetry_permutations(board_size))
        c = params.config
        self.rules = Rules(
            self.ctx.neighbors, self.ctx.zobrist, self.perms, self.komi, self.max_moves,
            float(c.score_utility), float(c.score_scale * board_size),
        )  # fmt: skip
        self.knobs = params.knobs()
        self.rngs: list[np.random.Generator | None] = [None] * n_games
        self.simulations = 0
        self.evaluations = 0
        self.reused = 0
        self.dropped = 0

    @property
    def n_games(self) -> int:
        return int(self.trees.size.shape[0])

    # -- games ---------------------------------------------------------------------------

    def reset(self, slot: int, rng: np.random.Generator, game: Game | None = None) -> None:
        """Start slot's tree at the empty board (or at ``game``'s position, history included)."""
        t, M = self.trees, self.M
        t.history[slot] = 0
        t.game_set[slot] = 0
        if game is None:
            board, h, to_play, passes, move_number = np.zeros(M, np.int8), EMPTY_HASH, 1, 0, 0
            hashset_insert(t.game_set[slot], h)
        else:
            if game.size != self.N:
                raise SearchError(f"game is {game.size}x{game.size}, search is {self.N}x{self.N}")
            t.history[slot] = game.recent_boards(t.history.shape[1])
            board, h = t.history[slot, 0].copy(), np.uint64(game.position_hash)
            to_play, passes, move_number = game.to_play, game.passes, game.move_number
            if not game.is_over():  # (a finished game is not searched, and may be longer)
                for v in game.hash_set()[game.hash_set() != 0]:
                    hashset_insert(t.game_set[slot], v)
        init_root(t, slot, board, h, to_play, passes, move_number, self.rules)
        t.sym_state[slot], t.rand_state[slot] = rng.integers(0, 2**63, size=2, dtype=np.uint64)
        self.rngs[slot] = rng

    def games(self, slots: Sequence[int] | np.ndarray | None = None) -> Games:
        """The real games of ``slots`` (default: every slot) as they stand now."""
        t = self.trees
        rows = np.arange(self.n_games) if slots is None else np.asarray(slots, dtype=np.int64)
        snapshot = Games(
            to_play=t.to_play[rows, 0],
            move_number=t.move_number[rows, 0],
            passes=t.passes[rows, 0],
            over=t.state[rows, 0] == TERMINAL,
        )
        for array in (snapshot.to_play, snapshot.move_number, snapshot.passes, snapshot.over):
            array.flags.writeable = False
        return snapshot

    def move_number(self, slot: int) -> int:
        return int(self.trees.move_number[slot, 0])

    def is_over(self, slot: int) -> bool:
        """Two passes in a row or 2 N^2 moves in slot's real game."""
        return bool(self.trees.state[slot, 0] == TERMINAL)

    def board(self, slot: int) -> np.ndarray:
        """The real game's board, int8[M] (a copy)."""
        return self.trees.history[slot, 0].copy()

    def score(self, slot: int) -> float:
        """Tromp-Taylor score of slot's real game now: black area - white area - komi."""
        return float(area_score(self.trees.history[slot, 0], self.ctx.neighbors) - self.komi)

    def final_value(self, slot: int) -> float:
        """Tromp-Taylor result of a finished game from the side to move (+1, -1, 0); the
        root's value adds the score's share under ``search.score_utility``, this does not."""
        return float(np.sign(self.score(slot) * self.trees.to_play[slot, 0]))

    def play(self, slot: int, move: int) -> bool:
        """Play ``move`` for the side to move in slot's real game; keep the subtree if it can.

        Raises SearchError for an illegal move or a finished game. Returns whether the
        subtree was reused."""
        return bool(self.play_many([slot], [move])[0] == KEPT)

    def play_many(self, slots: Sequence[int] | np.ndarray, moves: Sequence[int] | np.ndarray
                  ) -> np.ndarray:  # fmt: skip
        """`play` in each slot (``moves[i]`` in ``slots[i]``): all or, on an error, none.
        Returns each tree's outcome: FRESH, KEPT or DROPPED (`tabula.mcts.trees`)."""
        t = self.trees
        slots = np.asarray(slots, dtype=np.int64)
        moves = np.asarray(moves, dtype=np.int64)
        over = slots[t.state[slots, 0] == TERMINAL]
        if len(over):
            raise SearchError(f"slot {over[0]}: the game is over")
        outcome = np.zeros(len(slots), dtype=np.int64)
        bad = play_moves(t, slots, moves, self.params.simulations + 1, self.rules, outcome)
        if bad >= 0:
            reason = REASONS[int(outcome[bad])]
            raise SearchError(f"slot {slots[bad]}: move {moves[bad]} is illegal ({reason})")
        self.reused += int(np.count_nonzero(outcome == KEPT))
        self.dropped += int(np.count_nonzero(outcome == DROPPED))
        return outcome

    # -- search --------------------------------------------------------------------------

    def new_leaves(self, max_leaves: int) -> Leaves:
        """Buffers for up to ``max_leaves`` leaves (one network batch)."""
        return Leaves(
            slot=np.zeros(max_leaves, dtype=np.int32),
            node=np.zeros(max_leaves, dtype=np.int32),
            sym=np.zeros(max_leaves, dtype=np.int8),
            planes=np.zeros((max_leaves, NUM_PLANES, self.N, self.N), dtype=np.uint8),
            coll_slot=np.zeros(4 * max_leaves, dtype=np.int32),
            coll_node=np.zeros(4 * max_leaves, dtype=np.int32),
            n_coll=np.zeros(1, dtype=np.int64),
        )

    def start(
        self,
        slots: Sequence[int] | np.ndarray,
        simulations: int | None = None,
        quiet: bool = False,
    ) -> None:
        """Begin a search at each slot's root: ``simulations`` new visits (default: params),
        with fresh root noise if the params ask for it and the search is not ``quiet`` (the
        cheap searches of playout caps, as KataGo's: Wu 2019, section 3.1)."""
        sims = self.params.simulations if simulations is None else simulations
        if self.params.gumbel and sims >= self.capacity:  # its schedule has capacity entries
            raise SearchError(
                f"{sims} simulations need a capacity above {sims} (have {self.capacity})"
            )
        start_searches(self.trees, np.asarray(slots, dtype=np.int64), sims, self.knobs, quiet)

    def unfinished(self, slots: Sequence[int] | np.ndarray) -> np.ndarray:
        """The slots whose search still needs simulations (int64 array)."""
        s = np.asarray(slots, dtype=np.int64)
        return s[self.trees.done[s] < self.trees.target[s]]

    def gather(self, slots: np.ndarray, leaves: Leaves) -> int:
        """Select leaves in ``slots`` (each game at most ``leaves_per_game``, and
        ``len(slots) * leaves_per_game <= len(leaves.slot)``); returns the count n, the
        network batch being ``leaves.planes[:n]``."""
        knobs = self.knobs
        if len(slots) * knobs.per_game > leaves.slot.shape[0]:
            raise SearchError("leaf buffer too small for these slots")
        slots = np.asarray(slots, dtype=np.int64)
        n, terminal = gather(self.trees, slots, leaves, self.rules, knobs)
        self.simulations += terminal
        if n == 0:  # no backup will follow: release the collisions' virtual loss now
            undo_collisions(self.trees, leaves, knobs.virtual_loss)
        return int(n)

    def backup(self, leaves: Leaves, n: int, priors: np.ndarray, values: np.ndarray) -> None:
        """Expand the ``n`` gathered leaves with the network's answer and back values up."""
        priors = np.ascontiguousarray(priors, dtype=np.float32)
        values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        if priors.shape != (n, self.M + 1) or values.shape != (n,):
            raise SearchError(
                f"evaluator returned priors {priors.shape} and values {values.shape}, "
                f"expected ({n}, {self.M + 1}) and ({n},)"
            )
        expand_and_backup(self.trees, leaves, n, priors, values, self.rules, self.knobs)
        undo_collisions(self.trees, leaves, self.knobs.virtual_loss)
        self.evaluations += n
        self.simulations += n - int(np.count_nonzero(leaves.node[:n] == 0))

    def search(
        self,
        slots: Sequence[int] | np.ndarray,
        evaluate: Evaluate,
        *,
        simulations: int | None = None,
        max_batch: int | None = None,
        quiet: bool = False,
    ) -> None:
        """Run a whole search in each slot: start, then gather / evaluate / backup until done.

        max_batch: most positions per ``evaluate`` call (a bigger gather is split); quiet: no
        root noise (`start`)."""
        self.start(slots, simulations, quiet)
        active = self.unfinished(slots)
        leaves = self.new_leaves(max(len(active), 1) * self.knobs.per_game)
        while len(active):
            n = self.gather(active, leaves)
            if n:
                priors, values = evaluate_in_chunks(evaluate, leaves.planes[:n], max_batch)
                self.backup(leaves, n, priors, values)
            active = self.unfinished(active)

    # -- results -------------------------------------------------------------------------

    def root_stats(self, slot: int) -> RootStats:
        r = self.roots([slot])
        value, best_value = float(r.value[0]), float(r.best_value[0])
        return RootStats(r.visits[0], value, int(r.best_move[0]), best_value)

    def roots(self, slots: Sequence[int] | np.ndarray) -> Roots:
        """`root_stats` of several slots in one call."""
        slots = np.asarray(slots, dtype=np.int64)
        k = len(slots)
        r = Roots(np.zeros((k, self.M + 1), np.int32), np.zeros(k, np.float32),
                  np.zeros(k, np.int64), np.zeros(k, np.float32))  # fmt: skip
        root_stats(self.trees, slots, r.visits, r.value, r.best_move, r.best_value)
        return r

    def root_priors(self, slots: Sequence[int] | np.ndarray) -> np.ndarray:
        """float32[k, M+1]: the prior of each slot's root, the network's policy over the legal
        moves (with its root noise under PUCT), 0 at the illegal ones."""
        return np.maximum(self.trees.P[np.asarray(slots, dtype=np.int64), 0], np.float32(0.0))

    def choose_move(self, slot: int, tau: float, visits: np.ndarray | None = None) -> int:
        """pi(a) proportional to N(root, a)^(1/tau), sampled from the slot's stream;
        ``tau == 0`` means tau -> 0: the most visited move, ties broken at random."""
        if visits is None:
            visits = self.root_stats(slot).visits
        return int(self.choose_moves([slot], np.array([tau]), np.asarray(visits)[None])[0])

    def choose_moves(
        self, slots: Sequence[int] | np.ndarray, tau: np.ndarray, visits: np.ndarray
    ) -> np.ndarray:
        """`choose_move` for each slot: ``tau[i]`` and ``visits[i]`` (e.g. `Roots.visits`)
        for ``slots[i]``; int64 moves."""
        slots = np.asarray(slots, dtype=np.int64)
        self._check_reset(slots)
        visits = np.ascontiguousarray(visits, dtype=np.int32)
        empty = slots[visits.sum(axis=1) == 0]
        if len(empty):
            raise SearchError(f"slot {empty[0]}: no visits at the root (run a search first)")
        out = np.zeros(len(slots), dtype=np.int64)
        choose_moves(self.trees, slots, visits, np.asarray(tau, dtype=np.float64), out)
        return out

    def decide(
        self,
        slots: Sequence[int] | np.ndarray,
        tau: np.ndarray | float = 0.0,
        visits: np.ndarray | None = None,
    ) -> Decisions:
        """The move and the policy target of each slot's finished search.

        PUCT: the move is `choose_moves` at temperature ``tau[i]`` (paper), the target the visit
        distribution (``visits``: the slots' `Roots.visits` when the caller has them). Gumbel:
        the move is Sequential Halving's last one standing, whatever ``tau`` (the Gumbel noise
        already samples), the target pi' (`tabula.mcts.gumbel`)."""
        slots = np.asarray(slots, dtype=np.int64)
        if not self.params.gumbel:
            if visits is None:
                visits = self.roots(slots).visits
            tau = np.broadcast_to(np.asarray(tau, dtype=np.float64), (len(slots),))
            move = self.choose_moves(slots, tau, visits)
            total = np.maximum(visits.sum(axis=1, keepdims=True), 1)
            return Decisions(move, (visits / total).astype(np.float32))
        self._check_reset(slots)
        move = np.zeros(len(slots), dtype=np.int64)
        policy = np.zeros((len(slots), self.M + 1), dtype=np.float32)
        gumbel_decisions(self.trees, slots, self.knobs, move, policy)
        unsearched = slots[move < 0]
        if len(unsearched):
            raise SearchError(f"slot {unsearched[0]}: no search at the root (run a search first)")
        return Decisions(move, policy)

    def improved_values(self, slots: Sequence[int] | np.ndarray, policy: np.ndarray) -> np.ndarray:
        """float32[k]: each slot's root value under its policy target, sum_a pi'(a) completed
        Q(a), from the side to move (`tabula.mcts.gumbel.improved_root_values`; the Gumbel
        search, after `decide` gave ``policy``); PUCT: the root's mean value (`roots`), which
        its visit-count target already weighs the same way."""
        slots = np.asarray(slots, dtype=np.int64)
        if not self.params.gumbel:
            return self.roots(slots).value.astype(np.float32)
        values = np.zeros(len(slots), dtype=np.float64)
        improved_root_values(self.trees, slots, np.ascontiguousarray(policy), values)
        return values.astype(np.float32)

    def visit_values(self, slots: Sequence[int] | np.ndarray, visits: np.ndarray) -> np.ndarray:
        """float32[k]: each slot's root value as sum_a N(a) Q(a) / sum_a N(a) over its visited
        root moves (``visits``: the slots' `Roots.visits`), from the side to move: the search's
        children weighted by their visits, without the root's own network value that the
        search's mean (`roots`) also holds; the root's own value where nothing was visited."""
        slots = np.asarray(slots, dtype=np.int64)
        visits = np.asarray(visits, dtype=np.float64)
        total = visits.sum(axis=1, keepdims=True)
        weights = (visits / np.maximum(total, 1.0)).astype(np.float32)
        values = np.zeros(len(slots), dtype=np.float64)
        improved_root_values(self.trees, slots, np.ascontiguousarray(weights), values)
        own = self.roots(slots).value
        return np.where(total[:, 0] > 0, values, own).astype(np.float32)

    def compile_ahead(self) -> None:
        """Compile the kernels a game's first move reaches after its first gather, without
        running them (or load them from numba's cache): each for the types of the arguments
        this search's methods pass it, from its own trees, leaves, rules and knobs (slots,
        moves and counts int64, as the methods make them). Run beside a process whose first
        game compiles the kernels one by one as it calls them (the root, the start and the
        gather take it about half its time), this compiles the rest meanwhile
        (`tasks.workers`), and that game then loads them from the cache."""
        t, M, one = self.trees, self.M, np.zeros(1, dtype=np.int64)
        leaves = self.new_leaves(self.knobs.per_game)
        r = Roots(np.zeros((1, M + 1), np.int32), np.zeros(1, np.float32),
                  np.zeros(1, np.int64), np.zeros(1, np.float32))  # fmt: skip
        policy, value = np.zeros((1, M + 1), np.float32), np.zeros(1, np.float32)
        if self.params.gumbel:
            decide = (gumbel_decisions, (t, one, self.knobs, one, policy))
        else:
            visits = np.zeros((1, M + 1), np.int32)
            tau = np.broadcast_to(np.zeros(1, np.float64), (1,))  # (read-only, as `decide`'s)
            decide = (choose_moves, (t, one, visits, tau, one))
        calls = (  # (in the order a game reaches them, after its first gather)
            (expand_and_backup, (t, leaves, 1, policy, value, self.rules, self.knobs)),
            (undo_collisions, (t, leaves, self.knobs.virtual_loss)),
            (root_stats, (t, one, r.visits, r.value, r.best_move, r.best_value)),
            decide,
            (play_moves, (t, one, one, self.params.simulations + 1, self.rules, one)),
        )
        for kernel, args in calls:
            kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))

    def _check_reset(self, slots: np.ndarray) -> None:
        for slot in slots:
            if self.rngs[slot] is None:
                raise SearchError(f"slot {slot} has no game: call reset first")

    def pending_root(self, slot: int) -> bool:
        """Whether slot's root has not been evaluated yet."""
        return bool(self.trees.state[slot, 0] == UNEXPANDED)


def evaluate_in_chunks(
    evaluate: Evaluate, planes: np.ndarray, max_batch: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """``evaluate(planes, None)`` in calls of at most ``max_batch`` positions."""
    n = planes.shape[0]
    if max_batch is None or n <= max_batch:
        return evaluate(planes, None)
    parts = [evaluate(planes[i : i + max_batch], None) for i in range(0, n, max_batch)]
    return (
        np.concatenate([np.asarray(p) for p, _ in parts]),
        np.concatenate([np.asarray(v).reshape(-1) for _, v in parts]),
    )
