"""External anchors: players of fixed strength that put every run's Elo on one scale
(docs/strength.md, "The GnuGo ladder").

An anchor is named in ``evaluation.anchors`` by one of:

=================  ===========================================================================
name               player
=================  ===========================================================================
``gnugo-lN``       GnuGo 3.8 at level N (1..10) under our rules: ``GNUGO_FLAGS`` make it play
                   to the end under area scoring, so Tromp-Taylor scores its games as it sees them
``gtp:COMMAND``    any GTP engine (`tasks.players` grammar); rated freely, no fixed Elo
=================  ===========================================================================

The GnuGo levels' Elo on 9x9 (``GNUGO_ELO_9X9``, level 1 = 0) were measured once by
``bench/ladder.py`` from their games against each other (100 per pair, seeded openings, komi 7.5,
Tromp-Taylor), and are held fixed in every rating fit (`tabula.elo.fit_ratings` ``anchors``). On
other board sizes GnuGo is rated freely (the ladder is 9x9's).

Pure: names and numbers only; the engines themselves run in ``tasks.engines``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

from tabula.errors import UsageError

GNUGO_FLAGS = "--mode gtp --chinese-rules --positional-superko --capture-all-dead"

#: Elo of GnuGo levels on 9x9 relative to level 1, measured by ``python -m bench.ladder --games
#: 100`` (docs/strength.md, "The GnuGo ladder": 95% intervals level 5 [-42, +71], level 10
#: [+56, +172]). Levels not measured are rated freely.
GNUGO_ELO_9X9: dict[int, float] = {1: 0.0, 5: 14.0, 10: 114.0}

_GNUGO = re.compile(r"gnugo-l(\d+)")


def _gnugo_level(name: str) -> int | None:
    match = _GNUGO.fullmatch(name)
    return None if match is None else int(match.group(1))


def check_anchor(name: str) -> str:
    """``name`` if it names an anchor (table above), else UsageError saying what does."""
    level = _gnugo_level(name)
    if level is not None and 1 <= level <= 10:
        return name
    if name.startswith("gtp:") and name[4:].strip():
        return name
    raise UsageError(
        f"anchor {name!r}: use gnugo-l1 .. gnugo-l10 (GnuGo at that level) or gtp:COMMAND"
    )


def gnugo_spec(level: int) -> str:
    """The player spec of GnuGo at ``level`` under our rules."""
    return f"gtp:gnugo {GNUGO_FLAGS} --level {level}"


def anchor_spec(name: str) -> str:
    """The player spec (`tasks.players` grammar) of anchor ``name`` ("random" included: the
    baseline every run plays, not configurable as an anchor)."""
    if name == "random":
        return name
    level = _gnugo_level(check_anchor(name))
    return name if level is None else gnugo_spec(level)


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


def anchor_label(name: str) -> str:
    """Anchor ``name``'s player name in the results store, its records and its metrics
    ("random", "gnugo-l1"; for ``gtp:COMMAND`` the engine's `engine_name`)."""
    spec = anchor_spec(name)
    return spec if spec == "random" else engine_name(shlex.split(spec[4:]))


def anchor_program(name: str) -> str:
    """The program anchor ``name`` runs (to tell a user what to install)."""
    return anchor_spec(name)[4:].split()[0]


def anchor_elo(name: str, board_size: int) -> float | None:
    """The fixed Elo of anchor ``name`` on ``board_size``, or None when it is rated freely."""
    level = _gnugo_level(name)
    if level is None or board_size != 9:
        return None
    return GNUGO_ELO_9X9.get(level)


def fixed_elos(anchors: Sequence[str], board_size: int) -> dict[str, float]:
    """The anchors among ``anchors`` with a fixed Elo on ``board_size``, by player name."""
    fixed = {anchor_label(a): anchor_elo(a, board_size) for a in anchors}
    return {name: elo for name, elo in fixed.items() if elo is not None}


def elo_scale(fixed: dict[str, float], players: Iterable[str]) -> str:
    """Which player a fit over ``players`` puts where: the fixed anchor (of ``fixed``) nearest
    0 among those that played ("gnugo-l1 = 0"), else the random player's origin."""
    played = [name for name in fixed if name in set(players)]
    if not played:
        return "random = 0"
    origin = min(played, key=lambda name: abs(fixed[name]))
    return f"{origin} = {fixed[origin]:.0f}"
