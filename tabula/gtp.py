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
that is not b/black/w/white, a token that is not a vertex/int/float, a status that is not
alive/dead/seki); ``illegal move`` (occupied, suicide, positional superko, or a well-formed
vertex off this board); ``unacceptable size`` (a board size the player cannot play: outside
5..19, or another size than a network's); ``cannot undo`` (no move to take back: handicap
stones are not moves); and the handicap commands' failures as the spec names them: ``board
not empty``, ``invalid number of stones``, ``bad vertex list`` (pass, a repeated vertex or
one off the board, fewer than 2 or more than N*N-1 vertices).

Handicap stones (``fixed_handicap``: `tabula.go.handicap`'s pattern; ``place_free_handicap``:
that pattern, then black moves of the player for stones beyond it, fewer when it would pass;
``set_free_handicap``) are black stones on an empty board, White to play; they are not in the
move history that ``undo`` takes back (the player sees them as black moves, the only way a
`Game` holds stones).

``final_status_list alive|dead|seki`` answers with Tromp-Taylor's view, the one
``final_score`` counts by: every stone on the board counts for its colour as it stands (a
game is played on until dead stones are captured), so every stone is ``alive``, one string
per line, and ``dead`` and ``seki`` are empty. A GUI that scores from the dead list (GoGui)
then agrees with ``final_score``.

Moves come from a pluggable `Player`: `tabula.players.RandomPlayer`, the network players of
`tabula.players` and the GTP engines of `tasks.engines` implement it. A player that can also
search a position for a GUI (`tabula.analyze.Analyst`: the network + MCTS player) adds
``lz-analyze``, ``kata-analyze`` (with scores and ownership from a network that has those
heads) and ``lz-genmove_analyze``; one that can show its network's view
(`tabula.analyze.NetworkView`: both network players) adds GoGui's analyze commands
(`tabula.analyze` has the formats). Their responses stream. ``lz-analyze`` and
``kata-analyze``: `run` writes their ``info`` lines until the next command arrives (a line
waiting on a file descriptor; an in-memory stream gets one line), and the response ends with
the empty line that precedes the next response (or the end of input).
``lz-genmove_analyze`` (Leela Zero's, which Lizzie sends to play with analysis shown)
answers ``=``, then ``info`` lines while the same search runs to ``visits`` simulations, then
``play MOVE`` (its most visited move, played on the board) and the empty line; `respond`
yields the lines as they come.
Vertices are GTP coordinates (A..T without I, row 1 at the bottom, see `tabula.go.coords`).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Collection, Iterator
from typing import Protocol, TextIO

import numpy as np

from tabula.analyze import (
    GOGUI_COMMANDS,
    AnalyzeArgsError,
    LineReader,
    LzRequest,
    Streaming,
    lz_line,
    parse_lz_analyze,
    policy_gfx,
    value_text,
)
from tabula.go import coords
from tabula.go.coords import MAX_SIZE, MIN_SIZE, RESIGN
from tabula.go.game import Game, IllegalMoveError
from tabula.go.handicap import fixed_handicap, max_fixed_handicap, strings
from tabula.mcts.analysis import Analysis, MoveInfo
from tabula.sgf import result_string

ENGINE_NAME = "tabula"
ENGINE_VERSION = "0.1.0"

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # spec 2.3: all but HT (\x09) and LF (\x0a)
_ID = re.compile(r"[0-9]+")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_VERTEX = re.compile(r"[A-HJ-Z][0-9]{1,2}")  # well-formed, maybe off this board
_COLOURS = {"b": 1, "black": 1, "w": -1, "white": -1}
_STATUSES = ("alive", "dead", "seki")
#: Every size `Game` plays: what a player that names none (random, other engines) accepts.
ALL_SIZES = range(MIN_SIZE, MAX_SIZE + 1)
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

    ``sizes``: the board sizes the player can play (``boardsize`` refuses the others; a network
    plays the one size it was trained for); ``visits``: the simulations of
    ``lz-genmove_analyze``'s search. `handle(line)` never raises: malformed lines get ``?
    syntax error`` or ``? unknown command``, and any failure inside a `Player` becomes a ``?``
    response.
    """

    def __init__(
        self,
        player: Player,
        size: int = 9,
        komi: float = 7.5,
        sizes: Collection[int] = ALL_SIZES,
        visits: int = 64,
    ) -> None:
        self.player = player
        self.size = size
        self.komi = komi
        self.sizes, self.visits = sizes, visits
        self.game = Game(size=size, komi=komi)
        self.wants_quit = False
        self._streaming: Streaming | None = None
        self._handicap = 0  # the first moves of `game` that are handicap stones
        self._rest: Iterator[str] | None = None  # a response's lines still to come
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
            "final_status_list": self._final_status_list,
            "fixed_handicap": self._fixed_handicap,
            "place_free_handicap": self._place_free_handicap,
            "set_free_handicap": self._set_free_handicap,
            "time_settings": self._time_settings,
            "time_left": self._time_left,
        }
        if callable(getattr(player, "analysis", None)):
            self._commands["lz-analyze"] = self._lz_analyze
            self._commands["kata-analyze"] = self._kata_analyze
            self._commands["lz-genmove_analyze"] = self._lz_genmove_analyze
        if callable(getattr(player, "network_view", None)):
            self._commands["gogui-analyze_commands"] = self._gogui_analyze_commands
            self._commands["tabula-policy"] = self._tabula_policy
            self._commands["tabula-value"] = self._tabula_value

    def handle(self, line: str) -> str | None:
        """Answer one GTP line; None for lines that are empty after pre-processing."""
        parts = list(self.respond(line))
        return "".join(parts) if parts else None

    def respond(self, line: str) -> Iterator[str]:
        """`handle`'s answer in the parts a streaming response writes as they come (nothing
        for a line that is empty after pre-processing)."""
        tokens = preprocess(line).split()
        if not tokens:
            return
        yield self.end_analysis() + self._answer(tokens)
        rest, self._rest = self._rest, None
        if rest is None:
            return
        try:
            yield from rest
        except Exception:  # noqa: BLE001 - as in `_answer`: a Player bug must not kill GTP
            yield "\n"  # the response's end; the move is not played

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
            if self._streaming is not None or self._rest is not None:  # lines follow
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
            for part in self.respond(line):
                out.write(part)
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
                out.write(streaming.line(moves, self.size) + "\n")
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
        if size not in self.sizes:
            raise _GtpFailure("unacceptable size")
        self.size = size
        self.game, self._handicap = Game(size=size, komi=self.komi), 0
        return ""

    def _clear_board(self, args: list[str]) -> str:
        self._no_args(args)
        self.game, self._handicap = Game(size=self.size, komi=self.komi), 0
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
        if len(self.game.history) <= self._handicap:
            raise _GtpFailure("cannot undo")
        self.game.undo()
        return ""

    # -- handicap ----------------------------------------------------------------------------

    def _stones(self, args: list[str]) -> int:
        """The number of stones of a handicap command, on an empty board."""
        if len(args) != 1:
            raise _syntax_error()
        stones = _parse_int(args[0])
        if self.game.board.any():
            raise _GtpFailure("board not empty")
        return stones

    def _place_handicap(self, points: list[int]) -> str:
        for point in points:
            self.game.play(point, 1)
        self._handicap = len(self.game.history)
        return " ".join(coords.to_gtp(p, self.size) for p in points)

    def _fixed_handicap(self, args: list[str]) -> str:
        stones = self._stones(args)
        if not 2 <= stones <= max_fixed_handicap(self.size):
            raise _GtpFailure("invalid number of stones")
        return self._place_handicap(fixed_handicap(stones, self.size))

    def _place_free_handicap(self, args: list[str]) -> str:
        stones = self._stones(args)
        if not 2 <= stones <= self.size * self.size - 1:
            raise _GtpFailure("invalid number of stones")
        fixed = min(stones, max_fixed_handicap(self.size))
        points = fixed_handicap(fixed, self.size) if fixed >= 2 else []
        game = Game(size=self.size, komi=self.komi)
        for point in points:
            game.play(point, 1)
        while len(points) < stones:  # beyond the pattern: where the player would play
            move = self.player.genmove(game.copy(), 1)
            if not 0 <= move < self.size * self.size or not game.is_legal(move, 1):
                break  # it would pass (or resign): these stones are enough (spec 4.1.2)
            game.play(move, 1)
            points.append(int(move))
        if len(points) < 2:
            raise _GtpFailure("invalid number of stones")
        return self._place_handicap(points)

    def _set_free_handicap(self, args: list[str]) -> str:
        if not args:
            raise _syntax_error()
        tokens = [a.upper() for a in args]
        if any(t != "PASS" and not _VERTEX.fullmatch(t) for t in tokens):
            raise _syntax_error()
        if self.game.board.any():
            raise _GtpFailure("board not empty")
        M = self.size * self.size
        try:
            points = [coords.from_gtp(t, self.size) if t != "PASS" else M for t in tokens]
        except ValueError:
            raise _GtpFailure("bad vertex list") from None
        if M in points or len(set(points)) != len(points) or not 2 <= len(points) <= M - 1:
            raise _GtpFailure("bad vertex list")
        self._place_handicap(points)
        return ""

    # -- analysis ----------------------------------------------------------------------------

    def _analysis_of(self, args: list[str], kata: bool = False) -> tuple[LzRequest, Analysis, int]:
        """The request of an ``lz-analyze``-shaped command (``kata``: ``kata-analyze``'s), the
        player's analysis of the position for the colour it names (the side to move by
        default), and that colour."""
        try:
            request = parse_lz_analyze(args, kata)
        except AnalyzeArgsError:
            raise _syntax_error() from None
        colour = self.game.to_play if request.colour is None else request.colour
        analysis = self.player.analysis(self.game.copy(), colour)  # type: ignore[attr-defined]
        return request, analysis, colour

    def _lz_analyze(self, args: list[str]) -> str:
        request, analysis, _ = self._analysis_of(args)
        self._streaming = Streaming(request, analysis.steps())
        return ""

    def _kata_analyze(self, args: list[str]) -> str:
        request, analysis, _ = self._analysis_of(args, kata=True)
        self._streaming = Streaming(request, analysis.steps(), analysis=analysis)
        return ""

    def _lz_genmove_analyze(self, args: list[str]) -> str:
        request, analysis, colour = self._analysis_of(args)
        self._rest = self._genmove_lines(request, analysis, colour)
        return ""

    def _genmove_lines(self, request: LzRequest, analysis: Analysis, colour: int) -> Iterator[str]:
        """``lz-genmove_analyze``'s lines: an ``info`` line every interval while the search
        grows to `visits` simulations (and one at its end), then ``play MOVE`` and the
        response's empty line; the move, the most visited, is played."""
        moves: list[MoveInfo] = []
        last = time.monotonic()
        for moves in analysis.steps():
            if analysis.visits >= self.visits:
                break
            if time.monotonic() - last >= request.interval:
                yield lz_line(moves[: request.max_moves], self.size) + "\n"
                last = time.monotonic()
        if moves:
            yield lz_line(moves[: request.max_moves], self.size) + "\n"
        move = moves[0].move if moves else self.size * self.size  # no search: the game is over
        self.game.play(move, colour)
        yield f"play {coords.to_gtp(move, self.size)}\n\n"

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

    def _final_status_list(self, args: list[str]) -> str:
        if len(args) != 1 or args[0].lower() not in _STATUSES:
            raise _syntax_error()
        if args[0].lower() != "alive":
            return ""  # Tromp-Taylor: every stone on the board counts as it stands
        board = self.game.board
        return "\n".join(
            " ".join(coords.to_gtp(p, self.size) for p in string) for string in strings(board)
        )


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
    sizes: Collection[int] = ALL_SIZES,
    visits: int = 64,
) -> None:
    """Run a GTP engine on `inp`/`out` until ``quit`` or end of input (the `tabula gtp` CLI);
    ``sizes``, ``visits``: `GtpEngine`'s.

    `inp`/`out` default to the process's stdin/stdout (looked up at call time). A stream with a
    file descriptor is read through `LineReader` (so that ``lz-analyze`` sees the next command
    arrive). Undecodable input bytes are replaced rather than raised (a controller may send
    junk).
    Raises ValueError for a size outside 5..19.
    """
    inp = sys.stdin if inp is None else inp
    out = sys.stdout if out is None else out
    engine = GtpEngine(player, size=size, komi=komi, sizes=sizes, visits=visits)
    try:
        fd = inp.fileno()
    except (AttributeError, OSError, ValueError):  # in memory (io.UnsupportedOperation)
        reconfigure = getattr(inp, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
        engine.run(inp, out)
        return
    engine.run(LineReader(fd), out)
