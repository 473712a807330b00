"""Per-game random streams inside the search kernels (numba).

Every game slot owns 64-bit SplitMix64 states in ``uint64[G]`` arrays of the trees
(`tabula.mcts.trees`), seeded from the game's own ``np.random.Generator`` when the slot is
reset. So all of a game's randomness still derives from its one generator (docs/style.md,
principle 11), and a game draws the same numbers whatever other games share the batch, while
the per-move work (root noise, move choice) runs in numba over all slots at once instead of
one Python call per slot and draw.

- `next_u64`: SplitMix64 (Steele, Lea and Flood 2014; the seeding generator of xoshiro);
- `uniform`: a float64 in [0, 1) from the top 53 bits;
- `normal`: standard normal by Box-Muller;
- `gamma`: Gamma(alpha, 1) by Marsaglia and Tsang (2000), with the ``U^(1/alpha)`` boost for
  alpha < 1. Normalised gamma draws are a Dirichlet draw (how the root noise uses them);
- `gumbel`: standard Gumbel, -log(-log U) (the Gumbel search's root noise).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def next_u64(state, g) -> np.uint64:
    """The next 64 random bits of stream ``state[g]`` (the state advances)."""
    s = state[g] + np.uint64(0x9E3779B97F4A7C15)
    state[g] = s
    z = (s ^ (s >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True, inline="always")
def uniform(state, g) -> float:
    """Uniform on [0, 1), 53 random bits."""
    return float(next_u64(state, g) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def normal(state, g) -> float:
    """Standard normal (Box-Muller; the second variate of each pair is not kept)."""
    u1 = 1.0 - uniform(state, g)  # in (0, 1]: the log is finite
    u2 = uniform(state, g)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@njit(cache=True, nogil=True)
def gamma(state, g, alpha) -> float:
    """Gamma(alpha, 1) for alpha > 0 (Marsaglia-Tsang; alpha < 1 via G(alpha + 1) U^(1/alpha))."""
    boost = 1.0
    a = alpha
    if alpha < 1.0:
        boost = (1.0 - uniform(state, g)) ** (1.0 / alpha)
        a = alpha + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        x = normal(state, g)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = 1.0 - uniform(state, g)
        if u < 1.0 - 0.0331 * x**4 or math.log(u) < 0.5 * x * x + d * (1.0 - v + math.log(v)):
            return d * v * boost


@njit(cache=True, nogil=True)
def gumbel(state, g) -> float:
    """Standard Gumbel(0, 1): -log(-log U) with U strictly inside (0, 1)."""
    u = (float(next_u64(state, g) >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)
    return -math.log(-math.log(u))
