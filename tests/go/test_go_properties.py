"""Invariants over many random games on 5x5, 9x9 and 19x19.

Each game is played by ``Game`` with moves uniform among its legal mask, then checked
against the reference rules of ``tests.helpers.go`` (sets, no numba): the incremental state
equals a recompute from scratch, the mask agrees with ``play``, no position repeats,
score and legality are invariant under the 8 symmetries, and undo restores exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from tabula.features import apply_policy, transform_move
from tabula.go import Game, IllegalMoveError
from tabula.go.hashset import hashset_contains, hashset_count
from tests.helpers.go import random_game, ref_area, ref_hash, ref_ownership, ref_play

# (size, games in the default run, games under -m slow)
SIZES = [(5, 2000, 10000), (9, 300, 1500), (19, 30, 100)]


def _games(N: int, n: int, seed: int) -> list[Game]:
    rng = np.random.default_rng([seed, N])
    return [random_game(N, rng) for _ in range(n)]


def check_against_reference(g: Game) -> None:
    """Replay g's moves in the reference rules: every board, hash and the set agree, and
    no position repeats (passes excepted)."""
    N, M = g.size, g.size**2
    board = tuple([0] * M)
    seen = {board: ref_hash(board, N)}
    replay = Game(N)
    for color, move in g.history:
        board = ref_play(board, move, color, N)
        assert board is not None, f"reference refuses {move} for {color}"
        if move != M:
            assert board not in seen, "a position repeated"
            seen[board] = ref_hash(board, N)
        replay.play(move, color)
        assert (replay.board.ravel() == board).all()
        assert replay.position_hash == seen[board]
    assert (g.board.ravel() == board).all()
    assert g.score() == ref_area(board, N) - g.komi
    owner = g.ownership()
    assert owner.tolist() == ref_ownership(board, N)
    assert int(owner.sum()) == ref_area(board, N)
    table = g.hash_set()
    assert hashset_count(table) == len(seen) == len(set(seen.values()))
    assert all(hashset_contains(table, np.uint64(h)) for h in seen.values())


def check_mask_agrees_with_play(g: Game, rng: np.random.Generator, full: bool) -> None:
    """At the final position and a few earlier ones: every masked move plays and every
    unmasked non-pass move raises (all moves if ``full``, else a sample)."""
    M = g.size**2
    g = g.copy()
    for _ in range(3):
        mask = g.legal_mask()
        assert mask[M]
        moves = range(M + 1) if full else rng.choice(M + 1, size=12, replace=False)
        for m in moves:
            m = int(m)
            if mask[m]:
                g.play(m)
                g.undo()
            else:
                with pytest.raises(IllegalMoveError):
                    g.play(m)
            assert g.is_legal(m) == bool(mask[m])
        for _ in range(min(g.move_number, int(rng.integers(1, 20)))):
            g.undo()


def check_symmetries(g: Game) -> None:
    """Play the transformed move list under each symmetry: same legality, score, masks."""
    N = g.size
    for k in range(1, 8):
        t = Game(N)
        for color, move in g.history:
            mask = t.legal_mask()
            assert mask[transform_move(k, move, N)]
            t.play(transform_move(k, move, N), color)
        assert t.score() == g.score()
        expected = apply_policy(k, g.legal_mask())
        assert (t.legal_mask() == expected).all()


def check_undo(g: Game) -> None:
    """Undo back to the start: every earlier state (board, hash, set, counters, mask) is
    restored exactly."""
    replay = Game(g.size)
    states = []
    for color, move in g.history:
        states.append(_state(replay))
        replay.play(move, color)
    for expected in reversed(states):
        replay.undo()
        got = _state(replay)
        for a, b in zip(got, expected, strict=True):
            assert np.array_equal(a, b)


def _state(g: Game) -> tuple:
    return (
        g.board, g.position_hash, g.to_play, g.move_number, g.passes, len(g.history),
        np.sort(g.hash_set()[g.hash_set() != 0]), g.legal_mask(), g.score(),
    )  # fmt: skip


@pytest.mark.parametrize("N,n,_", SIZES)
def test_random_games_match_the_reference_rules(N: int, n: int, _: int) -> None:
    for g in _games(N, n, seed=1):
        check_against_reference(g)
        assert g.is_over()


def test_play_goes_on_after_the_end_and_the_set_grows() -> None:
    # The set is sized for 2*N*N moves; GTP may keep playing past the end (ten times more).
    rng = np.random.default_rng(7)
    g = Game(5)
    while g.move_number < 500:
        moves = np.flatnonzero(g.legal_mask())
        g.play(int(moves[rng.integers(len(moves))]))
    assert g.is_over()
    check_against_reference(g)
    check_undo(g)


@pytest.mark.parametrize("N,n,_", SIZES)
def test_legal_mask_agrees_with_play(N: int, n: int, _: int) -> None:
    rng = np.random.default_rng(2)
    for i, g in enumerate(_games(N, max(n // 10, 3), seed=2)):
        check_mask_agrees_with_play(g, rng, full=i % 5 == 0)


@pytest.mark.parametrize("N,n,_", SIZES)
def test_symmetric_games_have_equal_scores_and_masks(N: int, n: int, _: int) -> None:
    for g in _games(N, max(n // 30, 1), seed=3):
        check_symmetries(g)


@pytest.mark.parametrize("N,n,_", SIZES)
def test_undo_restores_every_state(N: int, n: int, _: int) -> None:
    for g in _games(N, max(n // 30, 1), seed=4):
        check_undo(g)


@pytest.mark.slow
@pytest.mark.parametrize("N,_,n", SIZES)
def test_many_more_random_games(N: int, _: int, n: int) -> None:
    rng = np.random.default_rng(5)
    for i, g in enumerate(_games(N, n, seed=5)):
        check_against_reference(g)
        if i % 10 == 0:
            check_mask_agrees_with_play(g, rng, full=i % 50 == 0)
        if i % 100 == 0:
            check_symmetries(g)
            check_undo(g)
