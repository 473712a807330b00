"""Player specs -> player objects, for the arena, gating and the `tabula gtp` server.

One spec string names a player everywhere (CLI, config, pipeline)::

    random                 uniform among legal moves, never filling its own single-point eyes
                           (`tabula.gtp.RandomPlayer`)
    raw:PATH               the raw network: argmax of p over legal moves, no search (the
                           paper's "raw network" player)
    mcts:PATH[@SIMS]       network + MCTS, tau -> 0, no Dirichlet noise; SIMS simulations per
                           move (default: `simulations` argument, else evaluation.simulations)
    PATH[@SIMS]            a bare checkpoint path: the same as mcts:PATH[@SIMS]
    gtp:COMMAND LINE       any GTP engine as a subprocess, e.g. "gtp:gnugo --mode gtp --level 1";
                           gnugo and pachi are found in /usr/games when not on PATH
    models:/NAME@ALIAS     a registered model (e.g. models:/tabula-9x9@best), resolved to a
                           checkpoint by the pipeline's `resolver`; allowed after raw: and mcts:

PATH is a checkpoint written by `model.network.save_checkpoint`, for the configured board size.

GnuGo under our rules: "gnugo --mode gtp --level 1 --chinese-rules --positional-superko
--capture-all-dead". Without --capture-all-dead it passes with the opponent's dead stones still
on the board, which Tromp-Taylor scoring counts for their owner (it then loses won games).

Every player has a `name` for the results store and the SGF records: "random"; for GTP engines
the program name plus its level ("gnugo-l1"); for checkpoints the metadata's model_id or the
file's stem, with ":raw" for the raw network and "@SIMS" when the simulations differ from
evaluation.simulations. Every player implements both `tabula.gtp.Player` (``genmove(game,
color)``, for the GTP server) and `tabula.arena.ArenaPlayer` (batched, per-slot games).

Bad specs raise PlayerSpecError (a ValueError: the CLI prints one line and exits 2).
"""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tabula.arena import Failure, MoveRequest, SequentialPlayer
from tabula.config import Config
from tabula.go import coords
from tabula.go.game import Game
from tabula.gtp import RESIGN, RandomPlayer
from tabula.mcts import BatchedMCTS, Evaluate, SearchError, SearchParams

Resolver = Callable[[str], str | os.PathLike[str]]
"""Maps "models:/NAME@ALIAS" to a local checkpoint path (the pipeline passes one)."""

GAME_DIRS = ("/usr/games", "/usr/local/games")  # Debian installs gnugo and pachi here
GTP_CONCURRENCY = 4  # engine processes per GTP player (one per game in progress)
_SIMS = re.compile(r"^(?P<path>.+)@(?P<sims>[0-9]+)$")


class PlayerSpecError(ValueError):
    """A player spec that cannot be turned into a player; the message is one line."""


def make_player(
    spec: str,
    cfg: Config,
    simulations: int | None = None,
    seed: int = 0,
    resolver: Resolver | None = None,
) -> Any:
    """The player named by `spec` (grammar in the module docstring) for cfg's board and komi.

    simulations: MCTS simulations when the spec gives none (``@SIMS`` in the spec wins);
    None means cfg.evaluation.simulations. seed: the player's randomness (random moves, the
    evaluator's dihedral transforms, MCTS tie breaks). resolver: turns models:/ URIs into
    checkpoint paths. Raises PlayerSpecError (and the checkpoint loader's CheckpointError).
    """
    spec = spec.strip()
    if not spec:
        raise PlayerSpecError("empty player spec (use random, raw:PATH, mcts:PATH, gtp:COMMAND)")
    if spec == "random":
        return SequentialPlayer(RandomPlayer(seed), name="random")
    if spec.startswith("gtp:"):
        return GtpPlayer.from_command(spec[4:], cfg)
    kind, rest = "mcts", spec
    for prefix in ("raw:", "mcts:"):
        if spec.startswith(prefix):
            kind, rest = prefix[:-1], spec[len(prefix) :]
    path, sims = _split_simulations(spec, rest, kind)
    checkpoint = _checkpoint_path(spec, path, resolver)
    default_sims = simulations if simulations is not None else cfg.evaluation.simulations
    return network_player(kind, checkpoint, cfg, sims or default_sims, seed)


def _split_simulations(spec: str, rest: str, kind: str) -> tuple[str, int | None]:
    match = _SIMS.match(rest)
    if match is None or (rest.startswith("models:/") and rest.count("@") < 2):
        return rest, None  # models:/NAME@ALIAS has one "@" of its own
    if kind == "raw":
        raise PlayerSpecError(f"player spec {spec!r}: the raw network has no simulations (@N)")
    sims = int(match["sims"])
    if sims < 1:
        raise PlayerSpecError(f"player spec {spec!r}: simulations must be >= 1")
    return match["path"], sims


def _checkpoint_path(spec: str, path: str, resolver: Resolver | None) -> Path:
    if path.startswith("models:/"):
        if resolver is None:
            raise PlayerSpecError(
                f"player spec {spec!r}: registry models need the pipeline's resolver "
                "(pass a checkpoint path instead)"
            )
        path = os.fspath(resolver(path))
    checkpoint = Path(path).expanduser()
    if not checkpoint.is_file():
        raise PlayerSpecError(
            f"player spec {spec!r}: no checkpoint file {str(checkpoint)!r} "
            "(use random, raw:PATH, mcts:PATH[@SIMS], gtp:COMMAND or models:/NAME@ALIAS)"
        )
    return checkpoint


def resolve_command(command: str) -> list[str]:
    """argv for a GTP command line; the program is looked up on PATH, then in /usr/games."""
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise PlayerSpecError(f"player spec 'gtp:{command}': {error}") from None
    if not argv:
        raise PlayerSpecError("player spec 'gtp:': give the engine's command line after gtp:")
    program = shutil.which(argv[0])
    if program is None and os.sep not in argv[0]:
        found = (shutil.which(argv[0], path=d) for d in GAME_DIRS)
        program = next((p for p in found if p is not None), None)
    if program is None:
        raise PlayerSpecError(
            f"player spec 'gtp:{command}': program {argv[0]!r} not found on PATH or in /usr/games"
        )
    return [program, *argv[1:]]


def engine_name(argv: Sequence[str]) -> str:
    """Store name of a GTP engine: program stem plus "-l<level>" ("gnugo-l1").

    For an interpreter running a script ("python engine.py") the script's stem is used.
    """
    stem = Path(argv[0]).stem
    rest = list(argv[1:])
    if re.fullmatch(r"python[0-9.]*", stem) and rest and not rest[0].startswith("-"):
        stem, rest = Path(rest[0]).stem, rest[1:]
    for i, arg in enumerate(rest):
        if arg.startswith("--level="):
            return f"{stem}-l{arg.split('=', 1)[1]}"
        if arg == "--level" and i + 1 < len(rest):
            return f"{stem}-l{rest[i + 1]}"
    return stem


class EngineFailure(RuntimeError):
    """A GTP engine crashed, timed out or answered garbage; the message is the reason."""


class GtpProcess:
    """One GTP engine subprocess: `send` a command, read its response within a deadline.

    The engine runs in its own process group so that `close` also ends anything it started.
    Its stderr goes to a temporary file whose last line explains a crash.
    """

    MAX_RESPONSE = 1 << 20  # bytes; a longer answer is garbage

    def __init__(self, argv: Sequence[str], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._stderr = tempfile.TemporaryFile()
        self._buffer = b""
        try:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                start_new_session=True,
            )
        except OSError as error:
            self._stderr.close()
            raise EngineFailure(f"cannot start {argv[0]}: {error.strerror}") from None

    def send(self, command: str) -> tuple[bool, str]:
        """(success, text) of the engine's response to `command`; EngineFailure otherwise."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError):
            raise self._crashed() from None
        raw = self._read_response(command)
        text = raw.decode("utf-8", errors="replace").replace("\r", "").strip("\n")
        if text[:1] not in ("=", "?"):
            raise EngineFailure(f"garbage answer to {command.split()[0]}: {text[:60]!r}")
        body = re.sub(r"^[=?][0-9]*", "", text, count=1).strip()
        return text[0] == "=", body

    def _read_response(self, command: str) -> bytes:
        """Bytes up to the blank line that ends a GTP response (leading blank lines skipped)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._buffer = self._buffer.lstrip(b"\r\n")
            end = self._buffer.replace(b"\r", b"").find(b"\n\n")
            if end >= 0:
                clean = self._buffer.replace(b"\r", b"")
                self._buffer = clean[end + 2 :]
                return clean[:end]
            if len(self._buffer) > self.MAX_RESPONSE:
                raise EngineFailure(f"garbage answer to {command.split()[0]}: too long")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close(kill=True)
                name = command.split()[0]
                raise EngineFailure(f"timeout: no answer to {name} within {self.timeout_s:g} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise self._crashed()
            self._buffer += chunk

    def _crashed(self) -> EngineFailure:
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        self._stderr.seek(0)
        lines = self._stderr.read()[-2000:].decode("utf-8", errors="replace").splitlines()
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
        self.close()
        detail = f"exit code {code}" if code is not None else "closed its output"
        return EngineFailure(f"engine crashed ({detail})" + (f": {last[:80]}" if last else ""))

    def close(self, kill: bool = False) -> None:
        """Ask the engine to quit (unless `kill`); then kill its process group if still there."""
        if self.proc.poll() is None and not kill:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=1.0)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # our child's own group (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self._stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


class GtpPlayer:
    """A GTP engine as a player: one subprocess per game in progress (per arena slot).

    Each game starts with ``boardsize``, ``komi``, ``clear_board``; the opponent's moves are
    relayed with ``play``; ``genmove`` answers are parsed, and the arena checks them against
    our rules. A crash, a timeout (``timeout_s`` per command) or a garbage answer forfeits that
    game and kills the process; the slot's next game starts a fresh one. An engine that
    refuses a move legal by our rules aborts the game (a rules disagreement, nobody's fault).
    """

    def __init__(
        self,
        argv: Sequence[str],
        size: int,
        komi: float,
        timeout_s: float,
        name: str | None = None,
        max_concurrent: int = GTP_CONCURRENCY,
    ) -> None:
        self.argv = list(argv)
        self.name = name or engine_name(self.argv)
        self.size, self.komi, self.timeout_s = size, komi, timeout_s
        self.max_concurrent: int | None = max_concurrent
        self._procs: dict[int, GtpProcess] = {}
        self._colors: dict[int, int] = {}

    @classmethod
    def from_command(cls, command: str, cfg: Config) -> GtpPlayer:
        return cls(
            resolve_command(command),
            cfg.rules.board_size,
            cfg.rules.komi,
            cfg.evaluation.match_timeout_s,
        )

    # -- arena protocol ------------------------------------------------------------------

    def start_game(self, slot: int, game: Game, color: int) -> Failure | None:
        self._colors[slot] = color
        try:
            proc = self._procs.get(slot)
            if proc is None:
                proc = self._procs[slot] = GtpProcess(self.argv, self.timeout_s)
            for command in (f"boardsize {game.size}", f"komi {game.komi:g}", "clear_board"):
                ok, text = proc.send(command)
                if not ok:
                    return Failure("abort", f"engine refused '{command}': {text}")
            for color_played, move in game.history:  # normally none: games start empty
                ok, text = proc.send(f"play {_colour(color_played)} {_vertex(move, game.size)}")
                if not ok:
                    return Failure("abort", f"engine refused setup move: {text}")
        except EngineFailure as failure:
            self._discard(slot)
            return Failure("forfeit", f"engine failed to start: {failure}")
        return None

    def genmoves(self, requests: Sequence[MoveRequest]) -> list[int | Failure]:
        return [self._genmove_slot(r.slot, r.color) for r in requests]

    def observe(self, slot: int, color: int, move: int) -> Failure | None:
        proc = self._procs.get(slot)
        if proc is None or color == self._colors.get(slot):
            return None  # its own move: the engine played it when it answered genmove
        vertex = _vertex(move, self.size)
        try:
            ok, text = proc.send(f"play {_colour(color)} {vertex}")
        except EngineFailure as failure:
            self._discard(slot)
            return Failure("forfeit", str(failure))
        if not ok:
            return Failure("abort", f"engine refused legal move {vertex}: {text}")
        return None

    def end_game(self, slot: int) -> None:
        self._colors.pop(slot, None)  # the process stays for the slot's next game

    def close(self) -> None:
        """Quit every engine process (killed if it does not exit)."""
        for slot in list(self._procs):
            self._discard(slot)

    # -- one game ------------------------------------------------------------------------

    def _genmove_slot(self, slot: int, color: int) -> int | Failure:
        proc = self._procs.get(slot)
        if proc is None:
            return Failure("forfeit", "engine is not running")
        try:
            ok, text = proc.send(f"genmove {_colour(color)}")
        except EngineFailure as failure:
            self._discard(slot)
            return Failure("forfeit", str(failure))
        if not ok:
            return Failure("forfeit", f"genmove failed: {text}")
        answer = text.strip().lower()
        if answer == "resign":
            return RESIGN
        try:
            return coords.from_gtp(answer, self.size)
        except ValueError:
            pass
        if re.fullmatch(r"[a-hj-z][0-9]{1,2}", answer):  # a vertex, but off this board
            return Failure("forfeit", f"illegal move {answer.upper()}")
        self._discard(slot)  # its state is unknown now
        return Failure("forfeit", f"garbage answer to genmove: {text[:60]!r}")

    def _discard(self, slot: int) -> None:
        proc = self._procs.pop(slot, None)
        if proc is not None:
            proc.close()

    def genmove(self, game: Game, color: int) -> int:
        """`tabula.gtp.Player`: replay `game` into a dedicated engine, then ask it."""
        failure = self.start_game(-1, game, color)
        answer = failure if failure is not None else self._genmove_slot(-1, color)
        if isinstance(answer, Failure):
            raise EngineFailure(f"{self.name}: {answer.reason}")
        return answer


def _colour(color: int) -> str:
    return "b" if color == 1 else "w"


def _vertex(move: int, size: int) -> str:
    return coords.to_gtp(move, size)


# -- network players ---------------------------------------------------------------------


def network_player(
    kind: str, checkpoint: Path, cfg: Config, simulations: int, seed: int
) -> RawNetworkPlayer | MctsPlayer:
    """A raw ("raw") or searching ("mcts") player for a checkpoint of cfg's board size."""
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


class MctsPlayer:
    """Network + MCTS as in the paper's evaluation: tau -> 0, no Dirichlet noise.

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
        return [search.choose_move(slot, tau=0.0) for slot in slots]

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
        return search.choose_move(0, tau=0.0)
