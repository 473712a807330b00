"""Coordinates: round trips on every size and the corners tabled in coords' docstring."""

from __future__ import annotations

import pytest

from tabula.go.coords import (
    CoordinateError,
    from_flat,
    from_gtp,
    from_sgf,
    to_flat,
    to_gtp,
    to_sgf,
)

SIZES = range(5, 20)


@pytest.mark.parametrize("N", SIZES)
def test_round_trips_every_point_and_pass(N: int) -> None:
    M = N * N
    for i in range(M):
        assert to_flat(*from_flat(i, N), N) == i
        assert from_gtp(to_gtp(i, N), N) == i
        assert from_gtp(to_gtp(i, N).lower(), N) == i
        assert from_sgf(to_sgf(i, N), N) == i
    assert to_gtp(M, N) == "pass" and from_gtp("pass", N) == M and from_gtp("PASS", N) == M
    assert to_sgf(M, N) == "" and from_sgf("", N) == M and from_sgf("tt", N) == M
    assert len({to_gtp(i, N) for i in range(M)}) == M


def test_known_corners() -> None:
    assert from_gtp("A1", 9) == 72
    assert from_gtp("J9", 9) == 8
    assert from_gtp("A9", 9) == 0
    assert from_gtp("J1", 9) == 80
    assert from_gtp("T19", 19) == 18
    assert from_gtp("A1", 19) == 342
    assert to_gtp(0, 19) == "A19" and to_gtp(360, 19) == "T1"
    assert to_sgf(0, 9) == "aa" and to_sgf(8, 9) == "ia" and to_sgf(72, 9) == "ai"
    assert from_flat(72, 9) == (8, 0)


def test_gtp_skips_i() -> None:
    assert to_gtp(8, 9) == "J9"
    with pytest.raises(CoordinateError):
        from_gtp("I5", 9)


@pytest.mark.parametrize("bad", ["", "Z1", "A0", "A10", "K5", "A", "11", "A1x", "pas"])
def test_bad_gtp_vertex_raises_coordinate_error(bad: str) -> None:
    with pytest.raises(CoordinateError, match="9x9"):
        from_gtp(bad, 9)


def test_coordinate_error_is_a_value_error_with_one_line() -> None:
    with pytest.raises(ValueError) as info:
        from_gtp("Z99", 19)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", ["a", "abc", "zz", "ja"])
def test_bad_sgf_raises(bad: str) -> None:
    with pytest.raises(CoordinateError):
        from_sgf(bad, 9)


def test_flat_off_board_raises() -> None:
    with pytest.raises(CoordinateError):
        from_flat(81, 9)
    with pytest.raises(CoordinateError):
        to_flat(9, 0, 9)
