"""The analysis commands of `tabula.gtp`: what Go GUIs send and what they parse.

``lz-analyze`` (Leela Zero's extension, which Lizzie, Sabaki and KaTrain's Leela mode speak):
``lz-analyze [COLOUR] [INTERVAL] [interval INTERVAL] [maxmoves K]`` answers ``=`` and then,
every INTERVAL centiseconds until the next command arrives, one line of candidate moves::

    info move D4 visits 58 winrate 5312 prior 1875 order 0 pv D4 E6 C6 info move E5 ...

``winrate`` and ``prior`` are integers in 0..10000 (Leela Zero's scale, win probability and
policy prior times 10,000, from the side to move), ``order`` the rank by visits, and ``pv``
the principal variation, last on each move. The response ends with the empty line that
precedes the next response.

GoGui's analyze commands (``gogui-analyze_commands``): ``tabula-policy`` (``gfx``: the
network's prior over the legal moves as a heat map, ``INFLUENCE`` scaled to the largest,
with ``LABEL`` percentages of the moves above 1%) and ``tabula-value`` (``string``: the
network's value of the position).

``kata-analyze`` (KataGo's, which Lizzie and Sabaki use for KataGo-style overlays) takes
the same arguments plus ``ownership true`` and answers the same way, each move as::

    info move D4 visits 58 winrate 0.531200 scoreMean 1.2345 scoreLead 1.2345 prior 0.187500
    order 0 pv D4 E6 C6

with ``winrate`` and ``prior`` in [0, 1], ``scoreMean`` and ``scoreLead`` the expected final
margin in points (the network's score head, averaged over the move's subtree; absent for a
network without the head), all from the side to move, and with ``ownership true`` the line
ends with ``ownership`` and N*N values in [-1, 1] (+1: the side to move's), row by row from
the top left. ``pvVisits``, ``rootInfo`` and the other display switches of KataGo
(`KATA_QUIET_KEYS`) are accepted and not answered.

The players that offer them (`Analyst`, `NetworkView`) and the streaming parts of the engine
(`Streaming`, `LineReader`) are here too; `tabula.gtp.GtpEngine` runs them.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tabula.go import coords
from tabula.go.game import Game
from tabula.mcts.analysis import Analysis, MoveInfo

#: ``gogui-analyze_commands``: type/label/command, one per line.
GOGUI_COMMANDS = ("gfx/Policy heat map/tabula-policy", "string/Network value/tabula-value")

_COLOURS = {"b": 1, "black": 1, "w": -1, "white": -1}


class AnalyzeArgsError(ValueError):
    """The arguments of ``lz-analyze`` do not parse (a GTP syntax error)."""


#: ``kata-analyze``'s switches (``KEY true|false``) that are accepted and not answered.
KATA_QUIET_KEYS = ("pvVisits", "pvEdgeVisits", "rootInfo", "ownershipStdev", "movesOwnership",
                   "movesOwnershipStdev")  # fmt: skip


@dataclass(frozen=True)
class LzRequest:
    """A parsed ``lz-analyze`` or ``kata-analyze``: ``colour`` to analyse for (None: the side
    to move), ``interval`` seconds between lines, ``max_moves`` candidates per line (None:
    all); ``kata``: KataGo's line format; ``ownership``: each line ends with the ownership."""

    colour: int | None = None
    interval: float = 1.0
    max_moves: int | None = None
    kata: bool = False
    ownership: bool = False


def _count(token: str) -> int:
    if not token.isdigit() or len(token) > 9:
        raise AnalyzeArgsError(token)
    return int(token)


def parse_lz_analyze(args: Sequence[str], kata: bool = False) -> LzRequest:
    """``[COLOUR] [INTERVAL] [interval INTERVAL] [maxmoves K]``, interval in centiseconds;
    ``kata`` (``kata-analyze``) also takes ``ownership true|false`` and `KATA_QUIET_KEYS`."""
    colour, interval, max_moves, ownership = None, 100, None, False
    rest = list(args)
    if rest and rest[0].lower() in _COLOURS:
        colour = _COLOURS[rest.pop(0).lower()]
    if rest and rest[0].isdigit():
        interval = _count(rest.pop(0))
    while rest:
        key = rest.pop(0)
        if not rest:
            raise AnalyzeArgsError(key)
        if kata and key in ("ownership", *KATA_QUIET_KEYS):
            switch = rest.pop(0).lower()
            if switch not in ("true", "false"):
                raise AnalyzeArgsError(switch)
            ownership = ownership or (key == "ownership" and switch == "true")
            continue
        if key.lower() not in ("interval", "maxmoves"):
            raise AnalyzeArgsError(key)
        value = _count(rest.pop(0))
        if key.lower() == "interval":
            interval = value
        else:
            max_moves = value
    return LzRequest(colour, interval / 100.0, max_moves, kata, ownership)


def lz_line(moves: Sequence[MoveInfo], size: int) -> str:
    """One ``lz-analyze`` update: an ``info`` entry per move, in the given order."""
    entries = []
    for order, m in enumerate(moves):
        winrate = round(5000 * (1.0 + max(-1.0, min(1.0, m.value))))
        pv = " ".join(coords.to_gtp(move, size) for move in m.pv)
        entries.append(
            f"info move {coords.to_gtp(m.move, size)} visits {m.visits} winrate {winrate} "
            f"prior {round(10000 * m.prior)} order {order} pv {pv}"
        )
    return " ".join(entries)


def kata_line(moves: Sequence[MoveInfo], size: int, ownership: np.ndarray | None) -> str:
    """One ``kata-analyze`` update: an ``info`` entry per move (``winrate`` and ``prior`` in
    [0, 1], ``scoreMean`` and ``scoreLead`` in points when the network has the score head),
    then ``ownership`` and N*N values when given; all from the side to move."""
    entries = []
    for order, m in enumerate(moves):
        winrate = (1.0 + max(-1.0, min(1.0, m.value))) / 2.0
        score = "" if m.score is None else f" scoreMean {m.score:.4f} scoreLead {m.score:.4f}"
        pv = " ".join(coords.to_gtp(move, size) for move in m.pv)
        entries.append(
            f"info move {coords.to_gtp(m.move, size)} visits {m.visits} winrate {winrate:.6f}"
            f"{score} prior {m.prior:.6f} order {order} pv {pv}"
        )
    if ownership is not None:
        entries.append("ownership " + " ".join(f"{v:.6f}" for v in ownership))
    return " ".join(entries)


def policy_gfx(priors: np.ndarray, legal: np.ndarray, size: int) -> str:
    """``tabula-policy``'s GoGui gfx: the prior over the legal moves (renormalised)."""
    p = np.where(legal, np.asarray(priors, dtype=np.float64), 0.0)
    p = p / p.sum() if p.sum() > 0 else p
    M = size * size
    peak = max(float(p[:M].max(initial=0.0)), 1e-12)
    influence = " ".join(f"{coords.to_gtp(a, size)} {p[a] / peak:.3f}" for a in range(M) if p[a])
    labels = " ".join(
        f"{coords.to_gtp(a, size)} {100 * p[a]:.0f}" for a in range(M) if p[a] >= 0.01
    )
    lines = [f"INFLUENCE {influence}"] if influence else []
    lines += [f"LABEL {labels}"] if labels else []
    lines.append(f"TEXT pass {100 * p[M]:.1f}%")
    return "\n".join(lines)


def value_text(value: float, colour: int) -> str:
    """``tabula-value``'s text: the network's value from the side to move."""
    side = "black" if colour == 1 else "white"
    return f"{side} to play: value {value:+.3f}, win probability {50 * (1 + value):.1f}%"


class Analyst(Protocol):
    """A player that searches a position for as long as a GUI watches (``lz-analyze``)."""

    def analysis(self, game: Game, color: int) -> Analysis:
        """A growing search of `game` with `color` to move (`tabula.mcts.analysis`)."""
        ...


class NetworkView(Protocol):
    """A player whose network can be shown (GoGui's ``tabula-policy``, ``tabula-value``)."""

    def network_view(self, game: Game, color: int) -> tuple[np.ndarray, float]:
        """The network's priors float[M+1] (unmasked) and value (side to move) for `game`
        with `color` to move."""
        ...


@dataclass
class Streaming:
    """An ``lz-analyze`` response in progress."""

    request: LzRequest
    steps: Iterator[list[MoveInfo]]
    last: float = field(default_factory=time.monotonic)
    lines: int = 0
    analysis: Analysis | None = None  # (its ownership, for kata-analyze)

    def line(self, moves: Sequence[MoveInfo], size: int) -> str:
        """The ``info`` line of ``moves`` in the request's format."""
        moves = moves[: self.request.max_moves]
        if not self.request.kata:
            return lz_line(moves, size)
        analysis = self.analysis if self.request.ownership else None
        return kata_line(moves, size, None if analysis is None else analysis.ownership())


class LineReader:
    """Lines from a file descriptor, and whether one is waiting (`waiting`): a text stream's
    read-ahead buffer would hide a waiting line from ``select``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def readline(self) -> str:
        while b"\n" not in self._buffer:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                line, self._buffer = self._buffer, b""
                return line.decode("utf-8", errors="replace")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return (line + b"\n").decode("utf-8", errors="replace")

    def waiting(self) -> bool:
        return bool(self._buffer) or bool(select.select([self.fd], [], [], 0)[0])
