"""The self-play game loop: records consistent with the rules, determinism, resignation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tabula.config import load_config
from tabula.go.game import Game
from tabula.mcts import SearchParams
from tabula.selfplay import GameRecord, SelfPlayParams, SelfPlayStats, play_games
from tests.helpers.mcts import hashed, uniform


def params(**changes) -> SelfPlayParams:
    base = SelfPlayParams(
        board_size=5,
        komi=0.5,
        search=SearchParams(
            algorithm="puct", simulations=16, leaves_per_game=3, dirichlet_alpha=0.3
        ),
        temperature_moves=4,
        v_resign=-0.9,
        resign_disabled_fraction=0.1,
        concurrent_games=4,
        batch_size=7,
    )
    return dataclasses.replace(base, **changes)


def play(p: SelfPlayParams, n: int, evaluate=hashed, seed: int = 0, **kw) -> list[GameRecord]:
    records = list(play_games(evaluate, p, n, np.random.default_rng(seed), **kw))
    assert sorted(r.index for r in records) == list(range(n))
    return sorted(records, key=lambda r: r.index)


def check_record(r: GameRecord, p: SelfPlayParams) -> None:
    """The record replays under the rules and its fields agree with each other."""
    M = p.board_size**2
    game = Game(p.board_size, p.komi)
    for t, move in enumerate(r.moves):
        assert r.to_play[t] == game.to_play
        assert r.pi[t, move] > 0 and abs(r.pi[t].sum() - 1) < 1e-5
        assert (r.pi[t][~game.legal_mask()] == 0).all()
        if t >= p.temperature_moves:
            assert r.pi[t, move] == r.pi[t].max()  # tau -> 0: the most visited move
        game.play(int(move))
    assert r.length == game.move_number <= 2 * M
    assert (r.z == r.winner * r.to_play).all()
    if r.resigned:
        assert not r.resign_disabled and r.score is None and r.winner == -r.resigned
        assert not game.is_over() and game.to_play == r.resigned
    else:
        assert game.is_over() and r.score == game.score() and r.winner == game.winner()


def test_records_follow_the_rules() -> None:
    p = params(v_resign=0.0, resign_disabled_fraction=0.3)
    stats = SelfPlayStats()
    records = play(p, 12, stats=stats)
    for r in records:
        check_record(r, p)
    assert stats.games == 12 and stats.positions == sum(r.length for r in records)
    assert stats.resigned == sum(r.resigned != 0 for r in records) > 0
    assert stats.resign_disabled == sum(r.resign_disabled for r in records) > 0
    assert stats.simulations >= stats.positions * 16 and stats.evaluations > 0


def test_planes_replay_the_game() -> None:
    r = play(params(), 1, uniform)[0]
    planes = r.planes()
    assert planes.shape == (r.length, 17, 5, 5) and planes[0, :16].sum() == 0
    game = Game(5, 0.5)
    for move in r.moves[:3]:
        game.play(int(move))
    assert (planes[3] == game.features()).all()


@pytest.mark.parametrize(
    "changes", [{"concurrent_games": 1}, {"concurrent_games": 3}, {"batch_size": 1000}]
)
def test_a_game_does_not_depend_on_the_others(changes) -> None:
    """Same seed: every game is identical however many run at once and however batched."""
    p = params(resign_disabled_fraction=0.5)
    reference = play(p, 6)
    for overlap in (False, True):
        other = play(dataclasses.replace(p, **changes), 6, overlap=overlap)
        for a, b in zip(reference, other, strict=True):
            assert (a.moves == b.moves).all() and (a.pi == b.pi).all()
            assert (a.root_values == b.root_values).all()
            assert (a.winner, a.resigned, a.resign_disabled) == (b.winner, b.resigned,
                                                                 b.resign_disabled)  # fmt: skip


def test_different_seeds_give_different_games() -> None:
    a, b = play(params(), 3, seed=1), play(params(), 3, seed=2)
    assert any(x.history() != y.history() for x, y in zip(a, b, strict=True))


def test_resignation_disabled_everywhere_or_nowhere() -> None:
    p = params(v_resign=1.0)  # everyone would resign at once
    assert all(r.resigned for r in play(dataclasses.replace(p, resign_disabled_fraction=0), 4))
    records = play(dataclasses.replace(p, resign_disabled_fraction=1.0), 4)
    assert not any(r.resigned for r in records)
    for r in records:
        trace = r.resign_trace()
        assert trace.winner == r.winner and -1 <= trace.lowest_non_loser <= 1


def test_params_from_config() -> None:
    cfg = load_config(None, ["rules.board_size=7", "selfplay.temperature_moves=null"])
    p = SelfPlayParams.from_config(cfg, v_resign=-0.7)
    assert p.board_size == 7 and p.temperature_moves == round(30 * 49 / 361)
    assert p.v_resign == -0.7 and p.search.dirichlet_alpha == pytest.approx(0.03 * 361 / 49)
    assert SelfPlayParams.from_config(cfg).v_resign == cfg.selfplay.v_resign


def test_no_games() -> None:
    assert list(play_games(uniform, params(), 0, np.random.default_rng(0))) == []
