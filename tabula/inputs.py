"""The planes a network takes: the 17 of a position, and those derived from it.

Self-play, the gate, analysis and training all give a network the 17 planes of
`tabula.features`; the planes its `Inputs` names are derived from them here, in the one place,
so that every caller feeds a network what it was trained on. The ladder kernels import the
rules (`tabula.go`), which import `tabula.features`: hence a module of its own.
"""

from __future__ import annotations

import numpy as np

from tabula.features import (
    LADDER_PLANES,
    LIBERTY_PLANES,
    NUM_PLANES,
    Inputs,
    fill_liberty_planes,
)
from tabula.ladders import fill_ladder_planes

__all__ = ["Inputs", "with_inputs"]


def with_inputs(planes: np.ndarray, inputs: Inputs) -> np.ndarray:
    """``planes`` ([B, 17, N, N]) with the derived planes ``inputs`` names after them (uint8),
    or as they are (contiguous) when it names none."""
    if not inputs.liberties and not inputs.ladders:
        return np.ascontiguousarray(planes)
    b, _, n, _ = planes.shape
    out = np.empty((b, inputs.planes, n, n), dtype=np.uint8)
    out[:, :NUM_PLANES] = planes  # (cast to uint8 once; the fills read its planes 0 and 8)
    at = NUM_PLANES
    if inputs.liberties:
        fill_liberty_planes(out, out[:, at : at + LIBERTY_PLANES])
        at += LIBERTY_PLANES
    if inputs.ladders:
        fill_ladder_planes(out, out[:, at : at + LADDER_PLANES])
    return out
