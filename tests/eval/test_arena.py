"""The arena (tabula.arena) and matches and gates (tasks.match): real players, real rules.

Players here are the project's own (random, raw network, MCTS) plus two tiny test players
written against the public Player protocol: a deterministic one and a scripted one that
answers what a test tells it to (an illegal move, a resignation, a failure).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from tabula.arena import (
    ArenaError,
    EndReason,
    Failure,
    FailureKind,
    MoveRequest,
    Schedule,
    play_match,
    summarize,
)
from tabula.config import Config
from tabula.go.coords import RESIGN
from tabula.go.game import Game
from tabula.openings import opening_set
from tabula.players import RandomPlayer, SequentialPlayer, own_eyes
from tabula.sgf import read_sgf, replay, sgf_result
from tasks.match import GATE_FILE, MatchError, MatchSpec, run_gate, run_match
from tasks.run.results import load_results


class FirstLegalPlayer:
    """Deterministic: the lowest (or highest) legal point not filling its own eye, else pass."""

    def __init__(self, highest: bool = False) -> None:
        self.pick = -1 if highest else 0

    def genmove(self, game: Game, color: int) -> int:
        M = game.size * game.size
        legal = game.legal_mask()[:M] & ~own_eyes(game.board, color).reshape(M)
        points = np.flatnonzero(legal)
        return int(points[self.pick]) if points.size else M


class Scripted:
    """Plays like FirstLegalPlayer, but answers `script[move_number]` when one is given."""

    def __init__(self, name: str, script: dict[int, object]) -> None:
        self.name, self.script, self.max_concurrent = name, script, None
        self.started: list[int] = []
        self.ended: list[int] = []

    def start_game(self, slot: int, game: Game, color: int) -> Failure | None:
        self.started.append(slot)
        return None

    def genmoves(self, requests: Sequence[MoveRequest]) -> list:
        answers = []
        for r in requests:
            scripted = self.script.get(r.game.move_number)
            answers.append(
                scripted if scripted is not None else FirstLegalPlayer().genmove(r.game, r.color)
            )
        return answers

    def observe(self, slot: int, color: int, move: int) -> Failure | None:
        return None

    def end_game(self, slot: int) -> None:
        self.ended.append(slot)


def random_player(name: str, seed: int) -> SequentialPlayer:
    return SequentialPlayer(RandomPlayer(seed), name=name)


# -- the arena --------------------------------------------------------------------------


def test_colours_alternate_and_games_come_in_order() -> None:
    first, second = random_player("a", 1), random_player("b", 2)
    outcomes = list(play_match(first, second, Schedule(7, 5, 0.5, concurrent=3)))
    assert [o.index for o in outcomes] == list(range(7))
    for o in outcomes:
        assert o.first_color == (1 if o.index % 2 == 0 else -1)
        assert (o.black, o.white) == (("a", "b") if o.index % 2 == 0 else ("b", "a"))
        assert o.reason == "score" and o.winner == int(np.sign(o.score))


def test_no_alternation_keeps_first_player_black() -> None:
    outcomes = list(
        play_match(
            random_player("a", 1), random_player("b", 2), Schedule(3, 5, 0.5, alternate=False)
        )
    )
    assert all(o.black == "a" and o.first_color == 1 for o in outcomes)


def test_every_game_replays_to_the_same_tromp_taylor_result() -> None:
    for o in play_match(
        random_player("a", 3), random_player("b", 4), Schedule(6, 5, 7.5, concurrent=6)
    ):
        game = Game(5, 7.5)
        for colour, move in o.moves:
            game.play(move, colour)  # raises if any move were illegal
        assert game.is_over()
        assert game.score() == o.score


def test_two_deterministic_players_repeat_every_game_but_the_colour_pair() -> None:
    first = SequentialPlayer(FirstLegalPlayer(), "first")
    second = SequentialPlayer(FirstLegalPlayer(highest=True), "last")
    outcomes = list(play_match(first, second, Schedule(6, 5, 0.5, concurrent=4)))
    assert [o.duplicate_of for o in outcomes] == [None, None, 0, 1, 0, 1]
    assert summarize(outcomes, "first", "last").duplicates == 4


def test_openings_make_deterministic_players_play_different_games() -> None:
    first = SequentialPlayer(FirstLegalPlayer(), "first")
    second = SequentialPlayer(FirstLegalPlayer(highest=True), "last")
    openings = opening_set(7, 4, 2, seed=0)
    outcomes = list(play_match(first, second, Schedule(8, 7, 0.5, concurrent=3, openings=openings)))
    assert summarize(outcomes, "first", "last").duplicates == 0
    for o in outcomes:  # game i starts with opening i // 2, recorded as its first moves
        opening = openings[o.index // 2]
        assert tuple(m for _, m in o.moves[: len(opening)]) == opening
        assert [c for c, _ in o.moves[:2]] == [1, -1]
        game = Game(7, 0.5)
        for colour, move in o.moves:
            game.play(move, colour)
        assert game.is_over() and game.score() == o.score


def test_the_mean_margin_is_from_the_first_players_side_over_scored_games() -> None:
    first, second = random_player("a", 7), random_player("b", 8)
    outcomes = list(play_match(first, second, Schedule(6, 5, 7.5, concurrent=2)))
    s = summarize(outcomes, "a", "b")
    margins = [o.score if o.first_color == 1 else -o.score for o in outcomes]
    assert s.scored == 6 and s.mean_margin == pytest.approx(np.mean(margins))
    resigned = Scripted("quits", {0: RESIGN})
    o = list(play_match(resigned, random_player("c", 1), Schedule(1, 5, 7.5, alternate=False)))
    s = summarize(o, "quits", "c")
    assert s.scored == 0 and s.mean_margin is None and s.resignations == 1


def test_random_players_never_repeat_a_game() -> None:
    outcomes = list(play_match(random_player("a", 5), random_player("b", 6), Schedule(8, 5, 0.5)))
    assert summarize(outcomes, "a", "b").duplicates == 0


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (0, "forfeit: illegal move A5"),  # occupied: black's first stone is on A5 (flat 0)
        (25, None),  # pass is legal
        (26, "forfeit: illegal move 26"),
        (-7, "forfeit: illegal move -7"),
        ("E5", "forfeit: illegal move 'E5'"),
        (RESIGN, "resign"),
        (
            Failure(FailureKind.FORFEIT, "engine crashed (exit code 3)"),
            "forfeit: engine crashed (exit code 3)",
        ),
        (
            Failure(FailureKind.ABORT, "engine refused legal move C3"),
            "abort: engine refused legal move C3",
        ),
    ],
)
def test_the_referee_ends_a_game_on_a_bad_answer(answer: object, reason: str | None) -> None:
    # Game 0: the first player is Black and opens on A5 (flat 0); the second player (White)
    # answers `answer` at move number 1.
    second = Scripted("scripted", {1: answer})
    outcomes = list(play_match(Scripted("plain", {}), second, Schedule(1, 5, 0.5)))
    o = outcomes[0]
    if reason is None:
        assert (o.end, o.detail, o.reason) == (EndReason.SCORE, "", "score")
        return
    assert o.reason == reason  # the record text of the results store and the SGF comment
    assert o.end == reason.split(":")[0] and o.reason.endswith(o.detail)
    assert len(o.moves) == 1  # the bad answer was not played
    if reason.startswith("abort"):
        assert o.winner is None and o.first_result is None
    else:
        assert o.winner == 1 and o.first_result == 1.0 and o.score is None


def test_a_failed_game_does_not_stop_the_match() -> None:
    boom = Failure(FailureKind.FORFEIT, "boom")
    second = Scripted("scripted", {2: boom, 3: boom})  # its 2nd move, as Black or White
    outcomes = list(play_match(Scripted("plain", {}), second, Schedule(4, 5, 0.5, concurrent=2)))
    assert [o.reason for o in outcomes] == ["forfeit: boom"] * 4
    assert [o.first_result for o in outcomes] == [1.0] * 4
    summary = summarize(outcomes, "plain", "scripted")
    assert (summary.wins, summary.forfeits, summary.score) == (4, 4, 1.0)


def test_closing_the_stream_ends_the_games_in_progress() -> None:
    first, second = Scripted("a", {}), Scripted("b", {})
    stream = play_match(first, second, Schedule(10, 5, 0.5, concurrent=4))
    next(stream)
    stream.close()
    assert sorted(first.started) == sorted(first.ended)
    assert sorted(second.started) == sorted(second.ended)


def test_a_failure_kind_is_forfeit_or_abort() -> None:
    assert Failure("forfeit", "x").kind is FailureKind.FORFEIT  # the record's text reads back
    with pytest.raises(ArenaError, match="'forfeit' or 'abort'"):
        Failure("resign", "x")


def test_bad_match_arguments_are_refused() -> None:
    a = random_player("a", 0)
    with pytest.raises(ArenaError, match="at least 1 game"):
        next(play_match(a, random_player("b", 1), Schedule(0, 5, 0.5)))
    with pytest.raises(ArenaError, match="cannot play itself"):
        next(play_match(a, a, Schedule(2, 5, 0.5)))


def test_sgf_results() -> None:
    outcomes = list(play_match(Scripted("a", {}), Scripted("b", {1: RESIGN}), Schedule(1, 5, 0.5)))
    assert sgf_result(outcomes[0]) == "B+R"
    outcomes = list(play_match(Scripted("a", {}), Scripted("b", {1: 0}), Schedule(1, 5, 0.5)))
    assert sgf_result(outcomes[0]) == "B+F"
    aborts = Scripted("b", {1: Failure(FailureKind.ABORT, "x")})
    outcomes = list(play_match(Scripted("a", {}), aborts, Schedule(1, 5, 0.5)))
    assert sgf_result(outcomes[0]) == "Void"


# -- tasks.match ---------------------------------------------------------------------------


def test_run_match_writes_sgf_and_the_results_store(tmp_path: Path, cfg5: Config) -> None:
    spec = MatchSpec(
        ("random", "random"),
        4,
        match_id="m1",
        iteration=3,
        sgf_dir=tmp_path / "sgf",
        store=tmp_path / "store",
        concurrent=2,
    )
    result = run_match(spec, cfg5)
    assert (result.first, result.second) == ("random", "random#2")
    assert result.summary.games == 4 and result.summary.duplicates == 0
    rows = load_results(tmp_path / "store")
    assert [r["game"] for r in rows] == [0, 1, 2, 3]
    for record, row in zip(result.games, rows, strict=True):
        o = record.outcome
        assert (row["black"], row["white"], row["winner"]) == (o.black, o.white, o.winner)
        assert row["iteration"] == 3 and row["moves"] == len(o.moves)
        sgf = read_sgf(Path(row["sgf"]).read_bytes())
        assert (sgf.black, sgf.white, sgf.result) == (o.black, o.white, sgf_result(o))
        assert replay(sgf).score() == o.score
    leftovers = [p.name for p in tmp_path.rglob(".tmp-*")]
    assert leftovers == []


def test_gate_promotes_a_strong_player_and_sprt_stops_early(
    tmp_path: Path, tiny_checkpoint: Path, config5: Callable[..., Config]
) -> None:
    # A big hypothesised gap (200 Elo) lets a handful of straight wins decide.
    cfg = config5("evaluation.gating_games=40", "evaluation.sprt=true", "evaluation.sprt_elo1=200")
    # The searching player beats its own raw network, which passes as soon as it can.
    players = (f"mcts:{tiny_checkpoint}@16", f"raw:{tiny_checkpoint}")
    spec = MatchSpec(
        players, 40, sgf_dir=tmp_path / "gate" / "sgf", store=tmp_path / "store", concurrent=2
    )
    decision = run_gate(spec, cfg, tmp_path / "gate")
    assert decision.promoted and decision.reason == "sprt-accept-h1"
    assert decision.games < 40
    evidence = json.loads((tmp_path / "gate" / GATE_FILE).read_text())
    assert evidence["promoted"] is True and evidence["llr"] >= evidence["llr_bounds"][1]
    assert evidence["wins"] == decision.wins and evidence["low"] <= evidence["win_rate"]
    assert len(evidence["sgf"]) == evidence["games_played"] >= decision.games
    assert all(Path(p).exists() for p in evidence["sgf"])
    assert [r["candidate_color"] for r in evidence["results"][:2]] == [1, -1]
    assert "duplicates" in evidence
    assert len(load_results(tmp_path / "store")) == evidence["games_played"]


def test_fixed_gate_plays_every_game(tmp_path: Path, config5: Callable[..., Config]) -> None:
    cfg = config5("evaluation.gating_games=4")
    spec = MatchSpec(("random", "random"), 4, sgf_dir=tmp_path / "sgf", concurrent=4)
    decision = run_gate(spec, cfg, tmp_path)
    assert decision.reason == "threshold" and decision.games == 4 and decision.llr is None
    evidence = json.loads((tmp_path / GATE_FILE).read_text())
    assert evidence["games_played"] == 4 and len(evidence["sgf"]) == 4


def test_gate_with_only_aborted_games_fails_clearly(
    tmp_path: Path, config5: Callable[..., Config], fake_gtp: Path
) -> None:
    cfg = config5("evaluation.gating_games=2", "evaluation.match_timeout_s=10")
    refuses = f"gtp:{sys.executable} {fake_gtp} refuse --at 1"  # every move relayed to it
    with pytest.raises(MatchError, match="all 2 games aborted"):
        run_gate(MatchSpec((refuses, "random"), 2, sgf_dir=tmp_path / "sgf"), cfg, tmp_path)
