"""The evaluator's batched dihedral transforms, written against the definition it relies on:
k = 4*flip + rot means np.rot90 by rot quarter turns on the last two axes, then np.flip on the
last axis if flip (the permutations themselves come from tabula.features)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.evaluator import INVERSE, transform_planes, transform_policy
from tabula.features import symmetry_permutations

SIZES = [5, 7, 9, 13, 19]


def by_definition(grid: np.ndarray, k: int) -> np.ndarray:
    out = np.rot90(grid, k % 4, axes=(-2, -1))
    return np.flip(out, axis=-1) if k >= 4 else out


def policy_by_definition(pi: np.ndarray, k: int) -> np.ndarray:
    n = int(round((pi.shape[-1] - 1) ** 0.5))
    board = by_definition(pi[:-1].reshape(n, n), k).reshape(-1)
    return np.concatenate([board, pi[-1:]])


@pytest.mark.parametrize("n", SIZES)
def test_permutations_match_the_definition(n: int) -> None:
    perm = symmetry_permutations(n)
    assert perm.shape == (8, n * n + 1) and perm.dtype == np.int64
    pi = np.random.default_rng(n).random(n * n + 1)
    for k in range(8):
        np.testing.assert_array_equal(pi[perm[k]], policy_by_definition(pi, k))
        assert perm[k, -1] == n * n  # pass stays
        assert sorted(perm[k]) == list(range(n * n + 1))  # a permutation
    assert len({tuple(p) for p in perm}) == 8  # all distinct


def test_corner_goes_where_the_definition_says() -> None:
    # Top-left corner (flat 0) on 5x5: rot90 (counter-clockwise) brings it to the bottom-left.
    pi = np.zeros(26)
    pi[0] = 1.0
    assert np.argmax(transform_policy(pi[None], np.array([1]))[0]) == 20  # row 4, col 0
    assert np.argmax(transform_policy(pi[None], np.array([4]))[0]) == 4  # flip: top-right


@pytest.mark.parametrize("k", range(8))
def test_inverse_undoes_and_composes_to_identity(k: int) -> None:
    n = 7
    perm = symmetry_permutations(n)
    inv = INVERSE[k]
    grid = np.arange(n * n).reshape(n, n)
    np.testing.assert_array_equal(by_definition(by_definition(grid, k), inv), grid)
    np.testing.assert_array_equal(perm[k][perm[inv]], np.arange(n * n + 1))


@settings(max_examples=60, deadline=None)
@given(n=st.sampled_from(SIZES), b=st.integers(1, 12), seed=st.integers(0, 2**32 - 1))
def test_batched_transforms_match_per_position_and_round_trip(n: int, b: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    planes = (rng.random((b, 17, n, n)) < 0.5).astype(np.uint8)
    pi = rng.random((b, n * n + 1)).astype(np.float32)
    ks = rng.integers(0, 8, size=b)
    tp, tpi = transform_planes(planes, ks), transform_policy(pi, ks)
    for i, k in enumerate(ks):
        np.testing.assert_array_equal(tp[i], by_definition(planes[i], k))
        np.testing.assert_array_equal(tpi[i], policy_by_definition(pi[i], k))
    np.testing.assert_array_equal(transform_planes(tp, INVERSE[ks]), planes)
    np.testing.assert_array_equal(transform_policy(tpi, INVERSE[ks]), pi)


def test_plane_and_policy_transforms_agree() -> None:
    # A stone at the point a policy favours stays at the favoured point after any transform.
    n, rng = 9, np.random.default_rng(1)
    point = rng.integers(0, n * n, size=8)
    planes = np.zeros((8, 17, n, n), np.uint8)
    planes[np.arange(8), 0, point // n, point % n] = 1
    pi = np.zeros((8, n * n + 1), np.float32)
    pi[np.arange(8), point] = 1
    ks = np.arange(8)
    stones = transform_planes(planes, ks)[:, 0].reshape(8, -1).argmax(axis=1)
    np.testing.assert_array_equal(stones, transform_policy(pi, ks).argmax(axis=1))
