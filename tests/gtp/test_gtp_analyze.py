"""Analysis over GTP, as Go GUIs use it: ``lz-analyze`` (Lizzie, Sabaki, KaTrain's Leela mode)
and GoGui's analyze commands, through the protocol of the real ``tabula gtp`` over pipes.

Each ``info`` line is read back the way the GUIs read it: Sabaki's parser (split on ``info``,
then key-value pairs up to ``pv``, whose moves run to the end) and the regular expression of
KaTrain's Leela parser (``move``, ``visits``, ``winrate`` as an integer, ``order``, ``pv``)
with Lizzie's field set (``prior`` too)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from model.checkpoint import save_checkpoint
from model.network import make_network
from tabula.analyze import parse_lz_analyze
from tabula.gtp import GtpEngine, serve
from tabula.players import RandomPlayer
from tests.gtp.test_gtp_pipes import GtpPipe

TABULA = str(Path(sys.executable).parent / "tabula")
# KaTrain's Leela Zero parser (katrain/core/leela/parser.py), with prior and order as Lizzie reads.
KATRAIN = re.compile(
    r"info\s+move\s+(\w+)\s+visits\s+(\d+)\s+winrate\s+(\d+)\s+prior\s+(\d+)\s+order\s+(\d+)\s+"
    r"pv\s+([\w\s]+?)(?=\s*info\s+move|\s*$)"
)
VERTEX = re.compile(r"(?:[A-HJ-T](?:[1-9]|1[0-9])|pass)")


def sabaki_parse(line: str) -> list[dict[str, object]]:
    """Sabaki's reading of an analysis line: per ``info`` chunk, ``key value`` pairs until
    ``pv``, then the variation."""
    out = []
    for chunk in line.split("info ")[1:]:
        words = chunk.split()
        entry: dict[str, object] = {}
        while words:
            key = words.pop(0)
            if key == "pv":
                entry["pv"] = words
                break
            entry[key] = words.pop(0)
        out.append(entry)
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("analyze") / "model.pt"
    return save_checkpoint(path, make_network(9, 1, 8, 0, 16), {"model_id": "analyze-test"})


@pytest.fixture
def engine(checkpoint):
    pipe = GtpPipe([TABULA, "gtp", "--model", str(checkpoint), "--simulations", "8"])
    yield pipe
    pipe.close()


def rest_of_analysis(pipe: GtpPipe) -> list[str]:
    """The info lines up to the empty line that ends an ``lz-analyze`` response."""
    lines = []
    while line := pipe.read_line():
        lines.append(line)
    return lines


def test_lz_analyze_streams_until_the_next_command(engine):
    assert engine.ask("1 play b E5") == "=1 \n\n"
    engine.send_raw(b"2 lz-analyze 5\n")
    assert engine.read_line() == "=2"
    lines = [engine.read_line() for _ in range(3)]  # every 50 ms, growing
    engine.send_raw(b"3 name\n")
    lines += rest_of_analysis(engine)
    assert engine.read_response() == "=3 tabula\n\n"
    visits = []
    for line in lines:
        assert line.startswith("info move "), line
        entries = sabaki_parse(line)
        found = KATRAIN.findall(line)
        assert len(found) == len(entries) >= 1, line
        for order, (entry, (move, n, winrate, prior, rank, pv)) in enumerate(
            zip(entries, found, strict=True)
        ):
            assert entry["move"] == move and VERTEX.fullmatch(move) and move != "E5"
            assert entry["visits"] == n and int(n) > 0
            assert int(rank) == order and 0 <= int(winrate) <= 10000 and 0 <= int(prior) <= 10000
            assert entry["pv"][0] == move and all(VERTEX.fullmatch(v) for v in entry["pv"])
            assert pv.split() == entry["pv"]
        ns = [int(n) for _, n, *_ in found]
        assert ns == sorted(ns, reverse=True)  # most visited first
        visits.append(sum(ns))
    assert visits == sorted(visits) and visits[-1] > visits[0]  # the search grows
    assert engine.ask("4 genmove w").startswith("=4 ")  # the engine plays on as before


def test_lz_analyze_takes_a_colour_and_maxmoves(engine):
    engine.send_raw(b"lz-analyze W interval 1 maxmoves 2\n")
    assert engine.read_line() == "="
    lines = [engine.read_line()]
    engine.send_raw(b"quit\n")
    lines += rest_of_analysis(engine)
    assert all(1 <= len(sabaki_parse(line)) <= 2 for line in lines)
    assert engine.read_response() == "= \n\n"
    assert engine.close() == 0


def test_lz_genmove_analyze_shows_its_search_then_plays(engine):
    assert engine.ask("1 play b E5") == "=1 \n\n"
    engine.send_raw(b"2 lz-genmove_analyze w 1\n")
    assert engine.read_line() == "=2"
    lines = []
    while not (line := engine.read_line()).startswith("play "):
        lines.append(line)
    assert engine.read_line() == ""  # the empty line that ends the response
    move = line.removeprefix("play ")  # as Lizzie reads it
    assert lines and all(len(KATRAIN.findall(x)) == len(sabaki_parse(x)) >= 1 for x in lines)
    assert KATRAIN.findall(lines[-1])[0][0] == move  # the search's most visited move
    assert VERTEX.fullmatch(move) and move != "E5"
    assert engine.ask(f"3 play w {move}") == "?3 illegal move\n\n"  # it is on the board
    assert engine.ask("4 undo") == "=4 \n\n"
    assert engine.ask(f"5 play w {move}") == "=5 \n\n"
    assert engine.ask("6 lz-genmove_analyze x") == "?6 syntax error\n\n"


def test_gogui_analyze_commands(engine):
    listed = engine.ask("gogui-analyze_commands")
    commands = [ln.split("/") for ln in listed.removeprefix("= ").split("\n") if ln]
    assert [c[0] for c in commands] == ["gfx", "string"]
    heat = engine.ask(commands[0][2])  # tabula-policy
    assert heat.startswith("= INFLUENCE ") and "\nTEXT pass " in heat
    values = [float(v) for v in heat.split("\n")[0].split()[3::2]]
    assert max(values) == 1.0 and min(values) >= 0.0  # scaled to the largest prior
    assert len(values) == 81  # the empty board: every point legal
    assert re.fullmatch(
        r"= black to play: value [+-]\d\.\d{3}, win probability \d+\.\d%\n\n",
        engine.ask(commands[1][2]),
    )


def test_analysis_commands_need_a_network():
    engine = GtpEngine(RandomPlayer(0))
    assert engine.handle("known_command lz-analyze") == "= false\n\n"
    assert engine.handle("lz-analyze 10") == "? unknown command\n\n"
    assert engine.handle("lz-genmove_analyze b 10") == "? unknown command\n\n"


def test_bad_lz_analyze_arguments_are_syntax_errors(checkpoint):
    from tabula.config import load_config
    from tasks.players import make_player

    player = make_player(str(checkpoint), load_config(None, []), simulations=8)
    engine = GtpEngine(player)
    for line in ("lz-analyze x", "lz-analyze 10 interval", "lz-analyze 10 minmoves 3"):
        assert engine.handle(line) == "? syntax error\n\n", line
    assert parse_lz_analyze(["b", "25", "maxmoves", "3"]).interval == 0.25


def test_an_in_memory_stream_gets_one_line_per_analysis(checkpoint):
    from tabula.config import load_config
    from tasks.players import make_player

    player = make_player(str(checkpoint), load_config(None, []), simulations=8)
    out = io.StringIO()
    serve(player, io.StringIO("lz-analyze 0\nname\n"), out)
    header, info, end, answer, *_ = out.getvalue().split("\n")
    assert (header, end, answer) == ("=", "", "= tabula")
    assert info.startswith("info move ") and KATRAIN.search(info)


def test_an_in_memory_stream_gets_a_whole_genmove_analysis(checkpoint):
    from tabula.config import load_config
    from tasks.players import make_player

    player = make_player(str(checkpoint), load_config(None, []), simulations=8)
    out = io.StringIO()
    serve(player, io.StringIO("lz-genmove_analyze b 0 maxmoves 3\nshowboard\n"), out, visits=8)
    analysis, board = out.getvalue().split("\n\n")[:2]
    header, *infos, play = analysis.split("\n")
    assert header == "=" and board.startswith("= \n   A B C")
    assert infos and all(1 <= len(KATRAIN.findall(x)) <= 3 for x in infos)
    assert play == f"play {KATRAIN.findall(infos[-1])[0][0]}"
    assert "X" in board and "white to play" in board  # black's move is on the board
