"""Pictures of an iteration's play for the MLflow UI, so that a user sees how the play changes
from one iteration to the next without opening an SGF viewer.

Each iteration's MLflow run gets two SVG pictures (`tabula.diagram`, the final position with
move numbers and the result) under ``pictures/``:

* ``selfplay.svg``: the first game of the iteration's SGF sample (``selfplay.sgf_sample``; the
  game of worker 0 with the lowest index), a game of the network against itself;
* ``anchor-<name>.svg``: the first game of the match against the last anchor of
  ``evaluation.anchors`` that the iteration played, the network against a fixed player. An
  iteration that played no anchor shows its first gate game instead, ``gate.svg``.

A stage whose games wrote no SGF (a sample of 0) has no picture; nothing else is missing.
"""

from __future__ import annotations

from pathlib import Path

from tabula.diagram import game_svg
from tabula.sgf import read_sgf
from tasks.run.layout import RunLayout
from tasks.run.records import EvaluationRecord


def selfplay_pictures(layout: RunLayout, i: int) -> dict[str, str]:
    """``{"pictures/selfplay.svg": SVG}`` for iteration ``i``, or {} when it kept no SGF."""
    first = _first_sgf(layout.selfplay(i))
    if first is None:
        return {}
    return {"pictures/selfplay.svg": game_svg(read_sgf(first.read_bytes()), f"iteration {i}")}


def evaluation_pictures(layout: RunLayout, i: int, evaluation: EvaluationRecord) -> dict[str, str]:
    """``{"pictures/anchor-<name>.svg": SVG}`` (or ``gate.svg``) for iteration ``i``."""
    for name, match in reversed(evaluation.anchors.items()):
        first = None if match.sgf_dir is None else _first_sgf(layout.project / match.sgf_dir)
        if first is not None:
            title = f"iteration {i} vs {name}"
            return {f"pictures/anchor-{name}.svg": game_svg(read_sgf(first.read_bytes()), title)}
    first = _first_sgf(layout.gate(i))
    if first is None:
        return {}
    return {"pictures/gate.svg": game_svg(read_sgf(first.read_bytes()), f"iteration {i} gate")}


def _first_sgf(folder: Path) -> Path | None:
    """The first SGF under ``folder`` in name order (game ids sort in play order)."""
    return min(folder.rglob("*.sgf"), default=None)
