"""What ``tabula analysis`` runs: KataGo's JSON analysis engine (`tabula.katago`) over a
network player, on stdin/stdout or over the whole of one SGF game.

The network comes from ``--model`` and the rules, board size and search from the same places
as ``tabula gtp``'s (`tasks.gtp_setup`). An SGF review is the query that analyses every turn
of the record's main line (`sgf_query`): one answer a turn, turn 0 (the empty board) first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from tabula.errors import UsageError
from tabula.go import coords
from tabula.katago import Analyst, Defaults, respond, serve
from tabula.sgf import SgfError, read_sgf


def analyst_of(player: Any, spec: str) -> Analyst:
    """``player`` when it can analyse (a network with search), else one line (UsageError)."""
    if not (callable(getattr(player, "analysis", None)) and hasattr(player, "network_view")):
        raise UsageError(
            f"--model {spec}: analysis needs a network with search (a checkpoint path,"
            " mcts:PATH or models:/NAME@ALIAS)"
        )
    return player  # type: ignore[no-any-return]


def sgf_query(path: Path, defaults: Defaults, visits: int, ownership: bool) -> dict[str, Any]:
    """The analysis query that reviews every turn of the SGF game at ``path`` (its id: the
    file's name); UsageError for a file that cannot be read or is of another board size."""
    try:
        record = read_sgf(path.read_bytes())
    except OSError as error:
        raise UsageError(f"--sgf {path}: {error.strerror or error}") from None
    except SgfError as error:
        raise UsageError(f"--sgf {path}: {error}") from None
    if record.size != defaults.size:
        raise UsageError(
            f"--sgf {path}: a {record.size}x{record.size} game; this network plays "
            f"{defaults.size}x{defaults.size}"
        )
    moves = [["B" if c == 1 else "W", coords.to_gtp(m, record.size)] for c, m in record.moves]
    return {
        "id": path.name, "moves": moves, "rules": "tromp-taylor", "komi": record.komi,
        "boardXSize": record.size, "boardYSize": record.size,
        "analyzeTurns": list(range(len(moves) + 1)), "maxVisits": visits,
        "includeOwnership": ownership and defaults.aux,
    }  # fmt: skip


def run_analysis(
    analyst: Analyst, defaults: Defaults, inp: TextIO, out: TextIO, sgf: Path | None
) -> None:
    """Serve queries from ``inp`` (`tabula.katago.serve`), or answer the review of ``sgf``;
    an SGF whose moves the rules refuse is one line (UsageError)."""
    if sgf is None:
        serve(inp, out, defaults, analyst)
        return
    query = sgf_query(sgf, defaults, defaults.visits, ownership=True)
    for reply in respond(json.dumps(query), defaults, analyst):
        if "error" in reply:
            raise UsageError(f"--sgf {sgf}: {reply['error']}")
        out.write(json.dumps(reply, separators=(",", ":")) + "\n")
        out.flush()
