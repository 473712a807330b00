"""The played move after a search (``selfplay.move_choice``): the paper's tau -> 0 after the
opening, or KataGo's decaying temperature, while the policy target stays the search's; and
the recorded root value weighted by the visits (``selfplay.root_value: visits``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tabula.config import load_config
from tabula.mcts import BatchedMCTS, SearchParams
from tabula.selfplay import (
    GameRecord,
    SelfPlayParams,
    move_temperature,
    play_games,
    sample_policy,
)
from tests.helpers.mcts import hashed


def params(algorithm: str = "gumbel", **changes: object) -> SelfPlayParams:
    base = SelfPlayParams(
        board_size=5,
        komi=0.5,
        search=SearchParams(
            algorithm=algorithm, simulations=16, leaves_per_game=2, dirichlet_alpha=0.3, gumbel_m=8
        ),  # fmt: skip
        temperature_moves=3,
        v_resign=None,
        resign_disabled_fraction=0.0,
        concurrent_games=8,
        batch_size=64,
    )
    return dataclasses.replace(base, **changes)


def play(p: SelfPlayParams, n: int, seed: int = 0) -> list[GameRecord]:
    return sorted(play_games(hashed, p, n, np.random.default_rng(seed)), key=lambda r: r.index)


def test_the_temperature_decays_from_early_to_late_by_half_lives() -> None:
    # KataGo's self-play settings: 0.75 -> 0.15, a half-life of 19 moves on 19x19
    tau = move_temperature(np.array([0, 19, 38, 1000]), 19, 0.75, 0.15, 19.0)
    assert tau == pytest.approx([0.75, 0.45, 0.30, 0.15])
    # scaled to the board: on 9x9 a half-life is 19 * 9 / 19 = 9 moves
    assert move_temperature(np.array([9]), 9, 0.75, 0.15, 19.0) == pytest.approx([0.45])


def test_sampling_a_policy_at_a_temperature() -> None:
    policy = np.array([0.0, 0.2, 0.5, 0.3, 0.0])
    rng = np.random.default_rng(0)
    assert sample_policy(policy, 0.0, rng) == 2  # tau 0: the mode
    draws = np.bincount([sample_policy(policy, 1.0, rng) for _ in range(4000)], minlength=5)
    assert draws[0] == draws[4] == 0  # never a move without mass
    assert draws[1:4] / 4000 == pytest.approx([0.2, 0.5, 0.3], abs=0.03)
    cold = np.bincount([sample_policy(policy, 0.15, rng) for _ in range(2000)], minlength=5)
    assert cold[2] / 2000 > 0.9  # (0.5 / 0.3) ** (1 / 0.15): nearly always the mode


def test_after_the_opening_the_mode_of_pi_is_played() -> None:
    """move_choice opening under Gumbel: Sequential Halving's survivor (a sample) for the first
    temperature_moves moves, then pi''s mode; the search's targets are those of the default."""
    p = params(move_choice="opening")
    searched = play(params(), 6)
    for r in play(p, 6):
        for t in range(p.temperature_moves, r.length):
            assert r.pi[t, r.moves[t]] == r.pi[t].max()
    survivors_not_mode = sum(
        r.pi[t, r.moves[t]] < r.pi[t].max()
        for r in searched
        for t in range(p.temperature_moves, r.length)
    )
    assert survivors_not_mode > 0  # the default plays other moves: the switch changes play
    first = play(p, 6)[0]
    assert (first.moves[: p.temperature_moves] == searched[0].moves[: p.temperature_moves]).all()


@pytest.mark.parametrize("algorithm", ["gumbel", "puct"])
@pytest.mark.parametrize("choice", ["opening", "decay"])
def test_seeded_games_stay_distinct(algorithm: str, choice: str) -> None:
    """Many games of one seed: no two the same, whatever the schedule (the considered moves
    are still Gumbel-sampled or noised, and the opening or the temperature samples)."""
    records = play(params(algorithm, move_choice=choice), 24)
    histories = {tuple(r.moves.tolist()) for r in records}
    assert len(histories) == len(records)


def test_the_decaying_temperature_samples_pi() -> None:
    """move_choice decay under Gumbel: moves drawn from pi' at the schedule's temperature,
    so not always Sequential Halving's survivor and never a move pi' gives nothing."""
    decay = play(params(move_choice="decay"), 8)
    plain = play(params(), 8)
    assert any(
        (a.moves[: min(a.length, b.length)] != b.moves[: min(a.length, b.length)]).any()
        for a, b in zip(decay, plain, strict=True)
    )
    for r in decay:
        assert all(r.pi[t, m] > 0 for t, m in enumerate(r.moves))


def test_move_choice_from_config() -> None:
    default = SelfPlayParams.from_config(load_config(None))
    assert default.move_choice == "search" and not default.visits_root_value
    cfg = load_config(None, ["selfplay.move_choice=decay", "selfplay.move_temperature_early=0.8",
                             "selfplay.move_temperature_late=0.1",
                             "selfplay.move_temperature_halflife=10",
                             "selfplay.root_value=visits"])  # fmt: skip
    p = SelfPlayParams.from_config(cfg)
    assert (p.move_choice, p.temperature) == ("decay", (0.8, 0.1, 10.0))
    assert p.visits_root_value and not p.improved_root_value


@pytest.mark.parametrize("algorithm", ["gumbel", "puct"])
def test_the_visit_weighted_root_value_by_hand(algorithm: str) -> None:
    """sum_a N(a) Q(a) / sum_a N(a) over the root's children, recounted from the tree."""
    search = SearchParams(algorithm=algorithm, simulations=24, leaves_per_game=2,
                          dirichlet_alpha=0.3, gumbel_m=8)  # fmt: skip
    mcts = BatchedMCTS(3, 5, 0.5, search)
    for g in range(3):
        mcts.reset(g, np.random.default_rng(g))
    mcts.search(range(3), hashed)
    roots = mcts.roots(range(3))
    values = mcts.visit_values(range(3), roots.visits)
    t = mcts.trees
    for g in range(3):
        children = [c for c in t.child[g, 0] if c >= 0 and t.N[g, c] > 0]
        n = np.array([t.N[g, c] for c in children], dtype=np.float64)
        q = np.array([t.W[g, c] / t.N[g, c] for c in children])
        assert values[g] == pytest.approx(float((n * q).sum() / n.sum()), abs=1e-6)
        assert values[g] != pytest.approx(float(roots.value[g]), abs=1e-6)  # not the mean


def test_the_visit_weighted_root_value_is_recorded_when_asked() -> None:
    plain = play(params("puct"), 4)
    weighted = play(params("puct", visits_root_value=True), 4)
    for a, b in zip(plain, weighted, strict=True):
        assert (a.moves == b.moves).all() and (a.pi == b.pi).all()  # only the value differs
        assert np.abs(b.root_values).max() <= 1.0
    assert any(
        not np.allclose(a.root_values, b.root_values) for a, b in zip(plain, weighted, strict=True)
    )
