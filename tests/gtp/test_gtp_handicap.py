"""GTP 2's handicap commands and ``final_status_list``, checked against the specification and its
reference implementation, GNU Go 3.8 (spec section 1.6: where the text is unclear the reference
implementation decides): the same fixed handicap stones for every board size and count, free
handicap stones that GNU Go accepts, the spec's failures, and the final status of real
positions (with Tromp-Taylor's reading where GNU Go's differs: every stone on the board at the
end counts, as ``final_score`` counts it)."""

from __future__ import annotations

import numpy as np
import pytest

from tabula.go import coords
from tabula.go.handicap import fixed_handicap, max_fixed_handicap
from tabula.gtp import GtpEngine
from tabula.players import RandomPlayer
from tests.gtp.test_gtp_pipes import GNUGO, GtpPipe, gnugo_stones, play_against_gnugo
from tests.helpers.go import game_from_diagram, ref_area, ref_group


def needs_gnugo(test):
    """The test plays against the gnugo binary (marked, and skipped where it is missing)."""
    missing = pytest.mark.skipif(not GNUGO.exists(), reason="gnugo is not installed")
    return pytest.mark.gnugo(missing(test))


# Two walls from edge to edge and a black stone in black's area: every string is alive.
WALLS = """
    9 . . . X O . . . .
    8 . . . X O . . . .
    7 . . . X O . . . .
    6 . . . X O . . . .
    5 . X . X O . . . .
    4 . . . X O . . . .
    3 . . . X O . . . .
    2 . . . X O . . . .
    1 . . . X O . . . .
"""
# A white stone left inside black's area: GNU Go calls it dead, Tromp-Taylor counts it.
INVADER = WALLS.replace("5 . X . X O", "5 . O . X O")


@pytest.fixture
def gnugo():
    pipe = GtpPipe([str(GNUGO), "--mode", "gtp", "--level", "1"])
    yield pipe
    pipe.close()


def both(engine: GtpEngine, gnugo: GtpPipe, command: str) -> tuple[str, str]:
    ours = engine.handle(command)
    assert ours is not None
    return ours, gnugo.ask(command)


def vertices(answer: str) -> set[str]:
    return set(answer.removeprefix("= ").split())


def black_stones(engine: GtpEngine) -> set[int]:
    return set(map(int, np.flatnonzero(engine.game.board.reshape(-1) == 1)))


@needs_gnugo
def test_fixed_handicap_places_what_gnugo_places_on_every_board(gnugo) -> None:
    engine = GtpEngine(RandomPlayer(0))
    for size in (5, 6, 7, 8, 9, 10, 11, 12, 13, 19):
        for stones in range(0, 11):
            for command in (f"boardsize {size}", "clear_board"):
                assert both(engine, gnugo, command) == ("= \n\n", "= \n\n")
            ours, theirs = both(engine, gnugo, f"fixed_handicap {stones}")
            where = f"{stones} stones on {size}x{size}"
            if not theirs.startswith("= "):
                assert ours == "? invalid number of stones\n\n", where
                assert not engine.game.board.any(), where
                continue
            assert ours.startswith("= ") and vertices(ours) == vertices(theirs), where
            assert black_stones(engine) == gnugo_stones(gnugo, "black", size), where
            assert engine.game.to_play == -1  # White moves first after a handicap
            assert len(vertices(ours)) == stones <= max_fixed_handicap(size)


def test_the_fixed_pattern_of_the_spec() -> None:
    as_gtp = [coords.to_gtp(p, 19) for p in fixed_handicap(9, 19)]
    assert as_gtp == ["D4", "Q16", "D16", "Q4", "D10", "Q10", "K4", "K16", "K10"]
    assert [coords.to_gtp(p, 9) for p in fixed_handicap(5, 9)] == ["C3", "G7", "C7", "G3", "E5"]
    assert [coords.to_gtp(p, 13) for p in fixed_handicap(2, 13)] == ["D4", "K10"]
    assert [max_fixed_handicap(n) for n in (5, 6, 7, 8, 9, 10, 19)] == [0, 0, 4, 4, 9, 4, 9]


@needs_gnugo
def test_handicap_needs_an_empty_board_as_in_gnugo(gnugo) -> None:
    engine = GtpEngine(RandomPlayer(0))
    for command in ("boardsize 9", "clear_board", "play b E5"):
        both(engine, gnugo, command)
    for command in ("fixed_handicap 2", "place_free_handicap 2", "set_free_handicap C3 G7"):
        assert both(engine, gnugo, command) == ("? board not empty\n\n",) * 2, command
    assert engine.handle("fixed_handicap") == "? syntax error\n\n"
    assert engine.handle("set_free_handicap") == "? syntax error\n\n"
    assert engine.handle("set_free_handicap C3 Z") == "? syntax error\n\n"


@needs_gnugo
def test_set_free_handicap_is_refused_or_placed_whole(gnugo) -> None:
    engine = GtpEngine(RandomPlayer(0), size=9)
    bad = ["C3", "C3 C3", "C3 pass", "C3 Z9", "C3 T19"]
    for vertex_list in bad:  # one stone, repeated, pass, off this board
        assert engine.handle(f"set_free_handicap {vertex_list}") == "? bad vertex list\n\n"
        assert not engine.game.board.any(), vertex_list  # nothing half placed
    for command in ("boardsize 9", "clear_board"):
        both(engine, gnugo, command)
    ours, theirs = both(engine, gnugo, "set_free_handicap C3 d4 E5 G7")
    assert (ours, theirs) == ("= \n\n", "= \n\n")
    assert black_stones(engine) == gnugo_stones(gnugo, "black", 9)
    assert engine.game.to_play == -1
    # The stones are not moves: undo takes back the game's moves only.
    assert both(engine, gnugo, "undo") == ("? cannot undo\n\n",) * 2
    assert both(engine, gnugo, "play w F3") == ("= \n\n",) * 2
    assert engine.handle("komi 0.5") == "= \n\n"  # replays the game, stones included
    assert both(engine, gnugo, "undo") == ("= \n\n",) * 2
    assert both(engine, gnugo, "undo") == ("? cannot undo\n\n",) * 2
    assert black_stones(engine) == gnugo_stones(gnugo, "black", 9)
    # At most N*N - 1 stones.
    small = GtpEngine(RandomPlayer(0), size=5)
    every = " ".join(coords.to_gtp(p, 5) for p in range(25))
    assert small.handle(f"set_free_handicap {every}") == "? bad vertex list\n\n"
    assert small.handle(f"set_free_handicap {every.rsplit(' ', 1)[0]}") == "= \n\n"
    assert int(small.game.board.sum()) == 24


@needs_gnugo
@pytest.mark.parametrize(("size", "stones"), [(9, 4), (9, 12), (5, 3), (19, 9)])
def test_place_free_handicap_stones_another_engine_accepts(gnugo, size, stones) -> None:
    engine = GtpEngine(RandomPlayer(size), size=size)
    for command in (f"boardsize {size}", "clear_board"):
        both(engine, gnugo, command)
    ours = engine.handle(f"place_free_handicap {stones}")
    assert ours is not None and ours.startswith("= "), ours
    placed = vertices(ours)
    assert 2 <= len(placed) <= stones  # the spec lets an engine place fewer
    fixed = {coords.to_gtp(p, size) for p in fixed_handicap(min(stones, 9), size)} if (
        max_fixed_handicap(size) >= 2
    ) else set()  # fmt: skip
    assert fixed <= placed  # the fixed pattern first, as far as it goes
    # What a controller does with the answer: the opponent engine sets the same stones.
    assert gnugo.ask(f"set_free_handicap {' '.join(sorted(placed))}") == "= \n\n"
    assert black_stones(engine) == gnugo_stones(gnugo, "black", size)
    assert engine.game.to_play == -1 and engine.handle("undo") == "? cannot undo\n\n"
    assert engine.handle("genmove w") is not None


def test_place_free_handicap_counts_as_the_spec_says() -> None:
    engine = GtpEngine(RandomPlayer(0), size=9)
    for stones in (-1, 0, 1, 81):
        answer = engine.handle(f"place_free_handicap {stones}")
        assert answer == "? invalid number of stones\n\n", stones
    assert engine.handle("place_free_handicap 80") is not None
    assert 2 <= int(engine.game.board.sum()) <= 80


def strings_of(answer: str) -> list[set[str]]:
    lines = answer.removeprefix("= ").removesuffix("\n\n").split("\n")
    return [set(line.split()) for line in lines if line.strip()]


@needs_gnugo
def test_final_status_list_lists_strings_as_gnugo_does(gnugo) -> None:
    game = game_from_diagram(WALLS)
    engine = GtpEngine(RandomPlayer(0), size=9)
    engine.game = game
    gnugo.ask("boardsize 9")
    for colour, point in game.history:
        assert gnugo.ask(f"play {'b' if colour == 1 else 'w'} {coords.to_gtp(point, 9)}") == (
            "= \n\n"
        )
    ours, theirs = both(engine, gnugo, "final_status_list alive")
    assert sorted(map(sorted, strings_of(ours))) == sorted(map(sorted, strings_of(theirs)))
    assert len(strings_of(ours)) == 3  # the walls and the lone black stone, one line each
    for status in ("dead", "seki"):
        assert both(engine, gnugo, f"final_status_list {status}") == ("= \n\n",) * 2


def test_final_status_list_agrees_with_final_score() -> None:
    """Tromp-Taylor: the stones on the board count as they stand, so a GUI that scores from
    the dead list (none) gets ``final_score``; GNU Go would call the invader dead."""
    for diagram in (WALLS, INVADER):
        engine = GtpEngine(RandomPlayer(0), size=9, komi=7.5)
        engine.game = game_from_diagram(diagram)
        alive = strings_of(engine.handle("final_status_list alive") or "")
        board = list(map(int, engine.game.board.reshape(-1)))
        listed = [coords.from_gtp(v, 9) for s in alive for v in s]
        assert sorted(listed) == [p for p in range(81) if board[p]]  # every stone once
        for string in alive:
            points = {coords.from_gtp(v, 9) for v in string}
            assert ref_group(board, next(iter(points)), 9)[0] == points  # one whole string
        assert engine.handle("final_status_list dead") == "= \n\n"
        assert engine.handle("final_status_list seki") == "= \n\n"
        score = ref_area(board, 9) - 7.5
        expected = f"B+{score:g}" if score > 0 else f"W+{-score:g}"
        assert engine.handle("final_score") == f"= {expected}\n\n"
    assert engine.handle("final_status_list") == "? syntax error\n\n"
    assert engine.handle("final_status_list unknown") == "? syntax error\n\n"


@needs_gnugo
def test_final_status_list_after_a_whole_game_against_gnugo() -> None:
    engine = play_against_gnugo(2, 1)
    board = list(map(int, engine.game.board.reshape(-1)))
    alive = strings_of(engine.handle("final_status_list alive") or "")
    assert sorted(coords.from_gtp(v, 9) for s in alive for v in s) == [
        p for p in range(81) if board[p]
    ]
    for string in alive:
        points = {coords.from_gtp(v, 9) for v in string}
        assert ref_group(board, next(iter(points)), 9)[0] == points
