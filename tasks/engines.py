"""GTP engines as players: a subprocess per game, spoken to over GTP with a per-command deadline.

`GtpPlayer` implements both `tabula.gtp.Player` and `tabula.arena.ArenaPlayer`;
`tasks.players.make_player` builds one from a ``gtp:COMMAND LINE`` spec (grammar and program
lookup there). `tabula.ladder.engine_name` gives an engine's name in the results store ("gnugo-l1").

A crash, a timeout or a garbage answer is an `EngineFailure`; the arena counts it as a forfeit.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence

from tabula.arena import Failure, FailureKind, MoveRequest
from tabula.go import coords
from tabula.go.coords import RESIGN
from tabula.go.game import Game
from tabula.ladder import engine_name

# Engine processes per GTP player (one per game in progress). GnuGo's are small, and more games
# at once give our side bigger network batches: 20 games against GnuGo level 1 cost our MCTS
# player 19-20 CPU-s at 10, 25 at 4 (quick-start network, 64 simulations).
GTP_CONCURRENCY = 10


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
        self._deadline = 0.0  # of the command `ask` sent last
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
        self.ask(command)
        return self.answer(command)

    def ask(self, command: str) -> None:
        """Send `command` without waiting: its deadline starts now, and `answer` reads the
        response, so that several engines can think at once. EngineFailure if it crashed."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError):
            raise self._crashed() from None
        self._deadline = time.monotonic() + self.timeout_s

    def answer(self, command: str) -> tuple[bool, str]:
        """(success, text) of the response to `command`, sent with `ask`, within the
        deadline `ask` set; EngineFailure otherwise."""
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
        while True:
            self._buffer = self._buffer.lstrip(b"\r\n")
            end = self._buffer.replace(b"\r", b"").find(b"\n\n")
            if end >= 0:
                clean = self._buffer.replace(b"\r", b"")
                self._buffer = clean[end + 2 :]
                return clean[:end]
            if len(self._buffer) > self.MAX_RESPONSE:
                raise EngineFailure(f"garbage answer to {command.split()[0]}: too long")
            # An answer already in the pipe counts, even once the deadline has passed (read
            # after another engine's): the deadline runs from `ask`, not from this read.
            left = max(self._deadline - time.monotonic(), 0.0)
            if not select.select([fd], [], [], left)[0]:
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

    Each game starts with ``boardsize``, ``komi``, ``clear_board`` and ``play`` for each move of
    its opening (`tabula.openings`), if any; the opponent's moves are
    relayed with ``play``; ``genmove`` answers are parsed, and the arena checks them against
    our rules. A crash, a timeout (``timeout_s`` per command) or a garbage answer forfeits that
    game and kills the process; the slot's next game starts a fresh one. An engine that
    refuses a move legal by our rules aborts the game (a rules disagreement, nobody's fault).

    An engine that knows ``set_random_seed`` (GnuGo) gets ``seed + k`` before the k-th game it
    starts: GnuGo otherwise seeds itself from the clock, and the same match, replayed, would
    not give the same games.
    """

    def __init__(
        self,
        argv: Sequence[str],
        size: int,
        komi: float,
        timeout_s: float,
        name: str | None = None,
        max_concurrent: int = GTP_CONCURRENCY,
        seed: int = 0,
    ) -> None:
        self.argv = list(argv)
        self.name = name or engine_name(self.argv)
        self.size, self.komi, self.timeout_s = size, komi, timeout_s
        self.max_concurrent: int | None = max_concurrent
        self.seed = seed
        self._games = 0  # started so far: the arena starts them in the order of their index
        self._procs: dict[int, GtpProcess] = {}
        self._seedable: dict[int, bool] = {}
        self._colors: dict[int, int] = {}

    # -- arena protocol ------------------------------------------------------------------

    def start_game(self, slot: int, game: Game, color: int) -> Failure | None:
        self._colors[slot] = color
        try:
            proc = self._procs.get(slot)
            if proc is None:
                proc = self._procs[slot] = GtpProcess(self.argv, self.timeout_s)
                ok, text = proc.send("known_command set_random_seed")
                self._seedable[slot] = ok and text.strip() == "true"
            setup = [f"boardsize {game.size}", f"komi {game.komi:g}", "clear_board"]
            if self._seedable[slot]:
                setup.append(f"set_random_seed {(self.seed + self._games) % 2**31}")
            self._games += 1
            for command in setup:
                ok, text = proc.send(command)
                if not ok:
                    return Failure(FailureKind.ABORT, f"engine refused '{command}': {text}")
            for color_played, move in game.history:  # the opening the game starts from
                ok, text = proc.send(f"play {_colour(color_played)} {_vertex(move, game.size)}")
                if not ok:
                    return Failure(FailureKind.ABORT, f"engine refused setup move: {text}")
        except EngineFailure as failure:
            self._discard(slot)
            return Failure(FailureKind.FORFEIT, f"engine failed to start: {failure}")
        return None

    def genmoves(self, requests: Sequence[MoveRequest]) -> list[int | Failure]:
        """Every slot's engine gets its ``genmove`` before any answer is read, so the engines
        think at once, on as many cores as there are (GnuGo is single-threaded)."""
        asked = [self._ask(r.slot, f"genmove {_colour(r.color)}") for r in requests]
        return [
            failure if failure is not None else self._genmove_answer(r.slot)
            for r, failure in zip(requests, asked, strict=True)
        ]

    def observe(self, slot: int, color: int, move: int) -> Failure | None:
        proc = self._procs.get(slot)
        if proc is None or color == self._colors.get(slot):
            return None  # its own move: the engine played it when it answered genmove
        vertex = _vertex(move, self.size)
        answer = self._send(slot, proc, f"play {_colour(color)} {vertex}")
        if isinstance(answer, Failure):
            return answer
        ok, text = answer
        if not ok:
            return Failure(FailureKind.ABORT, f"engine refused legal move {vertex}: {text}")
        return None

    def end_game(self, slot: int) -> None:
        self._colors.pop(slot, None)  # the process stays for the slot's next game

    def close(self) -> None:
        """Quit every engine process (killed if it does not exit)."""
        for slot in list(self._procs):
            self._discard(slot)

    # -- one game ------------------------------------------------------------------------

    def _send(self, slot: int, proc: GtpProcess, command: str) -> tuple[bool, str] | Failure:
        """``proc.send(command)``, or the forfeit of an engine that crashed or timed out."""
        try:
            return proc.send(command)
        except EngineFailure as failure:
            return self._forfeit(slot, failure)

    def _ask(self, slot: int, command: str) -> Failure | None:
        """``ask`` the slot's engine ``command``; a forfeit if it is not running or crashed."""
        proc = self._procs.get(slot)
        if proc is None:
            return Failure(FailureKind.FORFEIT, "engine is not running")
        try:
            proc.ask(command)
        except EngineFailure as failure:
            return self._forfeit(slot, failure)
        return None

    def _genmove_answer(self, slot: int) -> int | Failure:
        """The move the slot's engine answers to the ``genmove`` that `_ask` sent it."""
        try:
            ok, text = self._procs[slot].answer("genmove")
        except EngineFailure as failure:
            return self._forfeit(slot, failure)
        if not ok:
            return Failure(FailureKind.FORFEIT, f"genmove failed: {text}")
        answer = text.strip().lower()
        if answer == "resign":
            return RESIGN
        try:
            return coords.from_gtp(answer, self.size)
        except ValueError:
            pass
        if re.fullmatch(r"[a-hj-z][0-9]{1,2}", answer):  # a vertex, but off this board
            return Failure(FailureKind.FORFEIT, f"illegal move {answer.upper()}")
        self._discard(slot)  # its state is unknown now
        return Failure(FailureKind.FORFEIT, f"garbage answer to genmove: {text[:60]!r}")

    def _forfeit(self, slot: int, failure: EngineFailure) -> Failure:
        """The slot's engine crashed or timed out: discarded (the slot's next game starts a
        fresh one), and this game is its forfeit."""
        self._discard(slot)
        return Failure(FailureKind.FORFEIT, str(failure))

    def _discard(self, slot: int) -> None:
        proc = self._procs.pop(slot, None)
        if proc is not None:
            proc.close()

    def genmove(self, game: Game, color: int) -> int:
        """`tabula.gtp.Player`: replay `game` into a dedicated engine, then ask it."""
        failure = self.start_game(-1, game, color) or self._ask(-1, f"genmove {_colour(color)}")
        answer = failure if failure is not None else self._genmove_answer(-1)
        if isinstance(answer, Failure):
            raise EngineFailure(f"{self.name}: {answer.reason}")
        return answer


def _colour(color: int) -> str:
    return "b" if color == 1 else "w"


def _vertex(move: int, size: int) -> str:
    return coords.to_gtp(move, size)
