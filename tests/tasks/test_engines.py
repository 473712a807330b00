"""GTP engines as players (tasks.engines): names, process cleanup, and engines that misbehave.

The broken engines are real subprocesses (`tests/helpers/fake_gtp.py`) speaking GTP over pipes;
each misbehaves once (--once MARKER), so the match must record that game as a forfeit or abort
with its reason and go on with a fresh engine process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tabula.arena import Failure, MoveRequest, Schedule, play_match, summarize
from tabula.config import Config
from tabula.go.game import Game
from tabula.ladder import engine_name
from tasks.engines import GtpPlayer
from tasks.match import MatchSpec, run_match
from tasks.players import make_player


@pytest.fixture
def fake_engine(fake_gtp: Path) -> Callable[..., str]:
    """The spec of a fake engine that misbehaves in `mode` once (while `marker` is absent)."""

    def spec(mode: str, marker: Path, *args: str) -> str:
        return f"gtp:{sys.executable} {fake_gtp} {mode} --once {marker} {' '.join(args)}"

    return spec


def test_engine_names(fake_gtp: Path) -> None:
    assert engine_name(["/usr/games/gnugo", "--mode", "gtp", "--level", "1"]) == "gnugo-l1"
    assert engine_name(["gnugo", "--level=10", "--mode", "gtp"]) == "gnugo-l10"
    assert engine_name(["/usr/games/pachi", "-t", "=5000"]) == "pachi"
    assert engine_name([sys.executable, str(fake_gtp), "die"]) == "fake_gtp"


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("die", "forfeit: engine crashed (exit code 3): fake engine: dying on purpose"),
        ("garbage", "forfeit: garbage answer to genmove: 'hello there'"),
        ("nonsense", "forfeit: garbage answer to genmove: 'banana'"),
        ("illegal", "forfeit: illegal move "),
        ("offboard", "forfeit: illegal move Z25"),
        ("hang", "forfeit: timeout: no answer to genmove within 2.5 s"),
        ("refuse", "abort: engine refused legal move "),
    ],
)
def test_a_broken_engine_loses_that_game_and_the_match_goes_on(
    mode: str,
    reason: str,
    tmp_path: Path,
    config5: Callable[..., Config],
    fake_engine: Callable[..., str],
) -> None:
    cfg = config5("evaluation.match_timeout_s=2.5")
    players = (fake_engine(mode, tmp_path / "marker"), "random")
    spec = MatchSpec(players, 3, sgf_dir=tmp_path / "sgf", store=tmp_path / "store", concurrent=1)
    result = run_match(spec, cfg)
    reasons = [r.outcome.reason for r in result.games]
    assert reasons[0].startswith(reason), reasons
    assert reasons[1:] == ["score", "score"]  # a fresh engine process played on
    first = result.games[0].outcome
    if reason.startswith("forfeit"):
        assert first.winner == -first.first_color  # the engine (first player) lost
        assert (result.summary.forfeits, result.summary.aborts) == (1, 0)
    else:
        assert first.winner is None and result.summary.aborts == 1
    assert all(r.sgf is not None and r.sgf.exists() for r in result.games)


def test_engine_processes_are_closed(
    tmp_path: Path, cfg5: Config, fake_engine: Callable[..., str]
) -> None:
    player = make_player(fake_engine("good", tmp_path / "m"), cfg5)
    assert isinstance(player, GtpPlayer)
    outcomes = list(
        play_match(player, make_player("random", cfg5), Schedule(3, 5, 0.5, concurrent=3))
    )
    procs = [p.proc for p in player._procs.values()]
    assert len(procs) == 3 and all(p.poll() is None for p in procs)
    player.close()
    assert all(p.poll() is not None for p in procs)
    assert summarize(outcomes, player.name, "random").games == 3


def test_gtp_player_as_a_gtp_player(
    tmp_path: Path, cfg5: Config, fake_engine: Callable[..., str]
) -> None:
    player = make_player(fake_engine("good", tmp_path / "m"), cfg5)
    game = Game(5, 0.5)
    game.play(12)
    try:
        assert player.genmove(game, -1) == 25  # the fake engine passes
        assert player.genmove(game, -1) == 25  # asked again: the game is replayed afresh
    finally:
        player.close()
    assert player._procs == {}


def test_engines_think_at_once(tmp_path: Path, fake_gtp: Path) -> None:
    """A round's engines all get their genmove before any answer is read: these four answer
    only once all four have been asked, so asked one after another the first would time out."""
    argv = [sys.executable, str(fake_gtp), "good", "--meet", str(tmp_path), "4"]
    player = GtpPlayer(argv, size=5, komi=0.5, timeout_s=30.0)
    try:
        for slot in range(4):
            assert player.start_game(slot, Game(5, 0.5), 1) is None
        for _ in range(2):
            requests = [MoveRequest(slot, Game(5, 0.5), 1) for slot in range(4)]
            assert player.genmoves(requests) == [25] * 4  # every engine passed
    finally:
        player.close()
    assert len(list(tmp_path.glob("2-*"))) == 4


def test_an_answer_waiting_past_its_deadline_counts(tmp_path: Path, fake_gtp: Path) -> None:
    """The engine read second answered in time, while the reader waited on the first."""
    engine = [sys.executable, str(fake_gtp)]
    player = GtpPlayer([*engine, "hang", "--at", "1"], size=5, komi=0.5, timeout_s=1.5)
    try:
        assert player.start_game(0, Game(5, 0.5), 1) is None  # slot 0's engine hangs
        player.argv = [*engine, "good"]
        assert player.start_game(1, Game(5, 0.5), 1) is None
        hung, answered = player.genmoves([MoveRequest(s, Game(5, 0.5), 1) for s in range(2)])
    finally:
        player.close()
    assert isinstance(hung, Failure) and hung.reason.startswith("timeout")
    assert answered == 25
