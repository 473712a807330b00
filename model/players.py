"""Network players: the raw network and network + MCTS, for the arena and the GTP server.

Both implement `tabula.gtp.Player` (``genmove(game, color)``, one game) and
`tabula.arena.ArenaPlayer` (batched, per-slot games). `network_player` builds one from a
checkpoint; `tasks.players.make_player` turns a player spec ("raw:PATH", "mcts:PATH@SIMS")
into that call. Neither player resigns.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tabula.arena import Failure, MoveRequest
from tabula.config import Config
from tabula.go.game import Game
from tabula.mcts import BatchedMCTS, Evaluate, SearchError, SearchParams
from tabula.mcts.analysis import Analysis


def network_player(
    kind: str, checkpoint: Path, cfg: Config, simulations: int, seed: int
) -> RawNetworkPlayer | MctsPlayer:
    """A raw ("raw") or searching ("mcts") player for a checkpoint of cfg's board size.

    Its name is the checkpoint's model_id (else the file's stem), with ":raw" for the raw
    network and "@SIMS" when simulations differ from evaluation.simulations.
    """
    from model.evaluator import Evaluator  # torch is imported only when a network plays
    from model.network import load_checkpoint

    net, metadata = load_checkpoint(checkpoint, expect_board_size=cfg.rules.board_size)
    stem = str(metadata.get("model_id") or checkpoint.stem)
    evaluator = Evaluator(net)
    if kind == "raw":
        return RawNetworkPlayer(evaluator, f"{stem}:raw", seed)
    name = stem if simulations == cfg.evaluation.simulations else f"{stem}@{simulations}"
    return MctsPlayer(evaluator, cfg, simulations, name, seed)


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
        self, evaluate: Evaluate, cfg: Config, simulations: int, name: str, seed: int = 0
    ) -> None:
        self.evaluate, self.name, self.seed = evaluate, name, seed
        self.max_concurrent: int | None = None
        self.params = SearchParams.from_config(cfg, simulations=simulations, noise=False)
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
        """`tabula.gtp.Player`: a fresh one-game search from `game` (no tree reuse)."""
        search = BatchedMCTS(1, game.size, game.komi, self.params)  # GTP may change komi
        rng = np.random.default_rng([self.seed, game.move_number])
        search.reset(0, rng, _as_to_play(game, color))
        search.search([0], self.evaluate, max_batch=self.max_batch)
        return int(search.decide([0], tau=0.0).move[0])

    def analysis(self, game: Game, color: int) -> Analysis:
        """`tabula.analyze.Analyst`: a PUCT search of `game` that grows while a GUI watches."""
        rng = np.random.default_rng([self.seed, game.move_number])
        return Analysis(_as_to_play(game, color), self.params, self.evaluate, rng, self.max_batch)

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
