"""Player specs (tasks.players): the grammar, network players, and GTP engines that misbehave.

The broken engines are real subprocesses (tests/data/fake_engines/fake_gtp.py) speaking GTP
over pipes; each misbehaves once (--once MARKER), so the match must record that game as a
forfeit or abort with its reason and go on with a fresh engine process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tabula.arena import play_match, summarize
from tabula.config import Config, load_config
from tabula.go.game import Game
from tabula.gtp import GtpEngine
from tasks.engines import GtpPlayer, engine_name
from tasks.match import run_match
from tasks.players import PlayerSpecError, make_player

FAKE = Path(__file__).parent / "fake_engines" / "fake_gtp.py"


def config5(*overrides: str) -> Config:
    base = ["rules.board_size=5", "rules.komi=0.5", "evaluation.simulations=8"]
    return load_config(None, [*base, *overrides])


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny networks at small batches: a second thread only adds contention (10x slower on a
    loaded 2-core machine), so these tests run torch on one thread and restore it after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cfg5() -> Config:
    return config5()


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A freshly initialised 1-block, 8-filter 5x5 network."""
    from model.network import make_network, save_checkpoint

    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    save_checkpoint(path, make_network(5, blocks=1, filters=8, seed=0, value_hidden=16), {})
    return path


# -- the spec grammar ---------------------------------------------------------------------


def test_names_follow_the_spec(cfg5: Config, tiny_checkpoint: Path) -> None:
    assert make_player("random", cfg5).name == "random"
    assert make_player(f"raw:{tiny_checkpoint}", cfg5).name == "tiny:raw"
    assert make_player(f"mcts:{tiny_checkpoint}", cfg5).name == "tiny"
    bare = make_player(str(tiny_checkpoint), cfg5)
    assert bare.name == "tiny" and bare.params.simulations == 8  # evaluation.simulations
    searching = make_player(f"mcts:{tiny_checkpoint}@12", cfg5, simulations=5)
    assert searching.name == "tiny@12" and searching.params.simulations == 12
    assert make_player(str(tiny_checkpoint), cfg5, simulations=5).params.simulations == 5
    assert searching.params.noise is False  # evaluation games: no Dirichlet noise


def test_engine_names() -> None:
    assert engine_name(["/usr/games/gnugo", "--mode", "gtp", "--level", "1"]) == "gnugo-l1"
    assert engine_name(["gnugo", "--level=10", "--mode", "gtp"]) == "gnugo-l10"
    assert engine_name(["/usr/games/pachi", "-t", "=5000"]) == "pachi"
    assert engine_name([sys.executable, str(FAKE), "die"]) == "fake_gtp"


def test_registry_specs_go_through_the_resolver(cfg5: Config, tiny_checkpoint: Path) -> None:
    with pytest.raises(PlayerSpecError, match="resolver"):
        make_player("models:/tabula-5x5@best", cfg5)
    asked = []

    def resolver(uri: str) -> Path:
        asked.append(uri)
        return tiny_checkpoint

    assert make_player("models:/tabula-5x5@best", cfg5, resolver=resolver).name == "tiny"
    player = make_player("mcts:models:/tabula-5x5@best@3", cfg5, resolver=resolver)
    assert player.params.simulations == 3
    assert make_player("raw:models:/tabula-5x5@best", cfg5, resolver=resolver).name == "tiny:raw"
    assert asked == ["models:/tabula-5x5@best"] * 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty player spec"),
        ("nosuchfile.pt", "no checkpoint file"),
        ("mcts:/no/such.pt@100", "no checkpoint file"),
        ("raw:{ckpt}@10", "no simulations"),
        ("gtp:", "give the engine's command line"),
        ("gtp:no-such-engine-xyz --mode gtp", "not found on PATH or in /usr/games"),
        ("gtp:gnugo 'unclosed", "No closing quotation"),
    ],
)
def test_bad_specs_fail_with_one_line(
    spec: str, message: str, cfg5: Config, tiny_checkpoint: Path
) -> None:
    with pytest.raises(PlayerSpecError, match=message) as error:
        make_player(spec.format(ckpt=tiny_checkpoint), cfg5)
    assert "\n" not in str(error.value)


def test_checkpoint_for_another_board_is_refused(tiny_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="expected 9x9"):
        make_player(f"raw:{tiny_checkpoint}", load_config(None))


# -- network players ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["raw", "mcts"])
def test_network_players_play_legal_games(kind: str, cfg5: Config, tiny_checkpoint: Path) -> None:
    player = make_player(f"{kind}:{tiny_checkpoint}", cfg5, seed=1)
    opponent = make_player("random", cfg5, seed=2)
    outcomes = list(play_match(player, opponent, 4, 5, 0.5, concurrent=4))
    assert [o.reason for o in outcomes] == ["score"] * 4  # no forfeit: every move was legal
    for o in outcomes:
        game = Game(5, 0.5)
        for colour, move in o.moves:
            game.play(move, colour)
        assert game.is_over() and game.score() == o.score


def test_players_answer_gtp_genmove(cfg5: Config, tiny_checkpoint: Path) -> None:
    for spec in ("random", f"raw:{tiny_checkpoint}", f"mcts:{tiny_checkpoint}@4"):
        engine = GtpEngine(make_player(spec, cfg5), size=5, komi=0.5)
        assert engine.handle("play b C3") == "= \n\n"
        for colour in ("w", "w"):  # the second asks out of turn: GTP allows it
            response = engine.handle(f"genmove {colour}")
            assert response is not None and response.startswith("= "), response
        assert engine.game.move_number == 3


def test_mcts_player_is_reproducible(cfg5: Config, tiny_checkpoint: Path) -> None:
    def games(seed: int) -> list[tuple[tuple[int, int], ...]]:
        player = make_player(f"mcts:{tiny_checkpoint}@8", cfg5, seed=seed)
        opponent = make_player("random", cfg5, seed=7)
        return [o.moves for o in play_match(player, opponent, 2, 5, 0.5, concurrent=2)]

    assert games(1) == games(1)


# -- GTP engines that misbehave -----------------------------------------------------------


def fake_engine(mode: str, marker: Path, *args: str) -> str:
    return f"gtp:{sys.executable} {FAKE} {mode} --once {marker} {' '.join(args)}"


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
    mode: str, reason: str, tmp_path: Path
) -> None:
    cfg = config5("evaluation.match_timeout_s=2.5")
    result = run_match(fake_engine(mode, tmp_path / "marker"), "random", 3, cfg,
                       tmp_path / "sgf", tmp_path / "store", concurrent=1)  # fmt: skip
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


def test_engine_processes_are_closed(tmp_path: Path, cfg5: Config) -> None:
    player = make_player(fake_engine("good", tmp_path / "m"), cfg5)
    assert isinstance(player, GtpPlayer)
    outcomes = list(play_match(player, make_player("random", cfg5), 3, 5, 0.5, concurrent=3))
    procs = [p.proc for p in player._procs.values()]
    assert len(procs) == 3 and all(p.poll() is None for p in procs)
    player.close()
    assert all(p.poll() is not None for p in procs)
    assert summarize(outcomes, player.name, "random").games == 3


def test_gtp_player_as_a_gtp_player(tmp_path: Path, cfg5: Config) -> None:
    player = make_player(fake_engine("good", tmp_path / "m"), cfg5)
    game = Game(5, 0.5)
    game.play(12)
    try:
        assert player.genmove(game, -1) == 25  # the fake engine passes
        assert player.genmove(game, -1) == 25  # asked again: the game is replayed afresh
    finally:
        player.close()
    assert player._procs == {}
