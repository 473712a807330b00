"""`bench.matches`: both ways of asking GnuGo play the same games, and its usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.players import PlayerSpecError, resolve_command
from tests.helpers.bench import assert_usage_error, run_bench


@pytest.mark.slow
def test_asked_at_once_gnugo_plays_the_same_games(tmp_path: Path) -> None:
    try:
        resolve_command("gnugo --mode gtp")
    except PlayerSpecError:
        pytest.skip("GnuGo is not installed (apt-get install gnugo)")
    done = run_bench("matches", "--levels", "1", "--games", "4", "--json", str(tmp_path / "m.json"))
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "m.json").read_text())
    assert [r["way"] for r in out["rows"]] == ["one after another", "at once"]
    for row in out["rows"]:
        assert row["games"] == 4 and row["same_games"] is True
        assert row["wall_s"] > 0 and row["gnugo_cpu_s"] > 0 and row["ours_cpu_s"] > 0
    assert out["commit"] and out["cpu_model"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--games", "0"], "--games 0: at least 1"),
        (["--levels", "1,x"], "--levels '1,x': GnuGo levels from 0 to 10"),
        (["--levels", "11"], "--levels '11': GnuGo levels from 0 to 10"),
        (["--model", "/nonexistent/model.pt"], "no such checkpoint file"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(args: list[str], message: str) -> None:
    assert_usage_error(run_bench("matches", *args), message)
