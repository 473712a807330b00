"""`bench.decided`: which positions KataGo's reduced visits would act on."""

from __future__ import annotations

import numpy as np

from bench.decided import decided_mask


def test_decided_needs_the_lookback_within_one_game() -> None:
    # Game "a": extreme for black at moves 0-2 (values from the side to move, so their signs
    # alternate; decided at 2), broken at 3, extreme for white at 4-6 and decided at 6. Game "b"
    # is extreme at its moves 0-1 only. Rows arrive shuffled and interleaved, as shards hold them.
    a = [0.95, -0.95, 0.95, 0.5, -0.99, 0.99, -0.95]
    b = [0.99, 0.99, 0.1]
    games = np.array(["a"] * len(a) + ["b"] * len(b))
    moves = np.array(list(range(len(a))) + list(range(len(b))), dtype=np.int32)
    values = np.array(a + b, dtype=np.float32)
    expected = np.zeros(len(values), dtype=bool)
    expected[[2, 6]] = True
    order = np.random.default_rng(0).permutation(len(values))
    got = decided_mask(games[order], moves[order], values[order], 0.9, 3)
    np.testing.assert_array_equal(got, expected[order])
    # One position is enough with a lookback of 1; the threshold is strict.
    got = decided_mask(games, moves, values, 0.95, 1)
    np.testing.assert_array_equal(np.flatnonzero(got), [4, 5, 7, 8])
    # Rows of fast searches left unrecorded: moves 0, 1 and 3 of game "c" are extreme, but move
    # 2 is missing, so move 3 has one recorded move before it, not two.
    gap = decided_mask(np.array(["c"] * 3), np.array([0, 1, 3]), np.full(3, 0.99), 0.9, 3)
    assert not gap.any()
    # A swing is not decided: each side in turn sure it wins (the same sign twice running).
    swing = decided_mask(np.array(["d"] * 3), np.arange(3), np.array([0.99, 0.99, -0.99]), 0.9, 2)
    np.testing.assert_array_equal(swing, [False, False, True])
