"""Opening sets: seeded, legal, balanced by construction, distinct up to symmetry, paired."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.errors import UsageError
from tabula.features import transform_move
from tabula.go.coords import to_gtp
from tabula.go.game import Game
from tabula.openings import (
    OPENINGS_SEED,
    _canonical,
    match_openings,
    opening_for_game,
    opening_region,
    opening_set,
)


def test_same_seed_same_set_and_another_seed_another() -> None:
    a = opening_set(9, 40, 2, seed=1)
    assert a == opening_set(9, 40, 2, seed=1)
    assert a != opening_set(9, 40, 2, seed=2)


@pytest.mark.parametrize(("size", "plies"), [(9, 2), (9, 4), (7, 2), (13, 4), (19, 6)])
def test_openings_are_legal_interior_and_leave_black_to_move(size: int, plies: int) -> None:
    region = set(opening_region(size).tolist())
    for moves in opening_set(size, 12, plies, seed=7):
        assert len(moves) == plies and set(moves) <= region
        game = Game(size)
        for move in moves:
            game.play(move)  # raises on an illegal move
        assert game.to_play == 1


def test_the_region_is_the_third_line_and_up_on_9x9() -> None:
    names = {to_gtp(int(p), 9) for p in opening_region(9)}
    assert len(names) == 25 and {"C3", "G7", "E5", "C7"} <= names
    assert not names & {"B2", "A1", "J9", "E2", "H5"}


def test_no_two_openings_are_one_position_seen_in_a_mirror() -> None:
    openings = opening_set(9, 60, 2, seed=3)
    assert len({_canonical(o, 9) for o in openings}) == 60
    # and the canonical key really is invariant: every transform of an opening maps to it
    for moves in openings[:5]:
        for k in range(8):
            assert _canonical([transform_move(k, m, 9) for m in moves], 9) == _canonical(moves, 9)


def test_games_2k_and_2k_plus_1_share_an_opening_and_the_set_cycles() -> None:
    openings = opening_set(9, 3, 2, seed=0)
    got = [opening_for_game(openings, g) for g in range(8)]
    assert got[0] == got[1] == openings[0] and got[2] == got[3] == openings[1]
    assert got[6] == got[7] == openings[0]


def test_zero_plies_means_the_empty_board() -> None:
    assert opening_set(9, 4, 0, seed=0) == ((),) * 4


@pytest.mark.parametrize(
    ("args", "words"),
    [((9, 5, 3, 0), "even"), ((9, 0, 2, 0), "at least one"), ((5, 50, 2, 0), "distinct")],
)
def test_impossible_requests_are_one_line_errors(args, words: str) -> None:
    with pytest.raises(UsageError, match=words) as info:
        opening_set(*args)
    assert "\n" not in str(info.value)


def test_a_match_gets_one_opening_per_pair_and_all_a_small_board_has() -> None:
    assert match_openings(9, 7, 2) == opening_set(9, 4, 2, OPENINGS_SEED)
    small = match_openings(5, 100, 2)  # 3x3 opening points: ~15 classes, fewer than 50 pairs
    assert 5 <= len(small) < 50 and len({_canonical(o, 5) for o in small}) == len(small)
    assert match_openings(9, 10, 0) == ((),) * 5
    with pytest.raises(UsageError, match="no 12-move opening fits"):
        match_openings(5, 4, 12)  # more moves than the 9 opening points hold
    with pytest.raises(UsageError, match="distinct"):
        opening_set(5, 2, 12, seed=0)


def test_two_ply_openings_spread_over_the_region() -> None:
    first = np.array([o[0] for o in opening_set(9, 50, 2, seed=11)])
    assert len(set(first.tolist())) >= 15  # not one favourite first move
