"""A real 9x9 match against GnuGo (level 1) through the arena: every move checked by our rules.

GnuGo is the Debian package `gnugo`, installed in /usr/games (not on PATH); the player spec
finds it there. Skipped only when the binary is absent.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tabula.config import load_config
from tabula.go.game import Game
from tabula.sgf import read_sgf, replay, sgf_result
from tasks.match import MatchSpec, run_match
from tasks.players import make_player
from tasks.run.results import load_results

GNUGO = shutil.which("gnugo") or shutil.which("gnugo", path="/usr/games")
pytestmark = [
    pytest.mark.gnugo,
    pytest.mark.skipif(GNUGO is None, reason="gnugo is not installed (apt-get install gnugo)"),
]
# Our rules (area scoring, positional superko), and dead stones captured before GnuGo passes:
# without --capture-all-dead it passes with our dead stones still on its side of the board,
# and Tromp-Taylor scoring counts them for their owner.
SPEC = "gtp:gnugo --mode gtp --level 1 --chinese-rules --positional-superko --capture-all-dead"


def test_two_games_against_gnugo_play_to_a_tromp_taylor_result(tmp_path: Path) -> None:
    cfg = load_config(None, ["rules.board_size=9", "rules.komi=7.5"])
    spec = MatchSpec(
        (SPEC, "random"), 2, seed=1, sgf_dir=tmp_path / "sgf", store=tmp_path / "store"
    )
    result = run_match(spec, cfg)
    assert (result.first, result.second) == ("gnugo-l1", "random")
    rows = load_results(tmp_path / "store")
    assert len(rows) == 2
    for record, row in zip(result.games, rows, strict=True):
        o = record.outcome
        assert o.reason == "score", o.reason  # no forfeit: every GnuGo move was legal for us
        game = Game(9, 7.5)
        for colour, move in o.moves:
            assert game.is_legal(move, colour)
            game.play(move, colour)
        assert game.is_over()
        assert o.score == game.score() and o.winner == game.winner()
        sgf = read_sgf(Path(row["sgf"]).read_bytes())
        assert sgf.result == sgf_result(o) and replay(sgf).score() == o.score
    assert [g.outcome.black for g in result.games] == ["gnugo-l1", "random"]
    assert result.summary.wins == 2  # GnuGo beats a random player as either colour


def test_gnugo_answers_as_a_one_game_player() -> None:
    cfg = load_config(None, ["rules.board_size=9"])
    player = make_player(SPEC, cfg)
    game = Game(9, 7.5)
    try:
        for _ in range(6):
            move = player.genmove(game, game.to_play)
            assert game.is_legal(move)
            game.play(move)
    finally:
        player.close()


def test_a_replayed_match_against_gnugo_gives_the_same_games(tmp_path: Path) -> None:
    """GnuGo seeds itself from the clock; the player seeds it per game (``set_random_seed``),
    so a match replayed later, with the same seed, plays the same moves (its SGFs are part of
    the iteration's DVC outputs)."""
    cfg = load_config(None, ["rules.board_size=9", "rules.komi=7.5"])

    def moves(name: str, seed: int) -> list[tuple]:
        spec = MatchSpec(
            (SPEC, "random"),
            2,
            seed=seed,
            sgf_dir=tmp_path / name,
            store=tmp_path / f"{name}-store",
        )
        result = run_match(spec, cfg)
        return [r.outcome.moves for r in result.games]

    first = moves("a", seed=3)
    time.sleep(1.1)  # GnuGo's clock seed moves on every second
    assert moves("b", seed=3) == first
    assert moves("c", seed=4) != first
