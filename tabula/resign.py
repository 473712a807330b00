"""Resignation and its automatic threshold (Silver et al. 2017, Methods "Self-play").

The rule: the side to move resigns when its root value AND its best child's value (the Q of
the most visited move) are both below ``v_resign``, i.e. when
``max(root value, best child value) < v_resign``. Values are from the side to move, in
[-1, 1]. `should_resign` states it for one position, `resign_mask` for the many positions
of one self-play step (what `tabula.selfplay` calls).

Calibration: a fraction of self-play games (paper 10%) is played with resignation disabled.
For each of them the search still records ``m = max(root value, best child value)`` at every
move; a `ResignTrace` keeps, per side, the minimum of m over that side's moves (the lowest
point where a threshold would have made it resign) and the final winner.

A game is a *false positive* at threshold v when a side that did not lose (the winner, or
either side of a draw) has its minimum below v: it would have resigned a game it went on to
win or draw (paper: "games that could have been won if AlphaGo had not resigned"). The
count is conservative (it does not ask whether the loser would have resigned first), and so
monotone in v. ``false_positive_rate = false positives / resign-disabled games``.

`calibrate` returns that rate at the current threshold and the next threshold: the highest v
with a rate at most the target (paper 5%), i.e. with at most ``floor(target * games)`` false
positives. Below ``min_games`` traces (default ``ceil(1 / target)``, the fewest for which a
single false positive can be within the target) the estimate is too coarse and the threshold
is kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


def should_resign(root_value: float, best_child_value: float, v_resign: float | None) -> bool:
    """The paper's rule: both values below ``v_resign`` (None: never resign)."""
    return v_resign is not None and root_value < v_resign and best_child_value < v_resign


def resign_mask(
    root_values: np.ndarray,
    best_child_values: np.ndarray,
    v_resign: float | None,
    disabled: np.ndarray,
) -> np.ndarray:
    """`should_resign` for k positions at once, as self-play applies it after each search.

    root_values, best_child_values: [k], from the side to move; disabled: bool[k], the
    position's game plays to the end (resignation off for calibration). Returns bool[k].
    """
    if v_resign is None:
        return np.zeros(len(root_values), dtype=bool)
    below = (np.asarray(root_values) < v_resign) & (np.asarray(best_child_values) < v_resign)
    return ~np.asarray(disabled, dtype=bool) & below


@dataclass(frozen=True)
class ResignTrace:
    """One resign-disabled game, as calibration needs it.

    min_black / min_white: the lowest max(root value, best child value) seen by that side
    at its moves (``inf`` if it never moved); winner: +1 black, -1 white, 0 draw.
    """

    min_black: float
    min_white: float
    winner: int

    @classmethod
    def from_search(
        cls,
        to_play: Sequence[int] | np.ndarray,
        root_values: Sequence[float] | np.ndarray,
        best_child_values: Sequence[float] | np.ndarray,
        winner: int,
    ) -> ResignTrace:
        """From the per-move side to move and the two values (side to move's view)."""
        side = np.asarray(to_play)
        m = np.maximum(np.asarray(root_values, np.float64), np.asarray(best_child_values))
        lows = [float(m[side == s].min()) if np.any(side == s) else math.inf for s in (1, -1)]
        return cls(lows[0], lows[1], int(winner))

    @property
    def lowest_non_loser(self) -> float:
        """The lowest value seen by a side that did not lose: the game is a false positive
        exactly at thresholds above this."""
        if self.winner > 0:
            return self.min_black
        if self.winner < 0:
            return self.min_white
        return min(self.min_black, self.min_white)

    def false_positive(self, v_resign: float) -> bool:
        return self.lowest_non_loser < v_resign

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (``None`` for a side that never moved)."""

        def plain(x: float) -> float | None:
            return None if math.isinf(x) else float(x)

        return {"min_black": plain(self.min_black), "min_white": plain(self.min_white),
                "winner": self.winner}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResignTrace:
        def value(x: float | None) -> float:
            return math.inf if x is None else float(x)

        return cls(value(data["min_black"]), value(data["min_white"]), int(data["winner"]))


class Calibration(NamedTuple):
    """Result of `calibrate`; unpacks as ``(v_resign_next, false_positive_rate)``."""

    v_resign: float | None
    false_positive_rate: float


def false_positive_rate(traces: Sequence[ResignTrace], v_resign: float) -> float:
    """False positives at ``v_resign`` over all resign-disabled games (NaN if none)."""
    if not traces:
        return math.nan
    return sum(t.false_positive(v_resign) for t in traces) / len(traces)


def calibrate(
    traces: Iterable[ResignTrace],
    v_resign: float | None,
    target: float = 0.05,
    min_games: int | None = None,
) -> Calibration:
    """The false-positive rate at the current ``v_resign`` and the next threshold: the highest
    v in [-1, 1] with ``false_positive_rate(traces, v) <= target`` (see the module docstring).

    ``v_resign`` None (resignation switched off) stays None. With fewer than ``min_games``
    traces the threshold is kept (the rate is still reported; NaN without traces).
    """
    traces = list(traces)
    if not 0 <= target < 1:
        raise ValueError(f"false-positive target must be in [0, 1), got {target}")
    if v_resign is None:
        return Calibration(None, math.nan)
    current = false_positive_rate(traces, v_resign)
    if min_games is None:
        min_games = math.ceil(1 / target) if target > 0 else 1
    if len(traces) < max(min_games, 1):
        return Calibration(v_resign, current)
    # FP(v) counts the games whose lowest non-loser value is < v. Allowing k of them, the
    # highest threshold is the (k+1)-th smallest such value: games tied with it are safe.
    lows = np.sort([t.lowest_non_loser for t in traces])
    allowed = math.floor(target * len(traces) + 1e-9)  # 0.29 * 100 is 28.999999999999996
    v_next = float(np.clip(lows[allowed], -1.0, 1.0))
    return Calibration(v_next, current)


def calibrate_samples(
    samples: Iterable[dict[str, Any]],
    v_resign: float | None,
    target: float = 0.05,
    min_games: int | None = None,
) -> Calibration:
    """`calibrate` on `ResignTrace.to_dict()` samples (what self-play workers report)."""
    return calibrate([ResignTrace.from_dict(s) for s in samples], v_resign, target, min_games)
