"""The self-play game loop: many games at once, one network batch per step (no I/O).

`play_games` keeps ``concurrent_games`` games in a `BatchedMCTS` and yields each finished game
as a `GameRecord`, then starts the next one in its slot. Per move (paper, Methods
"Self-play"): a search of ``simulations`` from the reused root with fresh Dirichlet noise;
pi = the root's visit distribution; the move is sampled from pi (tau = 1) for the first
``temperature_moves`` moves, then the most visited (tau -> 0). With the Gumbel search
(``search.algorithm: gumbel``), pi is its improved policy pi' and the move is the one its
Sequential Halving leaves standing, at every move (the Gumbel noise samples). That is
``selfplay.move_choice: search``; ``opening`` plays the policy target's mode after the
opening (tau -> 0 under Gumbel too), ``decay`` samples the policy target at KataGo's decaying
temperature (`move_temperature`); the search and its target are the same either way. With
reduced visits (``decided_threshold``), ``decided_weight`` keeps a decided game's positions as
rows at that weight (`GameRecord.weights`). The side to move resigns when its root value and
best child value are both below ``v_resign``, except in the ``resign_disabled_fraction`` of
games that play to the end to calibrate the threshold (`tabula.resign`). A game ends on
resignation, two passes in a row or 2 N^2 moves; z is the final result from each position's
side to move (+1 win, -1 loss, 0 jigo).

Randomness: game i draws everything (resign-disabled flag, noise, move sampling, dihedral
transforms) from its own generator, the i-th child spawned from the ``rng`` given. With an
evaluator that answers each position independently of the batch around it (a network in a
fixed precision, up to the kernels' batch-size effects), a game is the same whether it is
played alone or among others, with or without ``overlap``.

``overlap=True`` splits the slots into two halves and evaluates one half in a second thread
while the tree and rules kernels (numba, GIL released) work on the other, so the CPU is busy
during network calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from tabula.config import Config
from tabula.features import NUM_PLANES
from tabula.go.game import Game
from tabula.mcts import BatchedMCTS, Evaluate, Roots, SearchParams, evaluate_in_chunks
from tabula.mcts.gumbel import TINY
from tabula.resign import ResignTrace, resign_mask


@dataclass(frozen=True)
class SelfPlayParams:
    """Everything the loop needs (the config's rules, search and selfplay sections, resolved).

    temperature_moves: moves played at tau = 1; v_resign: None never resigns;
    batch_size: the most positions per network call; full_search_fraction, fast_simulations:
    playout-cap randomisation (Wu 2019): each move is a full search with that probability
    (drawn from the game's generator), else a search of ``fast_simulations`` whose pi is not
    a policy target (``GameRecord.full_search``). 1.0 (the default) draws nothing.
    quiet_fast_searches: fast searches draw no root noise and play their best move (KataGo).
    decided_threshold, decided_lookback: KataGo's reduced visits: a search is fast, whatever the
    draw, when the game's last ``decided_lookback`` root values all lie beyond the threshold in
    absolute value (None: never).
    improved_root_value: the recorded root value is sum_a pi'(a) completed Q(a) (Gumbel);
    visits_root_value: it is sum_a N(a) Q(a) / sum_a N(a), without the root's own value.
    move_choice: "search", "opening" or "decay" (`SelfPlayConfig.move_choice`);
    temperature: (early, late, halflife) of "decay" (`move_temperature`).
    decided_weight: the training weight of a decided game's row (reduced visits), recorded
    whatever the playout caps say; None: such a row is a fast search's like any other.
    surprise_weight: KataGo's policy surprise weighting, the share of a game's full rows'
    weight spread in proportion to their surprise (`surprise_weights`); 0: every row weighs 1.
    """

    board_size: int
    komi: float
    search: SearchParams
    temperature_moves: int
    v_resign: float | None
    resign_disabled_fraction: float
    concurrent_games: int
    batch_size: int
    full_search_fraction: float = 1.0
    fast_simulations: int = 1
    quiet_fast_searches: bool = False
    decided_threshold: float | None = None
    decided_lookback: int = 3
    improved_root_value: bool = False
    visits_root_value: bool = False
    move_choice: str = "search"
    temperature: tuple[float, float, float] = (0.75, 0.15, 19.0)
    decided_weight: float | None = None
    surprise_weight: float = 0.0

    @classmethod
    def from_config(cls, cfg: Config, v_resign: float | None | str = "config") -> SelfPlayParams:
        """From a config; ``v_resign`` overrides the configured threshold (a calibrated one)."""
        sp, N = cfg.selfplay, cfg.rules.board_size
        return cls(
            board_size=N,
            komi=cfg.rules.komi,
            search=SearchParams.from_config(cfg),
            temperature_moves=sp.temperature_moves_for(N),
            v_resign=sp.v_resign if v_resign == "config" else v_resign,  # type: ignore[arg-type]
            resign_disabled_fraction=sp.resign_disabled_fraction,
            concurrent_games=sp.concurrent_games,
            batch_size=sp.batch_size,
            full_search_fraction=sp.full_search_fraction,
            fast_simulations=sp.fast_simulations_for(cfg.search.simulations),
            quiet_fast_searches=sp.quiet_fast_searches,
            decided_threshold=sp.decided_threshold,
            decided_lookback=sp.decided_lookback,
            improved_root_value=sp.root_value == "improved",
            visits_root_value=sp.root_value == "visits",
            move_choice=sp.move_choice,
            temperature=(
                sp.move_temperature_early,
                sp.move_temperature_late,
                sp.move_temperature_halflife,
            ),
            decided_weight=sp.decided_row_weight,
            surprise_weight=sp.policy_surprise_weight,
        )


def move_temperature(
    move_number: np.ndarray, board_size: int, early: float, late: float, halflife: float
) -> np.ndarray:
    """float64[k]: the temperature of each move under KataGo's decaying schedule,
    late + (early - late) * 0.5 ** (t / halflife * 19 / N) at move t (0-based) on an N x N
    board: KataGo's Search::getChosenMoveLoc (cpp/search/search.cpp), with its self-play
    chosenMoveTemperatureEarly 0.75, chosenMoveTemperature 0.15 and
    chosenMoveTemperatureHalflife 19 (cpp/configs/training/selfplay1.cfg)."""
    halflives = np.asarray(move_number, dtype=np.float64) / halflife * 19.0 / board_size
    return late + (early - late) * np.power(0.5, halflives)


def policy_surprise(policy: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """float64[k]: KL(policy[i] || prior[i]) for each row (``policy``, ``prior``: float[k, M+1],
    e.g. pi' and the root's prior), over the moves the policy gives weight; a prior is floored
    as pi' floors it (`tabula.mcts.gumbel.TINY`), so that the surprise stays finite."""
    pi = np.asarray(policy, dtype=np.float64)
    q = np.maximum(np.asarray(prior, dtype=np.float64), TINY)
    safe = np.where(pi > 0, pi, 1.0)
    return np.where(pi > 0, pi * (np.log(safe) - np.log(q)), 0.0).sum(axis=1)


def surprise_weights(surprise: np.ndarray, share: float) -> np.ndarray:
    """float32[n]: the training weights of a game's n full-search rows under KataGo's policy
    surprise weighting: ``1 - share`` each, and ``share`` in proportion to each row's
    ``surprise`` over the game's mean, so that they add up to n as unweighted rows do (KataGo's
    docs/KataGoMethods.md, "Policy Surprise Weighting": 0.5 spread evenly, 0.5 by the
    KL-divergence from the prior to the policy target); every row 1 when none is surprising."""
    s = np.asarray(surprise, dtype=np.float64)
    mean = s.mean() if s.size else 0.0
    if not mean > 0.0:
        return np.ones(s.shape, dtype=np.float32)
    return ((1.0 - share) + share * s / mean).astype(np.float32)


def sample_policy(policy: np.ndarray, tau: float, rng: np.random.Generator) -> int:
    """A move drawn with probability proportional to policy(a) ** (1 / tau) over the moves
    with policy > 0 (``policy``: float[M+1], e.g. pi'); tau == 0: the mode (lowest index)."""
    if tau <= 0.0:
        return int(np.argmax(policy))
    moves = np.flatnonzero(policy > 0)
    logits = np.log(policy[moves].astype(np.float64)) / tau
    weights = np.exp(logits - logits.max())
    cumulative = np.cumsum(weights)
    k = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return int(moves[min(k, len(moves) - 1)])


@dataclass(frozen=True)
class GameRecord:
    """One finished self-play game. T = number of moves played (positions searched).

    moves: int16[T] flat moves (pass = M); to_play: int8[T] side to move before each move;
    pi: float32[T, M+1] the search's policy target (`tabula.mcts.Decisions`: N / sum N
    whatever tau chose, or the Gumbel search's pi');
    root_values / best_child_values: float32[T], from the side to move; winner: +1 black,
    -1 white, 0 jigo; score: Tromp-Taylor black - white - komi (None if resigned);
    resigned: 0, or the colour that resigned; resign_disabled: resignation was off;
    full_search: bool[T], the move had the full search, so pi is a policy target (playout caps);
    decided: bool[T], the move's search was fast because the game was decided (reduced visits);
    decided_weight: the training weight of those rows (None: they are fast searches' rows).
    surprise: float32[T], KL(pi || the network's prior at the root) of each search (None: not
    kept); surprise_weight: the share of the full rows' weight it spreads (`surprise_weights`).
    """

    index: int
    board_size: int
    komi: float
    moves: np.ndarray
    to_play: np.ndarray
    pi: np.ndarray
    root_values: np.ndarray
    best_child_values: np.ndarray
    winner: int
    score: float | None
    resigned: int
    resign_disabled: bool
    full_search: np.ndarray
    decided: np.ndarray | None = None
    decided_weight: float | None = None
    surprise: np.ndarray | None = None
    surprise_weight: float = 0.0

    @property
    def length(self) -> int:
        return int(self.moves.shape[0])

    @property
    def z(self) -> np.ndarray:
        """float32[T]: the game's result from the side to move at each position."""
        return (self.winner * self.to_play).astype(np.float32)

    def rows(self, record_fast: bool) -> np.ndarray:
        """bool[T]: the positions written as training rows: the full searches', a decided
        game's with a decided_weight, and every other one when ``record_fast``."""
        keep = np.ones(self.length, dtype=bool) if record_fast else self.full_search.copy()
        return keep | self.reduced()

    def reduced(self) -> np.ndarray:
        """bool[T]: the decided positions whose rows are kept at ``decided_weight``."""
        if self.decided is None or self.decided_weight is None:
            return np.zeros(self.length, dtype=bool)
        return self.decided.astype(bool)

    def policy_targets(self) -> np.ndarray:
        """bool[T]: pi is a policy target: a full search's, or a kept decided row's (KataGo
        trains the policy of its reduced searches, at their weight)."""
        return self.full_search | self.reduced()

    def weights(self) -> np.ndarray:
        """float32[T]: each position's training weight: ``decided_weight`` for a kept decided
        row (KataGo's reducedVisitsWeight), the full searches' rows weighted by their surprise
        with ``surprise_weight`` (`surprise_weights`), 1 otherwise."""
        weight = np.ones(self.length, dtype=np.float32)
        weight[self.reduced()] = np.float32(self.decided_weight or 1.0)
        if self.surprise_weight > 0.0 and self.surprise is not None:
            full = self.full_search & ~self.reduced()
            weight[full] = surprise_weights(self.surprise[full], self.surprise_weight)
        return weight

    def history(self) -> list[tuple[int, int]]:
        """(colour, move) pairs, as `tabula.sgf` and `Game.history` use them."""
        return [(int(c), int(m)) for c, m in zip(self.to_play, self.moves, strict=True)]

    def planes(self) -> np.ndarray:
        """uint8[T, 17, N, N]: the network input at each position (replayed with `Game`)."""
        return self.replay()[0]

    def replay(self) -> tuple[np.ndarray, np.ndarray]:
        """(``planes()``, the final position's area ownership int8[N*N], +1 black, -1 white)."""
        game = Game(self.board_size, self.komi)
        out = np.empty((self.length, NUM_PLANES, self.board_size, self.board_size), dtype=np.uint8)
        for t, move in enumerate(self.moves):
            out[t] = game.features()
            game.play(int(move))
        return out, game.ownership()

    @property
    def scored(self) -> bool:
        """Played out to the end (not resigned), so its ownership and score are targets."""
        return self.score is not None

    def resign_trace(self) -> ResignTrace:
        return ResignTrace.from_search(
            self.to_play, self.root_values, self.best_child_values, self.winner
        )


@dataclass
class SelfPlayStats:
    """Running counters (updated as games progress). reused / dropped: moves whose search
    tree was kept / too big to keep (`BatchedMCTS`)."""

    games: int = 0
    positions: int = 0
    simulations: int = 0
    evaluations: int = 0
    network_calls: int = 0
    resigned: int = 0
    resign_disabled: int = 0
    reused: int = 0
    dropped: int = 0


@dataclass
class _Slot:
    """A game in progress in one search slot."""

    index: int
    rng: np.random.Generator
    resign_disabled: bool
    moves: list[int] = field(default_factory=list)
    to_play: list[int] = field(default_factory=list)
    pi: list[np.ndarray] = field(default_factory=list)
    root_values: list[float] = field(default_factory=list)
    best_values: list[float] = field(default_factory=list)
    full_search: list[bool] = field(default_factory=list)
    decided: list[bool] = field(default_factory=list)
    surprise: list[float] = field(default_factory=list)
    searching_full: bool = True  # the search under way is a full one
    searching_decided: bool = False  # ... is fast because the game is decided


class _Loop:
    """The state of one `play_games` call: the searches, the slots and the game queue."""

    def __init__(self, evaluate: Evaluate, params: SelfPlayParams, n_games: int,
                 rng: np.random.Generator, stats: SelfPlayStats) -> None:  # fmt: skip
        self.evaluate, self.params, self.stats = evaluate, params, stats
        G = max(1, min(params.concurrent_games, n_games))
        self.mcts = BatchedMCTS(G, params.board_size, params.komi, params.search)
        self.rng, self.n_games, self.next_game = rng, n_games, 0
        self.slots: list[_Slot | None] = [None] * G
        for s in range(G):
            self._start_game(s)

    def _start_game(self, s: int) -> None:
        if self.next_game >= self.n_games:
            self.slots[s] = None
            return
        i = self.next_game
        self.next_game += 1
        rng = self.rng.spawn(1)[0]  # the i-th child, as rng.spawn(n_games)[i] would give
        disabled = bool(rng.random() < self.params.resign_disabled_fraction)
        self.slots[s] = _Slot(i, rng, disabled)
        self.mcts.reset(s, rng)
        self._start_searches(np.array([s], dtype=np.int64))

    def _start_searches(self, slots: np.ndarray, values: np.ndarray | None = None) -> None:
        """Start each slot's next search: full, or fast with playout caps or in a decided game
        (`SelfPlayParams`). values: the root value each slot's last search found, not yet in
        its game's record (None: a new game)."""
        p = self.params
        if p.full_search_fraction >= 1.0 and p.decided_threshold is None:
            self.mcts.start(slots)
            return
        full = np.array([self._draw_full(self._game(s)) for s in slots], dtype=bool)
        decided = np.zeros(len(slots), dtype=bool)
        if p.decided_threshold is not None and values is not None:
            pairs = zip(slots, values, strict=True)
            decided = np.array([self._decided(self._game(s), v) for s, v in pairs], dtype=bool)
            full &= ~decided
        for s, f, d in zip(slots, full, decided, strict=True):
            self._game(s).searching_full, self._game(s).searching_decided = bool(f), bool(d)
        self.mcts.start(slots[full])
        self.mcts.start(slots[~full], p.fast_simulations, quiet=p.quiet_fast_searches)

    def _draw_full(self, game: _Slot) -> bool:
        """Playout caps: a full search with probability full_search_fraction (no draw at 1)."""
        fraction = self.params.full_search_fraction
        return fraction >= 1.0 or bool(game.rng.random() < fraction)

    def _decided(self, game: _Slot, latest: float) -> bool:
        """The game's last decided_lookback root values, ``latest`` the last of them, all lie
        beyond decided_threshold for the same side (KataGo's reduced visits). The values are
        from the side to move, which changes every move, so one side stays ahead when their
        signs alternate; a swing, each side in turn sure it wins, is not decided."""
        p = self.params
        assert p.decided_threshold is not None
        earlier = p.decided_lookback - 1
        recent = [*game.root_values[max(0, len(game.root_values) - earlier) :], latest]
        return (
            len(recent) == p.decided_lookback
            and min(map(abs, recent)) > p.decided_threshold
            and all(a * b < 0 for a, b in pairwise(recent))
        )

    def live(self, slots: np.ndarray) -> np.ndarray:
        return np.array([s for s in slots if self.slots[s] is not None], dtype=np.int64)

    def evaluate_batch(self, planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.stats.network_calls += -(-planes.shape[0] // self.params.batch_size)
        return evaluate_in_chunks(self.evaluate, planes, self.params.batch_size)

    def after_search(self, slots: np.ndarray) -> Iterator[GameRecord]:
        """Play a move in every slot whose search is complete; yield the games that end.

        The per-move work runs in a few batched calls over all those slots (root statistics,
        resignation, move choice, playing, the next searches' start); only the bookkeeping
        of each game's record is per slot."""
        mcts = self.mcts
        done = np.setdiff1d(slots, mcts.unfinished(slots))
        if len(done):
            yield from self._moves(done)
        self.stats.simulations, self.stats.evaluations = mcts.simulations, mcts.evaluations
        self.stats.reused, self.stats.dropped = mcts.reused, mcts.dropped

    def _moves(self, done: np.ndarray) -> Iterator[GameRecord]:
        """Resign or move in each slot of ``done`` (finished searches), slot order."""
        mcts, p = self.mcts, self.params
        roots = mcts.roots(done)
        disabled = np.array([self._game(s).resign_disabled for s in done], dtype=bool)
        resigns = resign_mask(roots.value, roots.best_value, p.v_resign, disabled)
        colors = mcts.games(done).to_play.astype(np.int64)
        moving = ~resigns
        movers = done[moving]
        move = np.full(len(done), -1, dtype=np.int64)  # per slot of done; -1: resigned
        pi = np.zeros((len(done), p.board_size**2 + 1), dtype=np.float32)
        surprise = np.zeros(len(done), dtype=np.float64)
        if len(movers):
            move[moving], pi[moving] = self._decide(movers, roots.visits[moving])
            if p.surprise_weight > 0.0:
                surprise[moving] = policy_surprise(pi[moving], mcts.root_priors(movers))
        root_value = self._root_values(movers, moving, roots, pi)  # before the roots move on
        mcts.play_many(movers, move[moving])
        ended = moving & mcts.games(done).over
        searched = [(self._game(s).searching_full, self._game(s).searching_decided) for s in done]
        self._start_searches(done[moving & ~ended], root_value[moving & ~ended])
        for i, s in enumerate(done.tolist()):
            game, color = self._game(s), int(colors[i])
            if resigns[i]:
                record = self._finish(s, winner=-color, score=None, resigned=color)
            else:
                game.moves.append(int(move[i]))
                game.to_play.append(color)
                game.pi.append(pi[i])
                game.root_values.append(float(root_value[i]))
                game.best_values.append(float(roots.best_value[i]))
                game.full_search.append(searched[i][0])
                game.decided.append(searched[i][1])
                game.surprise.append(float(surprise[i]))
                self.stats.positions += 1
                if not ended[i]:
                    continue
                score = mcts.score(s)
                record = self._finish(s, winner=int(np.sign(score)), score=score, resigned=0)
            self._start_game(s)
            yield record

    def _decide(self, movers: np.ndarray, visits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The moves to play in ``movers`` and their policy targets (``selfplay.move_choice``).
        A quiet fast search plays its best move (KataGo's cheap searches)."""
        p = self.params
        move_number = self.mcts.games(movers).move_number.astype(np.int64)
        quiet = np.zeros(len(movers), dtype=bool)
        if p.quiet_fast_searches:
            quiet = np.array([not self._game(s).searching_full for s in movers], dtype=bool)
        opening = move_number < p.temperature_moves
        if p.move_choice == "decay":
            tau = move_temperature(move_number, p.board_size, *p.temperature)
        else:
            tau = np.where(opening, 1.0, 0.0)
        tau[quiet] = 0.0
        decided = self.mcts.decide(movers, tau, visits)
        if not p.search.gumbel or p.move_choice == "search":
            return decided.move, decided.policy
        # Gumbel: Sequential Halving's survivor is a sample; where the schedule says otherwise
        # the move is drawn from pi' itself (its considered moves were still Gumbel-sampled).
        keep = quiet | (opening if p.move_choice == "opening" else False)
        move = decided.move.copy()
        for k in np.flatnonzero(~keep):
            move[k] = sample_policy(decided.policy[k], float(tau[k]), self._game(movers[k]).rng)
        return move, decided.policy

    def _root_values(
        self, movers: np.ndarray, moving: np.ndarray, roots: Roots, pi: np.ndarray
    ) -> np.ndarray:
        """The root value each row records (``selfplay.root_value``), per slot of the search."""
        p, value = self.params, roots.value
        if not len(movers) or not (p.improved_root_value or p.visits_root_value):
            return value
        value = value.copy()
        if p.improved_root_value:
            value[moving] = self.mcts.improved_values(movers, pi[moving])
        else:
            value[moving] = self.mcts.visit_values(movers, roots.visits[moving])
        return value

    def _game(self, s: int) -> _Slot:
        game = self.slots[s]
        assert game is not None
        return game

    def _finish(self, s: int, winner: int, score: float | None, resigned: int) -> GameRecord:
        game, p = self.slots[s], self.params
        assert game is not None
        M = p.board_size**2
        self.stats.games += 1
        self.stats.resigned += resigned != 0
        self.stats.resign_disabled += game.resign_disabled
        return GameRecord(
            index=game.index,
            board_size=p.board_size,
            komi=p.komi,
            moves=np.asarray(game.moves, dtype=np.int16),
            to_play=np.asarray(game.to_play, dtype=np.int8),
            pi=np.asarray(game.pi, dtype=np.float32).reshape(-1, M + 1),
            root_values=np.asarray(game.root_values, dtype=np.float32),
            best_child_values=np.asarray(game.best_values, dtype=np.float32),
            winner=winner,
            score=score,
            resigned=resigned,
            resign_disabled=game.resign_disabled,
            full_search=np.asarray(game.full_search, dtype=bool),
            decided=np.asarray(game.decided, dtype=bool),
            decided_weight=p.decided_weight,
            surprise=np.asarray(game.surprise, dtype=np.float32),
            surprise_weight=p.surprise_weight,
        )


def play_games(
    evaluate: Evaluate,
    params: SelfPlayParams,
    n_games: int,
    rng: np.random.Generator,
    *,
    overlap: bool = False,
    stats: SelfPlayStats | None = None,
) -> Iterator[GameRecord]:
    """Play ``n_games`` self-play games; yield each as it finishes (see the module docstring).

    evaluate: ``(planes, rng) -> (priors, values)``, called with ``rng=None``. stats: filled
    in as the games progress (pass one to watch throughput).
    """
    if n_games < 1:
        return
    loop = _Loop(evaluate, params, n_games, rng, stats if stats is not None else SelfPlayStats())
    G = loop.mcts.n_games
    if not overlap or G < 2:
        yield from _run_halves(loop, [np.arange(G)], None)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tabula-eval") as pool:
        yield from _run_halves(loop, [np.arange(0, G, 2), np.arange(1, G, 2)], pool)


def _run_halves(
    loop: _Loop, groups: list[np.ndarray], pool: ThreadPoolExecutor | None
) -> Iterator[GameRecord]:
    """Round-robin over slot groups: while one group's batch is in the network (in ``pool``,
    if given), the next group's backup, moves and selection run here."""
    mcts, L = loop.mcts, loop.params.search.config.leaves_per_game
    leaves = [mcts.new_leaves(len(g) * L) for g in groups]
    pending: list[tuple[int, Future | tuple[np.ndarray, np.ndarray] | None]] = [
        (0, None) for _ in groups
    ]
    while any(len(loop.live(g)) for g in groups):
        for k, group in enumerate(groups):
            n, job = pending[k]
            if job is not None:
                priors, values = job.result() if isinstance(job, Future) else job
                mcts.backup(leaves[k], n, priors, values)
            yield from loop.after_search(loop.live(group))
            live = mcts.unfinished(loop.live(group))
            n = mcts.gather(live, leaves[k]) if len(live) else 0
            planes = leaves[k].planes[:n]
            if not n:
                job = None
            elif pool is None:
                job = loop.evaluate_batch(planes)
            else:
                job = pool.submit(loop.evaluate_batch, planes)
            pending[k] = (n, job)
