"""GTP 2 transcripts: a script goes in through `GtpEngine.run`, the exact responses come out."""

from __future__ import annotations

import io
from textwrap import dedent

import pytest

from tabula.go.coords import RESIGN
from tabula.go.game import Game
from tabula.gtp import GtpEngine, preprocess
from tabula.players import RandomPlayer


class ScriptedPlayer:
    """A Player that answers genmove from a fixed list (flat moves or RESIGN)."""

    def __init__(self, moves: list[int]) -> None:
        self.moves = list(moves)
        self.asked: list[int] = []

    def genmove(self, game: Game, color: int) -> int:
        self.asked.append(color)
        return self.moves.pop(0)


class BrokenPlayer:
    def genmove(self, game: Game, color: int) -> int:
        raise RuntimeError("boom")


def transcript(script: str, player: object | None = None, size: int = 9) -> str:
    engine = GtpEngine(player or RandomPlayer(0), size=size)
    out = io.StringIO()
    engine.run(io.StringIO(dedent(script).lstrip("\n")), out)
    return out.getvalue()


def responses(*parts: str) -> str:
    return "".join(f"{p}\n\n" for p in parts)


def test_administrative_commands_with_ids_comments_and_blank_lines() -> None:
    script = """
        protocol_version
        1 name
        2 version   # a trailing comment

        # a whole-line comment
        3 known_command genmove
        4 known_command fly
        5 known_command
        bogus
        6 bogus with args
        7 NAME
    """
    assert transcript(script) == responses(
        "= 2",
        "=1 tabula",
        "=2 0.1.0",
        "=3 true",
        "=4 false",
        "?5 syntax error",
        "? unknown command",
        "?6 unknown command",
        "?7 unknown command",
    )


def test_list_commands_names_every_required_command() -> None:
    out = transcript("list_commands\n")
    assert out.startswith("= ") and out.endswith("\n\n")
    listed = out[2:-2].split("\n")
    required = {
        "protocol_version", "name", "version", "known_command", "list_commands", "quit",
        "boardsize", "clear_board", "komi", "play", "genmove", "undo", "showboard",
        "final_score", "time_settings", "time_left",
    }  # fmt: skip
    assert required <= set(listed)
    for name in listed:
        assert transcript(f"known_command {name}\n") == responses("= true")


def test_preprocessing_control_characters_tabs_and_crlf() -> None:
    assert preprocess("1\tname\r\n") == "1 name"
    assert preprocess("\x00\x01na\x7fme # x") == "name"
    assert preprocess("   # only a comment") == ""
    engine = GtpEngine(RandomPlayer(0))
    assert engine.handle("\x01 12\tname\x1b\r\n") == "=12 tabula\n\n"
    assert engine.handle("") is None
    assert engine.handle("  \t \r\n") is None
    assert engine.handle("# comment") is None
    assert engine.handle("42") == "?42 syntax error\n\n"


def test_board_setup_commands() -> None:
    script = """
        1 boardsize 7
        2 boardsize 4
        3 boardsize 20
        4 boardsize nine
        5 boardsize 99999999999999999999999999999999999
        6 boardsize
        7 komi 6.5
        8 komi abc
        9 komi nan
        10 komi 1e999
        11 komi -3
        12 clear_board
        13 time_settings 300 30 5
        14 time_settings 300 -1 5
        15 time_settings 300 x 5
        16 time_left black 120 0
        17 time_left x 120 0
        18 time_left w 12.5 0
    """
    assert transcript(script) == responses(
        "=1 ",
        "?2 unacceptable size",
        "?3 unacceptable size",
        "?4 syntax error",
        "?5 unacceptable size",
        "?6 syntax error",
        "=7 ",
        "?8 syntax error",
        "?9 syntax error",
        "?10 syntax error",
        "=11 ",
        "=12 ",
        "=13 ",
        "?14 syntax error",
        "?15 syntax error",
        "=16 ",
        "?17 syntax error",
        "?18 syntax error",
    )


def test_play_undo_showboard_and_final_score() -> None:
    script = """
        boardsize 5
        komi 0.5
        1 final_score
        2 play b C3
        3 final_score
        4 play w c3
        5 play white C2
        6 play x D4
        7 play b I3
        8 play b F1
        9 play b Z9
        10 play b
        11 play B pass
        12 showboard
        13 final_score
        14 undo
        15 undo
        16 undo
        17 undo
    """
    board = dedent("""
           A B C D E
         5 . . . . .  5
         4 . . . . .  4
         3 . . X . .  3
         2 . . O . .  2
         1 . . . . .  1
           A B C D E
        move 3, white to play, komi 0.5""")
    assert transcript(script) == responses(
        "= ",
        "= ",
        "=1 W+0.5",
        "=2 ",
        "=3 B+24.5",
        "?4 illegal move",
        "=5 ",
        "?6 syntax error",
        "?7 syntax error",
        "?8 illegal move",
        "?9 illegal move",
        "?10 syntax error",
        "=11 ",
        "=12 " + board,
        "=13 W+0.5",
        "=14 ",
        "=15 ",
        "=16 ",
        "?17 cannot undo",
    )


def test_komi_change_keeps_the_moves() -> None:
    engine = GtpEngine(RandomPlayer(0), size=5)
    for line in ["play b C3", "play w C2", "komi 2"]:
        assert engine.handle(line) == "= \n\n"
    assert engine.game.history == [(1, 12), (-1, 17)]
    assert engine.game.komi == 2
    assert engine.handle("final_score") == "= W+2\n\n"


def test_suicide_and_superko_are_illegal_moves() -> None:
    # White A5 is suicide in the corner. Then a ko on the top edge: black D5 takes C5,
    # and white retaking at C5 at once would repeat the whole-board position.
    script = """
        boardsize 5
        play b A4
        play b B5
        1 play w A5
        play w C5
        play b C4
        play w D4
        play w E5
        2 play b D5
        3 play w C5
    """
    assert transcript(script).split("\n\n")[:-1] == (
        ["= "] * 3 + ["?1 illegal move"] + ["= "] * 4 + ["=2 ", "?3 illegal move"]
    )


def test_genmove_plays_the_player_move_for_either_colour() -> None:
    player = ScriptedPlayer([40, 81, RESIGN, 0])
    script = """
        1 genmove b
        2 genmove white
        3 genmove w
        4 genmove W
        5 genmove
        6 genmove purple
    """
    out = transcript(script, player)
    assert out == responses("=1 E5", "=2 pass", "=3 resign", "=4 A9", "?5 syntax error",
                            "?6 syntax error")  # fmt: skip
    assert player.asked == [1, -1, -1, -1]


def test_genmove_refuses_a_bad_player_move() -> None:
    engine = GtpEngine(ScriptedPlayer([40, 40, 82, -7]))
    assert engine.handle("genmove b") == "= E5\n\n"
    assert engine.handle("genmove w") == "? player returned an illegal move\n\n"
    assert engine.handle("genmove w") == "? player returned an invalid move\n\n"
    assert engine.handle("genmove w") == "? player returned an invalid move\n\n"
    assert engine.game.history == [(1, 40)]
    engine = GtpEngine(BrokenPlayer())
    assert engine.handle("7 genmove b") == "?7 internal error: RuntimeError\n\n"


def test_genmove_after_the_game_is_over_still_answers_a_move() -> None:
    engine = GtpEngine(RandomPlayer(3), size=5)
    engine.handle("play b pass")
    engine.handle("play w pass")
    assert engine.game.is_over()
    response = engine.handle("genmove b")
    assert response is not None and response.startswith("= ") and response != "= resign\n\n"


def test_quit_stops_the_loop_and_later_lines_are_not_read() -> None:
    engine = GtpEngine(RandomPlayer(0))
    inp = io.StringIO("1 name\n2 quit\n3 name\n")
    out = io.StringIO()
    engine.run(inp, out)
    assert out.getvalue() == responses("=1 tabula", "=2 ")
    assert engine.wants_quit
    assert inp.readline() == "3 name\n"


@pytest.mark.parametrize("size", [5, 9, 13, 19])
def test_boardsize_then_corners_in_gtp_coordinates(size: int) -> None:
    engine = GtpEngine(ScriptedPlayer([0, size - 1, size * size - size, size * size - 1]))
    assert engine.handle(f"boardsize {size}") == "= \n\n"
    last = "ABCDEFGHJKLMNOPQRST"[size - 1]
    assert engine.handle("genmove b") == f"= A{size}\n\n"
    assert engine.handle("genmove w") == f"= {last}{size}\n\n"
    assert engine.handle("genmove b") == "= A1\n\n"
    assert engine.handle("genmove w") == f"= {last}1\n\n"
