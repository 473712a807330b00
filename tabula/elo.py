"""Elo ratings: a Bayesian Bradley–Terry fit over every game ever recorded (BayesElo-style).

Model (paper, Methods "Evaluation"; the BayesElo program): player a beats player b with

    P(a beats b) = 1 / (1 + 10 ** ((e(b) - e(a)) / 400))
                 = 1 / (1 + exp(s * (e(b) - e(a)))),   s = ln(10) / 400.

The paper writes exp(c_elo (e(b) - e(a))) with "the standard constant c_elo = 1/400"; read with a
natural exp that would make a 200-point gap only 62%. The standard Elo scale, which BayesElo
uses, is base 10: a 200-point gap is a 76% expected score (1 / (1 + 10 ** -0.5) = 0.760, the
paper's "≈ 75%"), and that is the scale used here.
A draw (jigo, possible with integer komi) counts as half a win for each side, so the likelihood
of one game with score y in {0, 0.5, 1} for a is P^y (1 - P)^(1 - y). Colour is not modelled:
black and white are just the two players (first-move advantage and komi are averaged into the
ratings of players who played both colours about equally often, as our arena schedules).

Prior: like BayesElo, a few virtual draws keep every rating finite. Each player gets
``prior_games`` virtual games, all drawn, against a virtual opponent rated at the mean of all
players. It shrinks ratings gently toward the mean, is translation invariant (so the anchor
alone fixes the origin), and keeps a player who won or lost every game, or a group that never
met the others, at a finite rating with a wide interval.

Intervals: the Laplace approximation. The covariance of the free ratings is the inverse Hessian
of the negative log posterior at its maximum, conditioned on the anchor (the anchor's own
interval has zero width). Without an anchor the mean rating is fixed instead.

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from tabula.errors import TabulaError

DEFAULT_ANCHOR = "random"
# Elo points -> natural-log odds: 10 ** (x / 400) == exp(ELO_TO_LOGIT * x).
ELO_TO_LOGIT = math.log(10.0) / 400.0


class RatingError(TabulaError, ValueError):
    """Bad input to the Elo fit (a malformed result, an anchor that never played)."""


class InvalidResultError(RatingError):
    """A game result that cannot be rated."""


class UnknownAnchorError(RatingError):
    """The anchor player named for the fit has no recorded games."""


@dataclass(frozen=True)
class GameResult:
    """One finished game: player names and the winner (+1 black won, -1 white won, 0 draw).

    ``reason`` is free text for the record ("score", "resign", "forfeit: illegal move").
    """

    black: str
    white: str
    winner: int
    reason: str = ""

    def __post_init__(self) -> None:
        if self.winner not in (-1, 0, 1):
            raise InvalidResultError(f"winner must be +1, -1 or 0, got {self.winner!r}")


@dataclass(frozen=True)
class Rating:
    """A player's fitted rating.

    elo: the posterior mode in Elo points; [low, high]: the Laplace interval at the requested
    confidence (default 95%), conditioned on the anchor; games: real games played (draws
    included); wins: games won, draws counted as 0.5.
    """

    player: str
    elo: float
    low: float
    high: float
    games: int
    wins: float


def expected_score(elo_a: float, elo_b: float) -> float:
    """Expected score of a against b: 1 / (1 + 10 ** ((elo_b - elo_a) / 400)), in (0, 1)."""
    return _sigmoid(ELO_TO_LOGIT * (float(elo_a) - float(elo_b)))


def _sigmoid(x: float) -> float:
    # The two branches never overflow: exp of a non-positive number only.
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _as_triple(result: tuple[str, str, float] | GameResult) -> tuple[str, str, float]:
    """(player a, player b, score of a in {0, 0.5, 1} or anywhere in [0, 1])."""
    if isinstance(result, GameResult):
        a, b, score = result.black, result.white, (result.winner + 1) / 2
    else:
        if len(result) != 3:
            raise InvalidResultError(f"expected (player_a, player_b, score_a), got {result!r}")
        a, b, score = result[0], result[1], result[2]
    if not (isinstance(a, str) and isinstance(b, str) and a and b):
        raise InvalidResultError(f"player names must be non-empty strings, got {a!r}, {b!r}")
    if a == b:
        raise InvalidResultError(f"player {a!r} cannot be rated on a game against itself")
    score = float(score)
    if not 0.0 <= score <= 1.0:  # also rejects NaN
        raise InvalidResultError(f"score of {a!r} vs {b!r} must be in [0, 1], got {score}")
    return a, b, score


@dataclass(frozen=True)
class _Tally:
    """Games summed per pair of players i[k] < j[k]: n[k] games, w[k] the score of i[k]."""

    players: list[str]
    i: np.ndarray
    j: np.ndarray
    n: np.ndarray
    w: np.ndarray


# (value, gradient, Hessian or its diagonal) of a term of the negative log posterior.
_Terms = tuple[float, np.ndarray, np.ndarray]


def _tally(results: Sequence[tuple[str, str, float] | GameResult]) -> _Tally:
    index: dict[str, int] = {}
    pairs: dict[tuple[int, int], list[float]] = {}
    for result in results:
        a, b, score = _as_triple(result)
        ia, ib = index.setdefault(a, len(index)), index.setdefault(b, len(index))
        if ia > ib:
            ia, ib, score = ib, ia, 1.0 - score
        counts = pairs.setdefault((ia, ib), [0.0, 0.0])
        counts[0] += 1.0
        counts[1] += score
    keys = list(pairs)
    values = np.array([pairs[k] for k in keys], dtype=np.float64).reshape(-1, 2)
    return _Tally(
        players=list(index),
        i=np.array([k[0] for k in keys], dtype=np.int64),
        j=np.array([k[1] for k in keys], dtype=np.int64),
        n=values[:, 0],
        w=values[:, 1],
    )


def _score_terms(d: np.ndarray, n: np.ndarray, w: np.ndarray) -> _Terms:
    """-log likelihood of score w out of n games at logit gap d, with its first two derivatives."""
    # log sigma(d) = -logaddexp(0, -d): stable for large |d|.
    f = float(np.sum(w * np.logaddexp(0.0, -d) + (n - w) * np.logaddexp(0.0, d)))
    p = 0.5 * (1.0 + np.tanh(0.5 * d))  # sigma(d) without overflow
    return f, n * p - w, n * p * (1.0 - p)


def _objective(x: np.ndarray, t: _Tally, prior_games: float) -> _Terms:
    """Negative log posterior at logit ratings x[K], its gradient [K] and Hessian [K, K]."""
    k = x.size
    f, g_d, h_d = _score_terms(x[t.i] - x[t.j], t.n, t.w)
    grad = np.zeros(k)
    np.add.at(grad, t.i, g_d)
    np.add.at(grad, t.j, -g_d)
    hess = np.zeros((k, k))
    np.add.at(hess, (t.i, t.i), h_d)
    np.add.at(hess, (t.j, t.j), h_d)
    np.add.at(hess, (t.i, t.j), -h_d)
    np.add.at(hess, (t.j, t.i), -h_d)
    # Prior: prior_games virtual draws of each player against the mean rating, c = C x with
    # C = I - 11^T / K (symmetric), so its gradient is C g_c and its Hessian C diag(h_c) C.
    centre = np.eye(k) - 1.0 / k
    c = centre @ x
    virtual = np.full(k, float(prior_games))
    f_p, g_c, h_c = _score_terms(c, virtual, 0.5 * virtual)
    grad += centre @ g_c
    hess += centre @ (h_c[:, None] * centre)
    return f + f_p, grad, hess


def _newton(
    t: _Tally, prior_games: float, fixed: dict[int, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mode x[K] (logits, x[p] = fixed[p] for the fixed players) and the full Hessian.

    The objective is convex and, with the prior, strictly convex once one coordinate is fixed,
    so damped Newton converges from the start in a handful of steps.
    """
    k = len(t.players)
    free = np.array([p for p in range(k) if p not in fixed], dtype=np.int64)
    x = np.zeros(k)
    for p, value in fixed.items():
        x[p] = value
    f, grad, hess = _objective(x, t, prior_games)
    for _ in range(200):
        step = np.zeros(k)
        if free.size:
            step[free] = -np.linalg.solve(hess[np.ix_(free, free)], grad[free])
        scale = 1.0
        while True:
            f_new, g_new, h_new = _objective(x + scale * step, t, prior_games)
            if f_new <= f + 1e-12 * abs(f) or scale < 1e-10:
                break
            scale *= 0.5
        x, f, grad, hess = x + scale * step, f_new, g_new, h_new
        if np.max(np.abs(scale * step)) < 1e-10:
            break
    return x, hess


def _laplace(
    x: np.ndarray, hess: np.ndarray, fixed: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Ratings (logits) and their Laplace standard deviations, conditioned on the fixed players.

    fixed: the anchors' indices (ratings as fitted, the anchors' intervals zero-width), or
    empty to fix the mean at 0 instead.
    """
    if fixed:
        free = np.array([p for p in range(len(x)) if p not in fixed], dtype=np.int64)
        cov = np.zeros_like(hess)
        if free.size:
            cov[np.ix_(free, free)] = np.linalg.inv(hess[np.ix_(free, free)])
        centred = x
    else:
        # Mean fixed: the posterior is translation invariant, so the Hessian's null space is the
        # all-ones vector and its pseudo-inverse is the covariance on the sum-zero subspace.
        cov = np.linalg.pinv(hess)
        centred = x - x.mean()
    return centred, np.sqrt(np.clip(np.diag(cov), 0.0, None))


def _record(t: _Tally) -> tuple[np.ndarray, np.ndarray]:
    """Games played [K] and points won [K] (draws 0.5) per player."""
    k = len(t.players)
    games, wins = np.zeros(k), np.zeros(k)
    np.add.at(games, t.i, t.n)
    np.add.at(games, t.j, t.n)
    np.add.at(wins, t.i, t.w)
    np.add.at(wins, t.j, t.n - t.w)
    return games, wins


def fit_ratings(
    results: Sequence[tuple[str, str, float]] | Sequence[GameResult],
    anchor: str | None = DEFAULT_ANCHOR,
    anchor_elo: float = 0.0,
    prior_games: float = 2.0,
    confidence: float = 0.95,
    anchors: Mapping[str, float] | None = None,
) -> dict[str, Rating]:
    """Fit Elo ratings to every result; returns {player: Rating}, empty for no results.

    results: GameResult(black, white, winner) or (player_a, player_b, score_a) with score_a in
    [0, 1] (1 a won, 0 b won, 0.5 draw). Aborted games (no result) must be left out by the caller.
    anchor: the player whose rating is fixed at ``anchor_elo`` (e.g. "gnugo" at a published
    value). If it has no games: the default "random" falls back to fixing the mean rating at
    ``anchor_elo``; any other name raises UnknownAnchorError. ``anchor=None`` fixes the mean.
    prior_games: virtual draws per player against the mean (> 0; BayesElo's prior is 2).
    anchors: several players fixed at once, {name: Elo} (e.g. GnuGo levels at their offsets
    from `bench/ladder.py`, so that every run's ratings share one scale); those without games
    are left out, and with none left the fit falls back to ``anchor`` / ``anchor_elo``.
    """
    if not prior_games > 0:
        raise RatingError(f"prior_games must be > 0, got {prior_games}")
    if not 0.0 < confidence < 1.0:
        raise RatingError(f"confidence must be in (0, 1), got {confidence}")
    t = _tally(results)
    if not t.players:
        return {}
    if anchor is not None and anchor not in t.players and anchor != DEFAULT_ANCHOR:
        shown = ", ".join(sorted(t.players)[:8])
        raise UnknownAnchorError(f"anchor player {anchor!r} has no games; players: {shown}")
    present = {t.players.index(a): e for a, e in (anchors or {}).items() if a in t.players}
    if present:
        x, hess = _newton(t, prior_games, {p: e * ELO_TO_LOGIT for p, e in present.items()})
        logits, sd = _laplace(x, hess, list(present))
        elo, sd = logits / ELO_TO_LOGIT, sd / ELO_TO_LOGIT
        elo[list(present)] = list(present.values())  # exactly, not through the logit scale
    else:
        fixed = t.players.index(anchor) if anchor is not None and anchor in t.players else None
        x, hess = _newton(t, prior_games, {0 if fixed is None else fixed: 0.0})
        logits, sd = _laplace(x, hess, [] if fixed is None else [fixed])
        elo, sd = logits / ELO_TO_LOGIT + anchor_elo, sd / ELO_TO_LOGIT
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    games, wins = _record(t)
    return {
        name: Rating(
            player=name,
            elo=float(elo[p]),
            low=float(elo[p] - z * sd[p]),
            high=float(elo[p] + z * sd[p]),
            games=int(round(games[p])),
            wins=float(wins[p]),
        )
        for p, name in enumerate(t.players)
    }
