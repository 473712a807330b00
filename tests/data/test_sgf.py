"""SGF records: write -> read round trips, refusals with one-line reasons, replay, results."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sgfmill import sgf as sgfmill_sgf

from tabula.go.game import Game
from tabula.players import RandomPlayer
from tabula.sgf import SgfError, SgfGame, game_to_sgf, read_sgf, replay, result_string


def random_game(size: int, seed: int, max_moves: int | None = None) -> Game:
    player = RandomPlayer(seed)
    game = Game(size=size, komi=7.5)
    limit = max_moves if max_moves is not None else 2 * size * size
    while not game.is_over() and len(game.history) < limit:
        game.play(player.genmove(game, game.to_play))
    return game


def test_round_trip_keeps_every_property_comment_and_pass() -> None:
    moves = [(1, 40), (-1, 81), (1, 0), (-1, 80), (1, 81), (-1, 81)]
    comments = {0: "root note", 1: "centre", 2: "a pass", 6: "game over"}
    record = SgfGame(9, 6.5, tuple(moves), "tabula-3", "GNU Go", "W+12.5", comments)
    data = game_to_sgf(record, extra={"DT": "2024-05-01", "GN": "gate 3"})
    assert isinstance(data, bytes)
    assert b"RU[Tromp-Taylor]" in data and b"SZ[9]" in data and b"KM[6.5]" in data
    assert b"W[]" in data and b"tt" not in data  # passes are the empty value
    assert b"DT[2024-05-01]" in data
    assert read_sgf(data) == SgfGame(
        size=9, komi=6.5, moves=tuple(moves), black="tabula-3", white="GNU Go",
        result="W+12.5", comments=comments,
    )  # fmt: skip


def test_round_trip_escapes_text() -> None:
    names = ("Bl]ack\\", "白 [w]")
    comment = "a ] and a \\ and\nnew lines: ünïcödé"
    data = game_to_sgf(SgfGame(5, 0, ((1, 12),), *names, None, {1: comment}), rules="Chinese")
    record = read_sgf(data)
    assert (record.black, record.white, record.comments, record.result) == (
        *names, {1: comment}, None,
    )  # fmt: skip
    assert b"RU[Chinese]" in data


@settings(max_examples=40, deadline=None)
@given(st.integers(5, 19), st.integers(0, 2**32 - 1), st.integers(-40, 40).map(lambda k: k / 2))
def test_random_games_round_trip(size: int, seed: int, komi: float) -> None:
    rng = np.random.default_rng(seed)
    M = size * size
    n = int(rng.integers(0, 60))
    moves = [
        (int(c), int(m))
        for c, m in zip(rng.choice([1, -1], n), rng.integers(0, M + 1, n), strict=True)
    ]
    comments = {int(k): f"c{k}" for k in rng.integers(0, n + 1, 3)}
    record = SgfGame(size, komi, tuple(moves), "b", "w", "0", comments)
    assert read_sgf(game_to_sgf(record)) == record


def test_coordinates_agree_with_sgfmill_orientation() -> None:
    # flat 0 is the top-left point: GTP A9, SGF "aa", sgfmill (row 8 from the bottom, col 0).
    data = game_to_sgf(SgfGame(9, 7.5, ((1, 0), (-1, 8), (1, 72), (-1, 81)), "b", "w", None))
    nodes = sgfmill_sgf.Sgf_game.from_bytes(data).get_main_sequence()[1:]
    assert [n.get_move() for n in nodes] == [("b", (8, 0)), ("w", (8, 8)), ("b", (0, 0)),
                                             ("w", None)]  # fmt: skip


def test_reading_accepts_tt_pass_and_skips_moveless_nodes() -> None:
    data = b"(;GM[1]FF[4]SZ[9]KM[7.5]PB[x]PW[y];B[ee];W[tt]C[old pass];C[just a note];B[])"
    record = read_sgf(data)
    assert record.moves == ((1, 40), (-1, 81), (1, 81))
    assert record.comments == {2: "old pass\n\njust a note"}
    assert record.result is None


def test_absent_properties_get_sgf_defaults() -> None:
    record = read_sgf(b"(;SZ[7];B[dd])")
    assert (record.size, record.komi, record.black, record.white) == (7, 0.0, "", "")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not a readable SGF game"),
        (b"\x00\xff\xfe garbage", "not a readable SGF game"),
        (b"(;SZ[3];B[aa])", "board size 3 is not supported"),
        (b"(;SZ[25];B[aa])", "board size 25 is not supported"),
        (b"(;SZ[9]KM[seven])", "bad root property"),
        (b"(;SZ[9];B[ee];W[zz])", "move 2:"),
        (b"(;SZ[9];B[ee];W[e])", "move 2:"),
        (b"(;SZ[9]AB[aa][bb];W[ee])", "setup stones"),
    ],
)
def test_bad_records_are_refused_with_one_line(data: bytes, reason: str) -> None:
    with pytest.raises(SgfError, match=reason) as caught:
        read_sgf(data)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_replay_refuses_the_first_illegal_move_by_number_and_vertex() -> None:
    # Move 4 (white E5) is on a stone; move 6 would be one too but is never reached.
    data = b"(;SZ[9];B[ee];W[dd];B[cc];W[ee];B[ff];W[ee])"
    record = read_sgf(data)
    with pytest.raises(SgfError, match=r"^illegal move 4: white E5$"):
        replay(record)


def test_replay_refuses_suicide_and_superko() -> None:
    suicide = b"(;SZ[5];B[ab];W[cc];B[ba];W[aa])"  # white A5 in black's corner
    with pytest.raises(SgfError, match=r"^illegal move 4: white A5$"):
        replay(read_sgf(suicide))
    # Ko on the top edge: black D5 takes C5 (move 7), white retakes at once (move 8).
    ko = b"(;SZ[5];B[ba];W[ca];B[cb];W[db];B[ae];W[ea];B[da];W[ca])"
    with pytest.raises(SgfError, match=r"^illegal move 8: white C5$"):
        replay(read_sgf(ko))


@pytest.mark.parametrize(("size", "seed"), [(5, 1), (9, 2), (13, 3), (19, 4)])
def test_replay_reproduces_board_history_and_score(size: int, seed: int) -> None:
    game = random_game(size, seed, max_moves=None if size <= 9 else 150)
    score = game.score()
    result = result_string(score, int(np.sign(score)))
    data = game_to_sgf(SgfGame(size, game.komi, tuple(game.history), "r1", "r2", result))
    replayed = replay(read_sgf(data))
    assert np.array_equal(replayed.board, game.board)
    assert replayed.history == game.history
    assert replayed.score() == score
    assert replayed.is_over() == game.is_over()
    assert read_sgf(data).result == result


def test_golden_game_with_captures() -> None:
    # 5x5: black surrounds and captures white's C4 stone, then both pass.
    data = b"(;SZ[5]KM[0.5]RE[B+2.5];B[cc];W[cb];B[bb];W[aa];B[db];W[ea];B[ca];W[];B[])"
    record = read_sgf(data)
    game = replay(record)
    rows = ["".join(".XO"[int(v)] for v in row) for row in game.board]
    assert rows == ["O.X.O", ".X.X.", "..X..", ".....", "....."]
    assert game.is_over()
    # Black: 4 stones + C4; White: 2 stones; every other empty region touches both.
    assert game.score() == 5 - 2 - 0.5
    assert result_string(game.score(), game.winner()) == record.result == "B+2.5"


@pytest.mark.parametrize(
    ("score", "winner", "resigned", "expected"),
    [
        (3.5, 1, False, "B+3.5"),
        (-0.5, -1, False, "W+0.5"),
        (-12.0, -1, False, "W+12"),
        (0.0, 0, False, "0"),
        (None, 1, True, "B+R"),
        (None, -1, True, "W+R"),
        (None, None, False, "Void"),
        (None, 0, False, "0"),
        (None, 1, False, "B+"),
    ],
)
def test_result_strings(score: float | None, winner: int | None, resigned: bool,
                        expected: str) -> None:  # fmt: skip
    assert result_string(score, winner, resigned) == expected


@pytest.mark.parametrize(
    ("score", "winner", "resigned"),
    [(3.5, -1, False), (0.0, 1, False), (None, 0, True), (None, None, True), (1.0, 2, False)],
)
def test_inconsistent_results_are_refused(score: float | None, winner: int | None,
                                          resigned: bool) -> None:  # fmt: skip
    with pytest.raises(ValueError):
        result_string(score, winner, resigned)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ((4, 7.5, []), "board size 4"),
        ((9, 7.5, [(2, 0)]), "move 1: bad"),
        ((9, 7.5, [(1, 0), (-1, 82)]), "move 2: bad"),
        ((9, 7.5, [(1, -1)]), "move 1: bad"),
    ],
)
def test_writing_bad_input_is_refused(args: tuple, reason: str) -> None:
    with pytest.raises(SgfError, match=reason):
        game_to_sgf(SgfGame(*args, "b", "w", None))


def test_writing_bad_comments_or_properties_is_refused() -> None:
    with pytest.raises(SgfError, match="comment for move 5"):
        game_to_sgf(SgfGame(9, 7.5, ((1, 0),), "b", "w", None, {5: "late"}))
    with pytest.raises(SgfError, match="root property"):
        game_to_sgf(SgfGame(9, 7.5, (), "b", "w", None), extra={"bad id": "x"})
