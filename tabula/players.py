"""The players of the core: the random player, the arena adapter for one-game players, and the
players that take an evaluator (the raw network, the network with search).

`RandomPlayer` is the weakest anchor of the Elo scale and the default GTP player; it implements
`tabula.gtp.Player` (``genmove(game, color)``), and `SequentialPlayer` lets the arena play any
such player. `RawNetworkPlayer` and `MctsPlayer` implement both `tabula.gtp.Player` and
`tabula.arena.ArenaPlayer` (batched, per-slot games) over any `tabula.mcts.Evaluate`; neither
resigns. `tasks.players` builds them from a checkpoint; GTP engines run as subprocesses in
`tasks.engines`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tabula.arena import Failure, MoveRequest
from tabula.config import Config, SearchConfig
from tabula.go.board import own_eyes
from tabula.go.game import Game
from tabula.gtp import Player
from tabula.mcts import BatchedMCTS, Evaluate, SearchError, SearchParams
from tabula.mcts.analysis import Analysis, aux_of

#: One game's search (`MctsPlayer.genmove`, what `tabula gtp` plays) with the Gumbel search
#: evaluates this many leaves a network batch from ``DEEP_FROM`` simulations up. `python -m
#: bench.genmove`'s head-to-head (the quick start's Gumbel search, the same network both sides,
#: 100 games from seeded openings, 2026-11-26): at 400 simulations 16 leaves beat 4 by 67%
#: [57%, 75%] at half the CPU a move; at 64, 16 leaves won 44% [35%, 54%], no gain. Shallower
#: searches and PUCT (unmeasured; the paper's preset batches 8) keep ``search.leaves_per_game``.
DEEP_LEAVES, DEEP_FROM = 16, 400


def genmove_leaves(simulations: int, search: SearchConfig) -> int:
    """The leaves a network batch of one game's search of ``simulations``, by default."""
    leaves = search.leaves_per_game
    if search.algorithm == "gumbel" and simulations >= DEEP_FROM:
        return max(DEEP_LEAVES, leaves)
    return leaves


class RandomPlayer:
    """Uniform among legal moves, except moves that fill a single-point eye of its own colour.

    Excluding own-eye fills is what makes random games end (two passes) instead of running
    to the move limit: it passes when nothing else is left, and never resigns.
    """

    def __init__(self, seed: int | None = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def genmove(self, game: Game, color: int) -> int:
        M = game.size * game.size
        if color == game.to_play:
            legal = np.asarray(game.legal_mask(), dtype=bool)[:M].copy()
        else:
            legal = np.array([game.is_legal(m, color) for m in range(M)], dtype=bool)
        legal &= ~own_eyes(game.board, color).reshape(M)
        candidates = np.flatnonzero(legal)
        if candidates.size == 0:
            return M
        return int(self._rng.choice(candidates))


class SequentialPlayer:
    """Adapts a one-game `tabula.gtp.Player` (``genmove(game, color)``) to the arena.

    It answers the games of a batch one after another; it keeps no per-game state. It is
    still a `tabula.gtp.Player` itself (``genmove`` is passed through), for the GTP server.
    """

    def __init__(self, player: Player, name: str, max_concurrent: int | None = None) -> None:
        self.player = player
        self.name = name
        self.max_concurrent = max_concurrent

    def start_game(self, slot: int, game: Game, color: int) -> Failure | None:
        return None

    def genmoves(self, requests: Sequence[MoveRequest]) -> list[int | Failure]:
        return [int(self.player.genmove(r.game.copy(), r.color)) for r in requests]

    def genmove(self, game: Game, color: int) -> int:
        return self.player.genmove(game, color)

    def observe(self, slot: int, color: int, move: int) -> Failure | None:
        return None

    def end_game(self, slot: int) -> None:
        return None


def _as_to_play(game: Game, color: int) -> Game:
    """`game` with `color` to move (a GTP controller may ask for either colour)."""
    if color == game.to_play:
        return game
    other = game.copy()
    other.to_play = color
    return other


class RawNetworkPlayer:
    """The raw network (paper: "raw network" player): argmax of p over the legal moves.

    Each position is evaluated under a random dihedral transform (the evaluator's rng, paper
    Methods), drawn from this player's seeded generator; no search, never resigns.
    """

    def __init__(self, evaluate: Evaluate, name: str, seed: int = 0) -> None:
        self.evaluate, self.name = evaluate, name
        self.max_concurrent: int | None = None
        self._rng = np.random.default_rng(seed)

    def start_game(self, slot: int, game: Game, color: int) -> Failure | None:
        return None

    def genmoves(self, requests: Sequence[MoveRequest]) -> list[int | Failure]:
        games = [_as_to_play(r.game, r.color) for r in requests]
        planes = np.stack([g.features() for g in games])
        priors, _ = self.evaluate(planes, self._rng)
        legal = np.stack([g.legal_mask() for g in games])
        return [int(m) for m in np.argmax(np.where(legal, priors, -1.0), axis=1)]

    def observe(self, slot: int, color: int, move: int) -> Failure | None:
        return None

    def end_game(self, slot: int) -> None:
        return None

    def genmove(self, game: Game, color: int) -> int:
        """`tabula.gtp.Player`."""
        answer = self.genmoves([MoveRequest(0, game, color)])[0]
        assert isinstance(answer, int)
        return answer

    def network_view(self, game: Game, color: int) -> tuple[np.ndarray, float]:
        """`tabula.analyze.NetworkView`."""
        return _network_view(self.evaluate, game, color, self._rng)


class MctsPlayer:
    """Network + MCTS as in the paper's evaluation: tau -> 0, no Dirichlet noise (the Gumbel
    search: no Gumbel noise, Sequential Halving's move).

    One `BatchedMCTS` serves every game of this player (a slot per arena slot), so one network
    batch holds leaves of all the games where it is to move; each tree follows its game through
    `observe` (tree reuse, both colours' moves). Each game gets its own generator (dihedral
    transforms, tie breaks) from (seed, games started so far). Never resigns.
    """

    def __init__(
        self,
        evaluate: Evaluate,
        cfg: Config,
        simulations: int,
        name: str,
        seed: int = 0,
        leaves_per_move: int | None = None,
    ) -> None:
        self.evaluate, self.name, self.seed = evaluate, name, seed
        self.max_concurrent: int | None = None
        self.params = SearchParams.from_config(cfg, simulations=simulations, noise=False)
        # One game's search (`genmove`): its leaves evaluated `leaves_per_move` at a time (one
        # network batch; None: `genmove_leaves`), where matches batch the leaves of many games.
        leaves = leaves_per_move or genmove_leaves(simulations, self.params.config)
        self._one_params = SearchParams(
            self.params.config, noise=False, random_symmetry=self.params.random_symmetry,
            leaves_per_game=leaves,
        )  # fmt: skip
        self._one: BatchedMCTS | None = None
        self._one_at: tuple[list[tuple[int, int]], int] = ([], 1)  # searched: history, to play
        self.size, self.komi = cfg.rules.board_size, cfg.rules.komi
        self.max_batch = cfg.selfplay.batch_size
        self.search: BatchedMCTS | None = None
        self._games: dict[int, Game] = {}  # slot -> the referee's game (read only)
        self._stale: set[int] = set()
        self._started = 0

    def start_game(self, slot: int, game: Game, color: int) -> Failure | None:
        self._ensure_slots(slot + 1)
        assert self.search is not None
        rng = np.random.default_rng([self.seed, self._started])
        self._started += 1
        self._games[slot] = game
        self.search.reset(slot, rng, game)
        self._stale.discard(slot)
        return None

    def _ensure_slots(self, n: int) -> None:
        """Grow the search to n slots; trees of games in progress restart from their games."""
        if self.search is not None and self.search.n_games >= n:
            return
        old = self.search
        slots = max(n, 2 * old.n_games) if old is not None else n
        self.search = BatchedMCTS(slots, self.size, self.komi, self.params)
        if old is not None:
            for slot, game in self._games.items():
                self.search.reset(slot, old.rngs[slot] or np.random.default_rng(), game)

    def genmoves(self, requests: Sequence[MoveRequest]) -> list[int | Failure]:
        search = self.search
        assert search is not None, "start_game first"
        for r in requests:  # a tree that lost track of its game restarts from the game
            if r.slot in self._stale or search.move_number(r.slot) != r.game.move_number:
                rng = search.rngs[r.slot] or np.random.default_rng([self.seed, r.slot])
                search.reset(r.slot, rng, _as_to_play(r.game, r.color))
                self._stale.discard(r.slot)
        slots = [r.slot for r in requests]
        search.search(slots, self.evaluate, max_batch=self.max_batch)
        return [int(m) for m in search.decide(slots, tau=0.0).move]

    def observe(self, slot: int, color: int, move: int) -> Failure | None:
        if self.search is None or slot not in self._games:
            return None
        try:
            self.search.play(slot, move)
        except SearchError:
            self._stale.add(slot)  # e.g. the game ended on the tree's side; rebuild on demand
        return None

    def end_game(self, slot: int) -> None:
        self._games.pop(slot, None)

    def genmove(self, game: Game, color: int) -> int:
        """`tabula.gtp.Player`: a one-game search from `game`. Its tree follows the game: when
        `game` goes on from the position the last genmove searched, the moves since (both
        colours', alternating) are played into the tree, which keeps their subtree (tree
        reuse, as in matches); any other position (a new game, an undo, a changed komi, two
        moves of one colour) starts a fresh tree."""
        position = _as_to_play(game, color)
        if not self._follow(position):
            self._one = BatchedMCTS(1, game.size, game.komi, self._one_params)
            self._one.reset(0, np.random.default_rng([self.seed, game.move_number]), position)
        assert self._one is not None
        self._one_at = (position.history, position.to_play)
        self._one.search([0], self.evaluate, max_batch=self.max_batch)
        return int(self._one.decide([0], tau=0.0).move[0])

    def _follow(self, position: Game) -> bool:
        """Play the moves since the last searched position into the kept tree; False when
        there is no tree to keep."""
        search, (at, to_play), now = self._one, self._one_at, position.history
        if search is None or (search.N, search.komi) != (position.size, position.komi):
            return False
        if len(now) < len(at) or now[: len(at)] != at or search.is_over(0):
            return False
        since = now[len(at) :]
        for c, _ in since:
            if c != to_play:
                return False
            to_play = -c
        if to_play != position.to_play or search.move_number(0) != len(at):
            return False
        try:
            for _, move in since:
                search.play(0, move)
        except SearchError:
            return False
        return search.move_number(0) == position.move_number

    def analysis(self, game: Game, color: int) -> Analysis:
        """`tabula.analyze.Analyst`: a PUCT search of `game` that grows while a GUI watches,
        with scores and ownership when the network has those heads (`aux_of`)."""
        rng = np.random.default_rng([self.seed, game.move_number])
        position, aux = _as_to_play(game, color), aux_of(self.evaluate)
        return Analysis(position, self.params, self.evaluate, rng, self.max_batch, aux)

    def network_view(self, game: Game, color: int) -> tuple[np.ndarray, float]:
        """`tabula.analyze.NetworkView`."""
        rng = np.random.default_rng([self.seed, game.move_number])
        return _network_view(self.evaluate, game, color, rng)


def _network_view(
    evaluate: Evaluate, game: Game, color: int, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """The network's priors float[M+1] and value for `game` with `color` to move."""
    priors, values = evaluate(_as_to_play(game, color).features()[None], rng)
    return np.asarray(priors[0], dtype=np.float64), float(values[0])
