"""The search's value of a position: its win/loss value, and with ``search.score_utility`` a
share of the score it expects: KataGo's static score utility (Wu 2019, "Accelerating Self-Play
Learning in Go"; KataGo's staticScoreUtilityFactor), whose `score_value` is KataGo's smooth score
value centered at zero.

    utility = (v + w * score_value(s)) / (1 + w),  score_value(s) = 2/pi * atan(s / scale)

``v``: the win/loss value in [-1, 1] (the network's, or +1 / -1 / 0 of a finished game), ``s``:
the final score margin in points that the side to move expects (the network's score head, or a
finished game's Tromp-Taylor score with komi), ``w``: ``search.score_utility`` (0: the value
alone, the paper), ``scale``: ``search.score_scale`` points per line of the board (KataGo's 2.0:
18 points on 9x9). Dividing by ``1 + w`` keeps the utility in [-1, 1], the range every search
and record reads values in. Both the network's leaves (`model.evaluator.Evaluator`) and the
finished games of the search (`tabula.mcts.kernels`) are valued by it, so that a game's end is
neither preferred nor avoided for the score's share alone.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

TWO_OVER_PI = 2.0 / math.pi


@njit(cache=True, nogil=True, inline="always")
def utility(value: float, score: float, weight: float, scale: float) -> float:
    """One position's utility (module docstring); ``scale`` in points (per line times N)."""
    if weight == 0.0:
        return value
    return (value + weight * TWO_OVER_PI * math.atan(score / scale)) / (1.0 + weight)


def utilities(values: np.ndarray, scores: np.ndarray, weight: float, scale: float) -> np.ndarray:
    """`utility` of many positions: float32[B] from ``values`` and ``scores`` float[B]."""
    if weight == 0.0:
        return np.asarray(values, np.float32)
    score_value = TWO_OVER_PI * np.arctan(np.asarray(scores, np.float64) / scale)
    out = (np.asarray(values, np.float64) + weight * score_value) / (1.0 + weight)
    return out.astype(np.float32)
