"""Player specs (tasks.players) and the network players they build (tabula.players).

A spec names a player everywhere (CLI, config, pipeline); bad ones fail with one line. The
network players must play legal, reproducible games and answer GTP genmove in either colour.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from tabula.arena import ArenaError, Schedule, play_match
from tabula.config import Config, load_config
from tabula.go.game import Game
from tabula.gtp import GtpEngine
from tasks.match import MatchSpec, run_match
from tasks.players import PlayerSpecError, make_player
from tasks.run.results import load_results

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
    outcomes = list(play_match(player, opponent, Schedule(4, 5, 0.5, concurrent=4)))
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
        return [o.moves for o in play_match(player, opponent, Schedule(2, 5, 0.5, concurrent=2))]

    assert games(1) == games(1)


def test_each_side_of_a_match_can_have_its_own_config(
    tmp_path: Path, config5: Callable[..., Config], tiny_checkpoint: Path
) -> None:
    # bench/strength.py's head-to-head: each champion searches as its own config says.
    puct = config5("search.algorithm=puct")
    gumbel = config5("search.algorithm=gumbel", "evaluation.simulations=4")
    spec = f"mcts:{tiny_checkpoint}@4"
    match = MatchSpec(
        (spec, spec), 2, match_id="h2h", store=tmp_path / "store", player_cfgs=(puct, gumbel)
    )
    result = run_match(match, puct)
    # The name says "@4" where 4 is not the player's own config's evaluation.simulations.
    assert (result.first, result.second) == ("tiny@4", "tiny")
    assert [r["winner"] for r in load_results(tmp_path / "store")] == [
        g.outcome.winner for g in result.games
    ]
    with pytest.raises(ArenaError, match="rules"):
        run_match(replace(match, player_cfgs=(puct, config5("rules.komi=7.5"))), puct)


def _genmove_player(cfg: Config, leaves: int | None = None, seed: int = 0, simulations: int = 32):
    from tabula.players import MctsPlayer
    from tests.helpers.mcts import hashed

    batches: list[int] = []

    def evaluate(planes, rng=None):
        batches.append(len(planes))
        return hashed(planes, rng)

    return MctsPlayer(evaluate, cfg, simulations, "p", seed, leaves_per_move=leaves), batches


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
def test_genmove_keeps_its_tree_while_the_game_goes_on(algorithm: str) -> None:
    cfg = load_config(None, ["rules.board_size=5", f"search.algorithm={algorithm}"])
    player, _ = _genmove_player(cfg)
    game = Game(5, cfg.rules.komi)
    game.play(player.genmove(game, 1), 1)
    player.genmove(game, -1)  # the position the last search chose: its subtree is kept
    assert player._one.move_number(0) == 1
    if algorithm == "puct":  # (Gumbel's root counts start afresh; its subtrees are kept)
        assert player._one.roots([0]).visits[0].sum() > 32
    # Another position (a new game) starts afresh, with only this search's visits.
    player.genmove(Game(5, cfg.rules.komi), 1)
    assert player._one.move_number(0) == 0
    assert player._one.roots([0]).visits[0].sum() == 32
    # Two moves of one colour in a row cannot be followed: a fresh tree at the position.
    game = Game(5, cfg.rules.komi)
    game.play(player.genmove(game, 1), 1)
    game.play(next(m for m in range(25) if game.is_legal(m)), 1)
    player.genmove(game, 1)
    assert player._one.move_number(0) == 2
    assert player._one.roots([0]).visits[0].sum() == 32


def test_genmove_with_a_kept_tree_is_reproducible(cfg5: Config) -> None:
    def moves() -> list[int]:
        player, _ = _genmove_player(cfg5, seed=3)
        game, played = Game(5, cfg5.rules.komi), []
        for colour in (1, -1, 1, -1, 1, -1):
            move = player.genmove(game, colour)
            game.play(move, colour)
            played.append(move)
        return played

    assert moves() == moves()


def test_genmove_evaluates_its_leaves_together(cfg5: Config) -> None:
    player, batches = _genmove_player(cfg5, leaves=8)
    player.genmove(Game(5, cfg5.rules.komi), 1)
    assert max(batches) == 8 and len(batches) < 32 // 2
    player, batches = _genmove_player(cfg5)
    player.genmove(Game(5, cfg5.rules.komi), 1)
    assert max(batches) == cfg5.search.leaves_per_game


@pytest.mark.parametrize(("algorithm", "leaves", "expected"),
                         [("gumbel", None, 16), ("gumbel", 2, 2), ("puct", None, 4)])  # fmt: skip
def test_a_deep_gumbel_search_batches_16_leaves(
    algorithm: str, leaves: int | None, expected: int
) -> None:
    """`tabula.players.genmove_leaves`: 16 from 400 simulations up with the Gumbel search,
    unless told otherwise; PUCT keeps the config's (the paper's preset: 8)."""
    cfg = load_config(None, ["rules.board_size=5", f"search.algorithm={algorithm}",
                             "search.leaves_per_game=4"])  # fmt: skip
    player, batches = _genmove_player(cfg, leaves=leaves, simulations=400)
    player.genmove(Game(5, cfg.rules.komi), 1)
    assert max(batches) == expected


def test_the_fastest_precision_is_measured_not_assumed(tiny_checkpoint: Path) -> None:
    from model.checkpoint import load_checkpoint
    from model.evaluator import Evaluator, fastest_precision, native_bf16

    net, _ = load_checkpoint(tiny_checkpoint)
    evaluator = Evaluator(net, precision="fastest", batch=4)
    if native_bf16("cpu"):
        assert fastest_precision(evaluator, 4) in ("fp32", "bf16")
    else:  # emulated bf16 is never a candidate
        assert evaluator.bf16 is False
    priors, values = evaluator(Game(net.board_size, 7.5).features()[None])
    assert priors.shape == (1, net.board_size**2 + 1) and abs(float(values[0])) <= 1.0
