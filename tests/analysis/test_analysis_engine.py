"""``tabula analysis``, KataGo's JSON analysis engine, through the real command over pipes,
with a 9x9 checkpoint that has the ownership and score heads (and one without, as older
networks are): the queries KaTrain sends, a whole SGF reviewed in one call, bad queries, and
``kata-analyze`` over GTP for Lizzie's and Sabaki's overlays."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model.checkpoint import save_checkpoint
from model.network import make_network
from tabula.go import coords
from tests.gtp.test_gtp_pipes import GtpPipe

ROOT = Path(__file__).resolve().parents[2]
TABULA = str(Path(sys.executable).parent / "tabula")
N = 9
#: A short 9x9 game, as KaTrain sends a position: the moves so far, its rules and settings.
MOVES = [["B", "E5"], ["W", "C3"], ["B", "G7"], ["W", "C7"], ["B", "G3"]]


def katrain_query(ident: str, **fields: object) -> dict:
    """The shape of KaTrain's query (katrain/core/engine.py), its japanese rules included."""
    query = {
        "id": ident, "rules": "japanese", "priority": 0, "analyzeTurns": [len(MOVES)],
        "maxVisits": 24, "komi": 6.5, "boardXSize": N, "boardYSize": N,
        "includeOwnership": True, "includeMovesOwnership": False, "includePolicy": True,
        "initialStones": [], "initialPlayer": "B", "moves": MOVES,
        "overrideSettings": {"reportAnalysisWinratesAs": "BLACK"},
    }  # fmt: skip
    return query | fields


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """``aux``: a 9x9 network with the ownership and score heads; ``plain``: one without."""
    folder = tmp_path_factory.mktemp("analysis")
    nets = {
        name: make_network(N, 1, 8, 0, 16, aux=aux)
        for name, aux in (("aux", True), ("plain", False))
    }
    return {name: save_checkpoint(folder / f"{name}.pt", net, {"model_id": name})
            for name, net in nets.items()}  # fmt: skip


def analyse(model: Path, lines: list[str], *args: str) -> tuple[list[dict], str, int]:
    """Run ``tabula analysis`` on the query lines; its answers (decoded), stderr and code."""
    proc = subprocess.run(
        [TABULA, "analysis", "--model", str(model), "--precision", "fp32", *args],
        input="".join(line + "\n" for line in lines), capture_output=True, text=True,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600,
    )  # fmt: skip
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr, proc.returncode


def check_turn(answer: dict, visits: int, scores: bool = True) -> None:
    """An analysis answer as KaTrain reads it."""
    assert answer["isDuringSearch"] is False
    infos = answer["moveInfos"]
    assert infos and [m["order"] for m in infos] == list(range(len(infos)))
    assert [m["visits"] for m in infos] == sorted((m["visits"] for m in infos), reverse=True)
    for m in infos:
        assert coords.from_gtp(m["move"], N) >= 0 and m["pv"][0] == m["move"]
        assert m["visits"] >= 1 and 0 <= m["winrate"] <= 1 and 0 <= m["prior"] <= 1
        assert ("scoreLead" in m) is scores and ("scoreMean" in m) is scores
        assert not scores or math.isfinite(m["scoreLead"])
    root = answer["rootInfo"]
    assert root["visits"] == visits and 0 <= root["winrate"] <= 1
    assert ("scoreLead" in root) is scores
    assert sum(m["visits"] for m in infos) == visits - 1  # the root's own evaluation


def test_a_katrain_query_gets_moves_scores_ownership_and_policy(checkpoints):
    white = katrain_query("w", overrideSettings={"reportAnalysisWinratesAs": "WHITE"})
    answers, err, code = analyse(
        checkpoints["aux"], [json.dumps(katrain_query("b")), json.dumps(white)]
    )
    assert code == 0, err
    warnings = [a for a in answers if "warning" in a]
    assert {(w["id"], w["field"]) for w in warnings} == {
        (i, f) for i in "bw" for f in ("rules", "priority", "includeMovesOwnership")
    }
    black, white_view = (a for a in answers if "moveInfos" in a)
    assert black["id"] == "b" and black["turnNumber"] == len(MOVES)
    check_turn(black, 24)
    assert black["rootInfo"]["currentPlayer"] == "W"
    ownership, policy = black["ownership"], black["policy"]
    assert len(ownership) == N * N and all(-1 <= v <= 1 for v in ownership)
    assert len(policy) == N * N + 1
    occupied = {coords.from_gtp(v, N) for _, v in MOVES}
    assert all(policy[p] == -1 for p in occupied)
    assert sum(p for p in policy if p != -1) == pytest.approx(1.0, abs=1e-4)
    # The same search from white's view: win rates, scores and ownership flip sides.
    assert white_view["rootInfo"]["winrate"] == pytest.approx(1 - black["rootInfo"]["winrate"])
    assert white_view["rootInfo"]["scoreLead"] == pytest.approx(-black["rootInfo"]["scoreLead"])
    assert white_view["ownership"] == pytest.approx([-v for v in ownership])
    assert [m["move"] for m in white_view["moveInfos"]] == [m["move"] for m in black["moveInfos"]]


def test_analyze_turns_and_initial_stones(checkpoints):
    query = katrain_query("t", analyzeTurns=[0, 2, 1], initialStones=[["B", "D4"]],
                          moves=MOVES[:2], maxVisits=8, includePolicy=False,
                          rules="tromp-taylor", overrideSettings={})  # fmt: skip
    del query["priority"], query["includeMovesOwnership"]
    answers, err, code = analyse(checkpoints["aux"], [json.dumps(query)])
    assert code == 0, err
    assert [a["turnNumber"] for a in answers] == [0, 2, 1]  # no warnings: all fields read
    assert [a["rootInfo"]["currentPlayer"] for a in answers] == ["B", "B", "W"]
    for answer in answers:
        check_turn(answer, 8)
        assert "policy" not in answer
        played = {m["move"] for m in answer["moveInfos"]}
        assert "D4" not in played  # the initial stone is on the board at every turn
    # Black's own stone counts for black at turn 0 (the network's view, leaning its way).
    assert len(answers[0]["ownership"]) == N * N


def test_a_whole_sgf_game_is_reviewed_in_one_call(checkpoints, tmp_path):
    sgf = tmp_path / "game.sgf"
    sgf.write_text("(;GM[1]FF[4]SZ[9]KM[7.5];B[ee];W[cg];B[gc];W[];B[cc])")
    answers, err, code = analyse(checkpoints["aux"], [], "--sgf", str(sgf), "--visits", "8")
    assert code == 0, err
    assert [a["turnNumber"] for a in answers] == list(range(6))
    assert {a["id"] for a in answers} == {"game.sgf"}
    for answer in answers:
        check_turn(answer, 8)
        assert len(answer["ownership"]) == N * N
    assert [a["rootInfo"]["currentPlayer"] for a in answers] == list("BWBWBW")
    big = tmp_path / "big.sgf"
    big.write_text("(;GM[1]FF[4]SZ[19];B[dd])")
    answers, err, code = analyse(checkpoints["aux"], [], "--sgf", str(big))
    assert (code, answers) == (2, [])
    assert err.strip() == f"tabula: --sgf {big}: a 19x19 game; this network plays 9x9"


def test_bad_queries_get_one_error_line_each_and_the_engine_goes_on(checkpoints):
    good = katrain_query("good", maxVisits=4, includePolicy=False, rules="chinese")
    del good["priority"], good["includeMovesOwnership"], good["overrideSettings"]
    del good["analyzeTurns"]  # (the last turn)
    bad = [
        "{not json",
        "[1, 2]",
        json.dumps({"moves": []}),
        json.dumps(good | {"id": "vertex", "moves": [["B", "Z9"]]}),
        json.dumps(good | {"id": "occupied", "moves": [["B", "E5"], ["W", "E5"]]}),
        json.dumps(good | {"id": "player", "moves": [["X", "E5"]]}),
        json.dumps(good | {"id": "size", "boardXSize": 19, "boardYSize": 19}),
        json.dumps(good | {"id": "square", "boardYSize": 7}),
        json.dumps(good | {"id": "turns", "analyzeTurns": [9]}),
        json.dumps(good | {"id": "visits", "maxVisits": 0}),
        json.dumps(good | {"id": "komi", "komi": 7.3}),
        json.dumps(good | {"id": "flag", "includeOwnership": "yes"}),
        json.dumps({k: v for k, v in good.items() if k != "rules"} | {"id": "rules"}),
        json.dumps({"id": "act", "action": "explode"}),
    ]
    answers, err, code = analyse(checkpoints["aux"], [*bad, "", json.dumps(good)])
    assert code == 0 and "Traceback" not in err, err
    errors, (last,) = answers[:-1], answers[-1:]
    assert len(errors) == len(bad) and all(set(e) <= {"error", "field", "id"} for e in errors)
    ids = [None, None, None, *(json.loads(b)["id"] for b in bad[3:])]
    assert [e.get("id") for e in errors] == ids
    fields = [e.get("field") for e in errors[3:]]
    assert fields == ["moves", "moves", "moves", "boardXSize", "boardYSize", "analyzeTurns",
                      "maxVisits", "komi", "includeOwnership", "rules", "action"]  # fmt: skip
    assert errors[4]["error"] == "moves[1]: illegal move W E5"
    assert last["id"] == "good" and last["turnNumber"] == len(MOVES)
    check_turn(last, 4)


def test_actions_are_echoed(checkpoints):
    answers, err, code = analyse(checkpoints["aux"], [
        json.dumps({"id": "v", "action": "query_version"}),
        json.dumps({"id": "c", "action": "clear_cache"}),
    ])  # fmt: skip
    assert code == 0, err
    version, cleared = answers
    assert version["id"] == "v" and version["action"] == "query_version" and version["version"]
    assert cleared == {"id": "c", "action": "clear_cache"}


def test_a_network_without_the_heads_answers_without_scores(checkpoints):
    answers, err, code = analyse(checkpoints["plain"], [json.dumps(katrain_query("p"))])
    assert code == 0, err
    warning = next(a for a in answers if a.get("field") == "includeOwnership")
    assert warning["id"] == "p" and "no ownership head" in warning["warning"]
    (answer,) = (a for a in answers if "moveInfos" in a)
    check_turn(answer, 24, scores=False)
    assert "ownership" not in answer and len(answer["policy"]) == N * N + 1


def test_the_random_player_cannot_analyse():
    answers, err, code = analyse(Path("random"), [])
    assert (code, answers) == (2, [])
    assert err.startswith("tabula: --model random: analysis needs a network")


def kata_entries(line: str) -> tuple[list[dict[str, str]], list[float]]:
    """A ``kata-analyze`` line as Sabaki reads it: ``info`` chunks of key-value pairs until
    ``pv``, and the ``ownership`` values at the end."""
    line, _, owned = line.partition(" ownership ")
    entries = []
    for chunk in line.split("info ")[1:]:
        words, entry = chunk.split(), {}
        while words:
            key = words.pop(0)
            if key == "pv":
                entry["pv"] = " ".join(words)
                break
            entry[key] = words.pop(0)
        entries.append(entry)
    return entries, [float(v) for v in owned.split()]


def test_kata_analyze_over_gtp_shows_scores_and_ownership(checkpoints):
    engine = GtpPipe([TABULA, "gtp", "--model", str(checkpoints["aux"]), "--simulations", "8"])
    try:
        assert "kata-analyze" in engine.ask("list_commands").split()
        assert engine.ask("1 play b E5") == "=1 \n\n"
        engine.send_raw(b"2 kata-analyze 5 ownership true\n")
        assert engine.read_line() == "=2"
        lines = [engine.read_line() for _ in range(2)]
        engine.send_raw(b"3 kata-analyze w interval 5 maxmoves 2 pvVisits false\n")
        while line := engine.read_line():
            lines.append(line)
        assert engine.read_line() == "=3"
        plain = engine.read_line()
        engine.send_raw(b"4 name\n")
        while engine.read_line():
            pass
        assert engine.read_response() == "=4 tabula\n\n"
        assert engine.ask("5 kata-analyze 5 ownership maybe") == "?5 syntax error\n\n"
    finally:
        engine.close()
    for line in lines:
        entries, ownership = kata_entries(line)
        assert entries and len(ownership) == N * N and all(-1 <= v <= 1 for v in ownership)
        for order, entry in enumerate(entries):
            assert int(entry["order"]) == order and entry["move"] != "E5"
            assert 0 <= float(entry["winrate"]) <= 1 and 0 <= float(entry["prior"]) <= 1
            assert math.isfinite(float(entry["scoreLead"])) and entry["scoreMean"]
            assert entry["pv"].split()[0] == entry["move"]
    entries, ownership = kata_entries(plain)
    assert 1 <= len(entries) <= 2 and ownership == []  # not asked for


def test_kata_analyze_without_the_heads_has_no_scores(checkpoints):
    engine = GtpPipe([TABULA, "gtp", "--model", str(checkpoints["plain"])])
    try:
        engine.send_raw(b"kata-analyze 5 ownership true\n")
        assert engine.read_line() == "="
        line = engine.read_line()
        engine.send_raw(b"quit\n")
        while engine.read_line():
            pass
    finally:
        engine.close()
    entries, ownership = kata_entries(line)
    assert entries and ownership == [] and all("scoreLead" not in e for e in entries)
