"""Go Text Protocol, version 2: one input line in, one response string out.

`GtpEngine.handle` is pure protocol: it parses one line the way the GTP 2 specification
(section 2, "Protocol basics") says, updates its `Game`, and returns the full response text.
Nothing here reads or writes a stream except `run`/`serve`, which take the streams as
parameters (the CLI passes stdin/stdout).

Response format: ``=[id] text`` on success, ``?[id] message`` on failure, each terminated by
one empty line (``"\\n\\n"``). The optional numeric id of a command is echoed as given.
Pre-processing (spec 2.3): control characters other than HT and LF are removed, HT becomes a
space, everything after ``#`` is a comment, and lines that are then empty get no response
(`handle` returns None).

Failure messages: ``unknown command``; ``syntax error`` (wrong argument count, a colour
that is not b/black/w/white, a token that is not a vertex/int/float); ``illegal move``
(occupied, suicide, positional superko, or a well-formed vertex off this board);
``unacceptable size`` (boardsize outside 5..19); ``cannot undo`` (no move to take back).

Moves come from a pluggable `Player`: `tabula.players.RandomPlayer`, the network players of
`tabula.players` and the GTP engines of `tasks.engines` implement it. A player that can also
search a position for a GUI (`tabula.analyze.Analyst`: the network + MCTS player) adds
``lz-analyze``; one that can show its network's view (`tabula.analyze.NetworkView`: both
network players) adds GoGui's analyze commands (`tabula.analyze` has the formats).
``lz-analyze`` is the one command whose response streams: `run` writes its ``info`` lines until
the next command arrives (a line waiting on a file descriptor; an in-memory stream gets one
line), and the response ends with the empty line that precedes the next response (or the end
of input).
Vertices are GTP coordinates (A..T without I, row 1 at the bottom, see `tabula.go.coords`).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import Protocol, TextIO

import numpy as np

from tabula.analyze import (
    GOGUI_COMMANDS,
    AnalyzeArgsError,
    LineReader,
    Streaming,
    lz_line,
    parse_lz_analyze,
    policy_gfx,
    value_text,
)
from tabula.go import coords
from tabula.go.coords import MAX_SIZE, MIN_SIZE, RESIGN
from tabula.go.game import Game, IllegalMoveError
from tabula.sgf import result_string

ENGINE_NAME = "tabula"
ENGINE_VERSION = "0.1.0"

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # spec 2.3: all but HT (\x09) and LF (\x0a)
_ID = re.compile(r"[0-9]+")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_VERTEX = re.compile(r"[A-HJ-Z][0-9]{1,2}")  # well-formed, maybe off this board
_COLOURS = {"b": 1, "black": 1, "w": -1, "white": -1}
_INT_CAP = 10**18  # longer integers saturate (never hand huge digit strings to int())


class Player(Protocol):
    """A move source (`tabula.players.RandomPlayer`, the network and engine players)."""

    def genmove(self, game: Game, color: int) -> int:
        """Return a flat move for `color` (+1 black, -1 white) in `game`.

        The move is 0..M-1 for a point, M = N*N for pass, or `RESIGN`. `game` is the
        engine's position (a copy: mutating it has no effect). `color` may differ from
        `game.to_play` (GTP lets a controller ask for either colour); the move must be legal
        for `color`.
        """
        ...


class _GtpFailure(Exception):
    """A command failed; the message becomes the ``?`` response."""


def _syntax_error() -> _GtpFailure:
    return _GtpFailure("syntax error")


def _parse_int(token: str) -> int:
    """A GTP int (optionally signed); huge values saturate at +-10**18."""
    if not _INT.fullmatch(token):
        raise _syntax_error()
    sign = -1 if token[0] == "-" else 1
    digits = token.lstrip("+-").lstrip("0") or "0"
    return sign * _INT_CAP if len(digits) > 18 else sign * int(digits)


def _parse_float(token: str) -> float:
    if not _FLOAT.fullmatch(token) or len(token) > 64:
        raise _syntax_error()
    value = float(token)
    if not np.isfinite(value):
        raise _syntax_error()
    return value


def _parse_colour(token: str) -> int:
    colour = _COLOURS.get(token.lower())
    if colour is None:
        raise _syntax_error()
    return colour


def preprocess(line: str) -> str:
    """Spec 2.3: drop control characters and the comment, tabs become spaces, trim."""
    line = line.replace("\t", " ").replace("\n", " ")
    line = _CONTROL.sub("", line).split("#", 1)[0]
    return line.strip()


def _format(ok: bool, cmd_id: str, text: str) -> str:
    # No empty line may appear inside a response: it would end the response early.
    body = "\n".join(ln for ln in text.split("\n") if ln.strip())
    if text.startswith("\n") and body:
        body = "\n" + body  # multi-line answers (showboard) start on their own line
    return f"{'=' if ok else '?'}{cmd_id} {body}\n\n"


class GtpEngine:
    """GTP 2 engine state: the current `Game`, board size, komi, and the move source.

    `handle(line)` never raises: malformed lines get ``? syntax error`` or
    ``? unknown command``, and any failure inside a `Player` becomes a ``?`` response.
    """

    def __init__(self, player: Player, size: int = 9, komi: float = 7.5) -> None:
        self.player = player
        self.size = size
        self.komi = komi
        self.game = Game(size=size, komi=komi)
        self.wants_quit = False
        self._streaming: Streaming | None = None
        self._commands: dict[str, Callable[[list[str]], str]] = {
            "protocol_version": self._protocol_version,
            "name": self._name,
            "version": self._version,
            "known_command": self._known_command,
            "list_commands": self._list_commands,
            "quit": self._quit,
            "boardsize": self._boardsize,
            "clear_board": self._clear_board,
            "komi": self._komi,
            "play": self._play,
            "genmove": self._genmove,
            # KGS asks for this when the players disagree about dead stones; with
            # Tromp-Taylor scoring every stone counts as it stands, so it is plain genmove.
            "kgs-genmove_cleanup": self._genmove,
            "undo": self._undo,
            "showboard": self._showboard,
            "final_score": self._final_score,
            "time_settings": self._time_settings,
            "time_left": self._time_left,
        }
        if callable(getattr(player, "analysis", None)):
            self._commands["lz-analyze"] = self._lz_analyze
        if callable(getattr(player, "network_view", None)):
            self._commands["gogui-analyze_commands"] = self._gogui_analyze_commands
            self._commands["tabula-policy"] = self._tabula_policy
            self._commands["tabula-value"] = self._tabula_value

    def handle(self, line: str) -> str | None:
        """Answer one GTP line; None for lines that are empty after pre-processing."""
        tokens = preprocess(line).split()
        if not tokens:
            return None
        return self.end_analysis() + self._answer(tokens)

    def end_analysis(self) -> str:
        """The end of an open ``lz-analyze`` response (its empty line), or ""."""
        if self._streaming is None:
            return ""
        self._streaming = None
        return "\n"

    def _answer(self, tokens: list[str]) -> str:
        cmd_id = ""
        if _ID.fullmatch(tokens[0]):
            cmd_id, tokens = tokens[0], tokens[1:]
            if not tokens:
                return _format(False, cmd_id, "syntax error")
        command = self._commands.get(tokens[0])
        if command is None:
            return _format(False, cmd_id, "unknown command")
        try:
            text = command(tokens[1:])
            if self._streaming is not None:  # lz-analyze: the info lines follow in `run`
                return f"={cmd_id}\n"
            return _format(True, cmd_id, text)
        except _GtpFailure as failure:
            return _format(False, cmd_id, str(failure))
        except Exception as error:  # noqa: BLE001 - last resort: a Player bug must not kill GTP
            return _format(False, cmd_id, f"internal error: {type(error).__name__}")

    def run(self, inp: TextIO | LineReader, out: TextIO) -> None:
        """Answer `inp` line by line on `out`, flushing after each response, until quit/EOF;
        an ``lz-analyze`` streams until the next line arrives (`LineReader.waiting`)."""
        while not self.wants_quit:
            if self._streaming is not None:
                self._stream(inp, out)
            line = inp.readline()
            if not line:
                break
            response = self.handle(line)
            if response is not None:
                out.write(response)
                out.flush()
        out.write(self.end_analysis())
        out.flush()

    def _stream(self, inp: TextIO | LineReader, out: TextIO) -> None:
        """Search and write ``info`` lines every interval until a line waits on `inp` (at
        least one line; an in-memory stream gets exactly one) or the search is full."""
        streaming = self._streaming
        assert streaming is not None
        waiting = inp.waiting if isinstance(inp, LineReader) else None
        for moves in streaming.steps:
            now = time.monotonic()
            stop = waiting is None or waiting()
            if (stop and not streaming.lines) or now - streaming.last >= streaming.request.interval:
                out.write(lz_line(moves[: streaming.request.max_moves], self.size) + "\n")
                out.flush()
                streaming.last, streaming.lines = now, streaming.lines + 1
            if stop:
                return

    # -- administrative commands -------------------------------------------------------

    @staticmethod
    def _no_args(args: list[str]) -> None:
        if args:
            raise _syntax_error()

    def _protocol_version(self, args: list[str]) -> str:
        self._no_args(args)
        return "2"

    def _name(self, args: list[str]) -> str:
        self._no_args(args)
        return ENGINE_NAME

    def _version(self, args: list[str]) -> str:
        self._no_args(args)
        return ENGINE_VERSION

    def _known_command(self, args: list[str]) -> str:
        if len(args) != 1:
            raise _syntax_error()
        return "true" if args[0] in self._commands else "false"

    def _list_commands(self, args: list[str]) -> str:
        self._no_args(args)
        return "\n".join(self._commands)

    def _quit(self, args: list[str]) -> str:
        self._no_args(args)
        self.wants_quit = True
        return ""

    # -- setup commands --------------------------------------------------------------------

    def _boardsize(self, args: list[str]) -> str:
        if len(args) != 1:
            raise _syntax_error()
        size = _parse_int(args[0])
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise _GtpFailure("unacceptable size")
        self.size = size
        self.game = Game(size=size, komi=self.komi)
        return ""

    def _clear_board(self, args: list[str]) -> str:
        self._no_args(args)
        self.game = Game(size=self.size, komi=self.komi)
        return ""

    def _komi(self, args: list[str]) -> str:
        if len(args) != 1:
            raise _syntax_error()
        self.komi = _parse_float(args[0])
        # Game's komi is fixed at construction: rebuild the same moves under the new komi.
        game = Game(size=self.size, komi=self.komi)
        for colour, move in self.game.history:
            game.play(move, colour)
        self.game = game
        return ""

    def _time_settings(self, args: list[str]) -> str:
        # main_time byo_yomi_time byo_yomi_stones; accepted, validated, not used.
        if len(args) != 3 or any(_parse_int(a) < 0 for a in args):
            raise _syntax_error()
        return ""

    def _time_left(self, args: list[str]) -> str:
        # colour time stones; accepted, validated, not used.
        if len(args) != 3:
            raise _syntax_error()
        _parse_colour(args[0])
        if _parse_int(args[1]) < 0 or _parse_int(args[2]) < 0:
            raise _syntax_error()
        return ""

    # -- moves -------------------------------------------------------------------------------

    def _parse_move(self, token: str) -> int:
        """A GTP vertex or pass to a flat move; off-board but well-formed is illegal."""
        M = self.size * self.size
        token = token.upper()
        if token == "PASS":
            return M
        if not _VERTEX.fullmatch(token):
            raise _syntax_error()
        try:
            return coords.from_gtp(token, self.size)
        except ValueError:
            raise _GtpFailure("illegal move") from None

    def _play(self, args: list[str]) -> str:
        if len(args) != 2:
            raise _syntax_error()
        colour = _parse_colour(args[0])
        move = self._parse_move(args[1])
        if not self.game.is_legal(move, colour):
            raise _GtpFailure("illegal move")
        try:
            self.game.play(move, colour)
        except IllegalMoveError:
            raise _GtpFailure("illegal move") from None
        return ""

    def _genmove(self, args: list[str]) -> str:
        if len(args) != 1:
            raise _syntax_error()
        colour = _parse_colour(args[0])
        move = self.player.genmove(self.game.copy(), colour)
        if move == RESIGN:
            return "resign"
        M = self.size * self.size
        if not isinstance(move, int | np.integer) or not 0 <= move <= M:
            raise _GtpFailure("player returned an invalid move")
        move = int(move)
        if not self.game.is_legal(move, colour):
            raise _GtpFailure("player returned an illegal move")
        self.game.play(move, colour)
        return coords.to_gtp(move, self.size)

    def _undo(self, args: list[str]) -> str:
        self._no_args(args)
        if not self.game.history:
            raise _GtpFailure("cannot undo")
        self.game.undo()
        return ""

    # -- analysis ----------------------------------------------------------------------------

    def _lz_analyze(self, args: list[str]) -> str:
        try:
            request = parse_lz_analyze(args)
        except AnalyzeArgsError:
            raise _syntax_error() from None
        colour = self.game.to_play if request.colour is None else request.colour
        analysis = self.player.analysis(self.game.copy(), colour)  # type: ignore[attr-defined]
        self._streaming = Streaming(request, analysis.steps())
        return ""

    def _gogui_analyze_commands(self, args: list[str]) -> str:
        self._no_args(args)
        return "\n".join(GOGUI_COMMANDS)

    def _network_view(self, args: list[str]) -> tuple[np.ndarray, float, int]:
        if len(args) > 1:
            raise _syntax_error()
        colour = _parse_colour(args[0]) if args else self.game.to_play
        view = self.player.network_view  # type: ignore[attr-defined]
        priors, value = view(self.game.copy(), colour)
        return priors, value, colour

    def _tabula_policy(self, args: list[str]) -> str:
        priors, _, colour = self._network_view(args)
        game = self.game.copy()
        game.to_play = colour
        return policy_gfx(priors, game.legal_mask(), self.size)

    def _tabula_value(self, args: list[str]) -> str:
        _, value, colour = self._network_view(args)
        return value_text(value, colour)

    # -- information -------------------------------------------------------------------------

    def _showboard(self, args: list[str]) -> str:
        self._no_args(args)
        return "\n" + render_board(self.game)

    def _final_score(self, args: list[str]) -> str:
        self._no_args(args)
        return result_string(float(self.game.score()), self.game.winner())


def render_board(game: Game) -> str:
    """ASCII board in GTP coordinates: X black, O white, . empty; row 1 at the bottom."""
    N = game.size
    header = "   " + " ".join(coords.GTP_COLUMNS[:N])
    symbols = {1: "X", -1: "O", 0: "."}
    lines = [header]
    board = game.board
    for row in range(N):
        number = N - row
        cells = " ".join(symbols[int(v)] for v in board[row])
        lines.append(f"{number:2d} {cells} {number:2d}")
    lines.append(header)
    to_play = "black" if game.to_play == 1 else "white"
    lines.append(f"move {game.move_number}, {to_play} to play, komi {game.komi:g}")
    return "\n".join(lines)


def serve(
    player: Player,
    inp: TextIO | None = None,
    out: TextIO | None = None,
    size: int = 9,
    komi: float = 7.5,
) -> None:
    """Run a GTP engine on `inp`/`out` until ``quit`` or end of input (the `tabula gtp` CLI).

    `inp`/`out` default to the process's stdin/stdout (looked up at call time). A stream with a
    file descriptor is read through `LineReader` (so that ``lz-analyze`` sees the next command
    arrive). Undecodable input bytes are replaced rather than raised (a controller may send
    junk).
    Raises ValueError for a size outside 5..19.
    """
    inp = sys.stdin if inp is None else inp
    out = sys.stdout if out is None else out
    engine = GtpEngine(player, size=size, komi=komi)
    try:
        fd = inp.fileno()
    except (AttributeError, OSError, ValueError):  # in memory (io.UnsupportedOperation)
        reconfigure = getattr(inp, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
        engine.run(inp, out)
        return
    engine.run(LineReader(fd), out)
