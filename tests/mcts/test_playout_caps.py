"""Playout-cap randomisation in the self-play loop (Wu 2019, KataGo): a share of moves get the
full search and are policy targets, the rest a fast search; drawn per game, so still
deterministic whatever else runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tabula.config import load_config
from tabula.mcts import SearchParams
from tabula.selfplay import GameRecord, SelfPlayParams, play_games
from tests.helpers.mcts import hashed


def params(algorithm: str = "puct", **changes: object) -> SelfPlayParams:
    base = SelfPlayParams(
        board_size=5,
        komi=0.5,
        search=SearchParams(
            algorithm=algorithm, simulations=16, leaves_per_game=2, dirichlet_alpha=0.3, gumbel_m=4
        ),  # fmt: skip
        temperature_moves=4,
        v_resign=-0.9,
        resign_disabled_fraction=0.5,
        concurrent_games=4,
        batch_size=7,
        full_search_fraction=0.3,
        fast_simulations=3,
    )
    return dataclasses.replace(base, **changes)


def play(p: SelfPlayParams, n: int, seed: int = 0, **kw: object) -> list[GameRecord]:
    return sorted(play_games(hashed, p, n, np.random.default_rng(seed), **kw),
                  key=lambda r: r.index)  # fmt: skip


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
def test_a_share_of_moves_get_the_full_search(algorithm: str) -> None:
    records = play(params(algorithm), 8)
    full = np.concatenate([r.full_search for r in records])
    assert len(full) > 100 and 0.15 < full.mean() < 0.45  # about 0.3
    if algorithm == "gumbel":  # a fresh count every search: 16 visits, or 3
        for r in records:
            assert len(r.full_search) == r.length
    everything = play(params(algorithm, full_search_fraction=1.0), 3)
    assert all(r.full_search.all() for r in everything)


def test_fast_searches_spend_fewer_simulations() -> None:
    """The same games' simulation count falls with the share of full searches."""
    from tabula.selfplay import SelfPlayStats

    spent = {}
    for fraction in (1.0, 0.3):
        stats = SelfPlayStats()
        p = params("gumbel", full_search_fraction=fraction)
        records = list(play_games(hashed, p, 6, np.random.default_rng(0), stats=stats))
        spent[fraction] = stats.simulations / sum(r.length for r in records)
    assert spent[1.0] == pytest.approx(16, abs=0.5)  # every move 16 simulations (fresh roots)
    assert spent[0.3] == pytest.approx(0.3 * 16 + 0.7 * 3, abs=1.5)


@pytest.mark.parametrize("changes", [{"concurrent_games": 1}, {"concurrent_games": 7},
                                     {"batch_size": 3}])  # fmt: skip
def test_capped_games_do_not_depend_on_the_others(changes: dict[str, int]) -> None:
    reference = play(params(), 6)
    for overlap in (False, True):
        other = play(params(**changes), 6, overlap=overlap)
        for a, b in zip(reference, other, strict=True):
            assert (a.moves == b.moves).all() and (a.pi == b.pi).all()
            assert (a.full_search == b.full_search).all()


def test_params_from_config() -> None:
    cfg = load_config(None, ["selfplay.full_search_fraction=0.25", "search.simulations=24"])
    p = SelfPlayParams.from_config(cfg)
    assert (p.full_search_fraction, p.fast_simulations) == (0.25, 6)
    cfg = load_config(None, ["selfplay.fast_simulations=2"])
    assert SelfPlayParams.from_config(cfg).fast_simulations == 2


def test_quiet_fast_searches_play_their_best_move() -> None:
    """KataGo's cheap searches: no root noise, and the move is the search's most visited one
    (tau 0); otherwise they sample like full searches (tau 1 within temperature_moves)."""
    plays_best = {}
    for quiet in (False, True):
        p = params("puct", quiet_fast_searches=quiet, temperature_moves=100)
        records = play(p, 8)
        fast = [
            r.pi[t][r.moves[t]] == r.pi[t].max()
            for r in records
            for t in range(r.length)
            if not r.full_search[t]
        ]
        plays_best[quiet] = float(np.mean(fast))
    assert plays_best[True] == 1.0 and plays_best[False] < 0.8, plays_best


def test_quiet_fast_searches_from_config() -> None:
    cfg = load_config(None, ["selfplay.quiet_fast_searches=false"])
    assert not SelfPlayParams.from_config(cfg).quiet_fast_searches
    assert SelfPlayParams.from_config(load_config(None)).quiet_fast_searches  # KataGo's, default


def test_the_improved_root_value_is_recorded_when_asked() -> None:
    """selfplay.root_value: improved records sum pi' completed Q (Gumbel): the same games and
    moves (only the recorded value differs), and values that differ from the plain mean."""
    plain = play(params("gumbel"), 4)
    better = play(params("gumbel", improved_root_value=True), 4)
    for a, b in zip(plain, better, strict=True):
        assert (a.moves == b.moves).all() and (a.pi == b.pi).all()
        assert np.abs(b.root_values).max() <= 1.0
    assert any(
        not np.allclose(a.root_values, b.root_values) for a, b in zip(plain, better, strict=True)
    )
    cfg = load_config(None, ["selfplay.root_value=improved"])
    assert SelfPlayParams.from_config(cfg).improved_root_value


def _decided_before(r: GameRecord, t: int, threshold: float, lookback: int) -> bool:
    """Move t's search follows ``lookback`` searches of the game valued beyond ``threshold``
    for one side (black's view: the value times the side to move)."""
    black = r.root_values[max(0, t - lookback) : t] * r.to_play[max(0, t - lookback) : t]
    return t >= lookback and bool((black > threshold).all() or (black < -threshold).all())


@pytest.mark.parametrize("fraction", [0.3, 1.0])
def test_a_decided_game_gets_fast_searches(fraction: float) -> None:
    """KataGo's reduced visits: once the last `decided_lookback` root values all lie beyond the
    threshold for one side, the move's search is fast whatever the draw; until a game's first
    decided move it is the same game as without the switch (the draw is made either way)."""
    threshold, lookback = 0.15, 2
    reduced = play(params("gumbel", full_search_fraction=fraction,
                          decided_threshold=threshold, decided_lookback=lookback), 8)  # fmt: skip
    plain = play(params("gumbel", full_search_fraction=fraction), 8)
    decided = 0
    for r, q in zip(reduced, plain, strict=True):
        marks = [_decided_before(r, t, threshold, lookback) for t in range(r.length)]
        decided += sum(marks)
        assert not any(r.full_search[t] for t in range(r.length) if marks[t])
        first = marks.index(True) if True in marks else r.length
        assert (r.moves[:first] == q.moves[:first]).all()
        assert (r.full_search[:first] == q.full_search[:first]).all()
        if fraction == 1.0:  # nothing else makes a search fast
            assert [not f for f in r.full_search] == marks
    assert decided > 20  # the case was exercised


def test_reduced_visits_from_config() -> None:
    assert SelfPlayParams.from_config(load_config(None)).decided_threshold is None  # off
    cfg = load_config(None, ["selfplay.decided_threshold=0.9", "selfplay.decided_lookback=3"])
    p = SelfPlayParams.from_config(cfg)
    assert (p.decided_threshold, p.decided_lookback) == (0.9, 3)
