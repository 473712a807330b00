"""Gating: does a candidate checkpoint replace the best player?

Two rules, fed one game at a time by the arena through ``Gate`` so it can stop early:

- Fixed games (the paper, Methods "Evaluator"): play ``games`` games (paper: 400) and promote
  if the candidate's win rate is strictly greater than ``threshold`` (paper: 55%).
- SPRT (as Leela Zero gates its networks): Wald's sequential probability ratio test of
  H0: candidate is ``elo0`` stronger (0) against H1: ``elo1`` stronger (35), error rates
  alpha = beta = 0.05. After each game the log-likelihood ratio is compared with
  ln(beta / (1 - alpha)) (accept H0: keep the best) and ln((1 - beta) / alpha) (accept H1:
  promote). If neither is reached after ``games`` games, the fixed threshold decides.

The SPRT here is binomial on the score: a game scores y in {0, 0.5, 1} for the candidate and
contributes y ln(p1 / p0) + (1 - y) ln((1 - p1) / (1 - p0)), with p_k the expected score at
elo_k on the logistic Elo scale of ``tabula.elo``. Without draws (half-point komi) this is the
exact Wald SPRT for a Bernoulli win rate. Draws (jigo with integer komi) score half a win, the
same as in the Elo fit; a draw has less variance than the Bernoulli model assumes, so the test
is then slightly conservative (errors at most about alpha and beta, a few more games).
Leela Zero's own validation tool uses cutechess's trinomial BayesElo model, which needs at least
one draw, win and loss to give a ratio at all; Go with half-point komi never draws, so we do not.

Scores are from the candidate's side: 1 candidate won, 0 it lost, 0.5 draw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from tabula.elo import expected_score
from tabula.errors import TabulaError

if TYPE_CHECKING:
    from tabula.config import EvaluationConfig


class GateError(TabulaError, ValueError):
    """Bad gate settings or a misuse of a Gate (a result after the decision, ...)."""


def win_rate_interval(wins: float, games: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a win rate of ``wins`` (draws as 0.5) out of ``games``.

    Returns (low, high) within [0, 1]; (0.0, 1.0) when no game was played.
    """
    if games < 0 or not 0.0 <= wins <= games:
        raise GateError(f"need 0 <= wins <= games, got wins={wins}, games={games}")
    if not 0.0 < confidence < 1.0:
        raise GateError(f"confidence must be in (0, 1), got {confidence}")
    if games == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = wins / games
    denominator = 1.0 + z * z / games
    centre = (p + z * z / (2.0 * games)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / games + z * z / (4.0 * games * games))
    # Mathematically low <= p <= high, with equality at p = 0 and 1; clamp away rounding.
    return min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))


@dataclass(frozen=True)
class GateConfig:
    """Gate settings; defaults are the paper's fixed gate plus Leela Zero's SPRT numbers.

    games: games in the fixed gate; the SPRT's maximum (paper: 400).
    threshold: promote when the win rate is strictly above this (paper: 0.55).
    sprt: stop early with the SPRT instead of always playing ``games`` games.
    elo0, elo1: the SPRT's hypotheses, candidate minus best in Elo (Leela Zero: 0 and 35).
    alpha, beta: the SPRT's false-promotion and false-rejection rates (Leela Zero: 0.05).
    """

    games: int = 400
    threshold: float = 0.55
    sprt: bool = False
    elo0: float = 0.0
    elo1: float = 35.0
    alpha: float = 0.05
    beta: float = 0.05

    @classmethod
    def from_evaluation(cls, evaluation: EvaluationConfig) -> GateConfig:
        """The gate a run's config asks for: its ``evaluation.gating_games``,
        ``gating_threshold`` and ``sprt*`` settings (the one place they are read)."""
        e = evaluation
        return cls(
            games=e.gating_games,
            threshold=e.gating_threshold,
            sprt=e.sprt,
            elo0=e.sprt_elo0,
            elo1=e.sprt_elo1,
            alpha=e.sprt_alpha,
            beta=e.sprt_beta,
        )


class GateReason(StrEnum):
    """Why a gate decided; the value is what ``gate.json`` and the CLI show."""

    THRESHOLD = "threshold"  # the fixed gate played its games; the threshold decided
    SPRT_ACCEPT_H1 = "sprt-accept-h1"  # the SPRT stopped: promote
    SPRT_ACCEPT_H0 = "sprt-accept-h0"  # the SPRT stopped: keep the best
    MAX_GAMES = "max-games"  # the SPRT was undecided after the maximum; the threshold decided
    OFF = "gating-off"  # evaluation.gating is false: no games, every candidate is promoted


@dataclass(frozen=True)
class GateDecision:
    """The evidence and verdict of one gate.

    reason: why it decided (`GateReason`).
    win_rate: (wins + draws / 2) / games; [low, high]: its 95% Wilson interval.
    llr, llr_bounds: the SPRT's log-likelihood ratio and (lower, upper) bounds; None without SPRT.
    """

    promoted: bool
    reason: GateReason
    wins: int
    losses: int
    draws: int
    games: int
    win_rate: float
    low: float
    high: float
    llr: float | None
    llr_bounds: tuple[float, float] | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the reason becomes its text, the bounds a list)."""
        out = asdict(self)
        out["reason"] = str(self.reason)
        out["llr_bounds"] = None if self.llr_bounds is None else list(self.llr_bounds)
        return out


def ungated() -> GateDecision:
    """The decision when gating is off (``evaluation.gating: false``): promoted, no games."""
    return GateDecision(True, GateReason.OFF, 0, 0, 0, 0, 0.0, 0.0, 1.0, None, None)


def _validated(config: GateConfig) -> GateConfig:
    # Plain int, float and bool whatever came in (numpy scalars, an int for a float): each
    # field as the type of its default.
    defaults = asdict(GateConfig())
    c = GateConfig(
        **{name: type(default)(getattr(config, name)) for name, default in defaults.items()}
    )
    if c.games < 1:
        raise GateError(f"gate games must be >= 1, got {c.games}")
    if not 0.0 <= c.threshold < 1.0:
        raise GateError(f"gate threshold must be in [0, 1), got {c.threshold}")
    if c.sprt:
        if not c.elo0 < c.elo1:
            raise GateError(f"SPRT needs elo0 < elo1, got {c.elo0} and {c.elo1}")
        if not (0.0 < c.alpha < 0.5 and 0.0 < c.beta < 0.5):
            raise GateError(f"SPRT alpha and beta must be in (0, 0.5), got {c.alpha}, {c.beta}")
    return c


class Gate:
    """Streaming gate: ``update`` with each candidate score until ``decided``, then ``decision``.

    Results after the decision are refused (GateError): the verdict never changes once given.
    Aborted games (no result) are not fed in.
    """

    def __init__(self, config: GateConfig | None = None) -> None:
        self.config = _validated(config if config is not None else GateConfig())
        self.wins = self.losses = self.draws = 0
        self.llr = 0.0
        c = self.config
        p0, p1 = expected_score(c.elo0, 0.0), expected_score(c.elo1, 0.0)
        self._llr_win = math.log(p1 / p0)
        self._llr_loss = math.log((1.0 - p1) / (1.0 - p0))
        self.llr_bounds = (math.log(c.beta / (1.0 - c.alpha)), math.log((1.0 - c.beta) / c.alpha))
        self._reason: GateReason | None = None

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    @property
    def score(self) -> float:
        """Candidate's points: wins + draws / 2."""
        return self.wins + 0.5 * self.draws

    @property
    def decided(self) -> bool:
        return self._reason is not None

    def update(self, result: float) -> None:
        """Record one game: 1 candidate won, 0 it lost, 0.5 draw."""
        if self.decided:
            raise GateError(f"gate already decided ({self._reason}); no more results")
        if result == 1:
            self.wins += 1
        elif result == 0:
            self.losses += 1
        elif result == 0.5:
            self.draws += 1
        else:
            raise GateError(f"a game result is 1, 0 or 0.5 for the candidate, got {result!r}")
        self.llr += result * self._llr_win + (1.0 - result) * self._llr_loss
        self._reason = self._stop_reason()

    def _stop_reason(self) -> GateReason | None:
        if self.config.sprt:
            # Wald's rule: stop at the first crossing, in either direction.
            if self.llr >= self.llr_bounds[1]:
                return GateReason.SPRT_ACCEPT_H1
            if self.llr <= self.llr_bounds[0]:
                return GateReason.SPRT_ACCEPT_H0
            return GateReason.MAX_GAMES if self.games >= self.config.games else None
        return GateReason.THRESHOLD if self.games >= self.config.games else None

    def decision(self) -> GateDecision:
        """The verdict; GateError if the gate has not decided yet."""
        if self._reason is None:
            raise GateError(f"gate undecided after {self.games} games")
        win_rate = self.score / self.games
        if self._reason is GateReason.SPRT_ACCEPT_H1:
            promoted = True
        elif self._reason is GateReason.SPRT_ACCEPT_H0:
            promoted = False
        else:
            # Strictly greater (paper: "wins by a margin of > 55%"); the correctly rounded
            # quotient of an exact 55% equals the float 0.55, so it is not promoted.
            promoted = win_rate > self.config.threshold
        low, high = win_rate_interval(self.score, self.games)
        return GateDecision(
            promoted=promoted,
            reason=self._reason,
            wins=self.wins,
            losses=self.losses,
            draws=self.draws,
            games=self.games,
            win_rate=win_rate,
            low=low,
            high=high,
            llr=self.llr if self.config.sprt else None,
            llr_bounds=self.llr_bounds if self.config.sprt else None,
        )


def decide(results: Iterable[float], config: GateConfig | None = None) -> GateDecision:
    """Feed candidate scores to a fresh Gate until it decides; extra results are not read.

    GateError if the results run out first.
    """
    gate = Gate(config)
    for result in results:
        gate.update(result)
        if gate.decided:
            return gate.decision()
    raise GateError(f"results ran out after {gate.games} games, before the gate decided")
