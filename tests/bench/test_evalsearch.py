"""`bench.evalsearch`: its variants' syntax, the game-by-game comparison with the default, and
its usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.evalsearch import discordant, parse_variant, sign_test
from bench.strength import ROOT
from tests.helpers.runs import finished_run


def test_a_variant_is_a_label_and_its_changes():
    assert parse_variant("m8:search.gumbel_m=8") == ("m8", ["search.gumbel_m=8"])
    assert parse_variant("p:search.algorithm=puct, search.leaves_per_game=8") == (
        "p",
        ["search.algorithm=puct", "search.leaves_per_game=8"],
    )


@pytest.mark.parametrize("text", ["m8", "default:search.gumbel_m=8", "a b:x=1", "m8:", "m8:x"])
def test_a_malformed_variant_is_refused(text: str):
    with pytest.raises(ValueError, match="--variant"):
        parse_variant(text)


def test_the_sign_test_is_the_exact_two_sided_binomial():
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 5) == 1.0
    assert sign_test(6, 0) == pytest.approx(2 / 64)
    assert sign_test(1, 9) == pytest.approx(2 * 11 / 1024)
    assert sign_test(9, 1) == sign_test(1, 9)


def _row(game: int, black: str, winner: int | None) -> dict:
    return {"game": game, "black": black, "white": "gnugo-l1" if black == "p" else "p",
            "winner": winner}  # fmt: skip


def test_only_games_that_changed_hands_count():
    base = [_row(0, "p", 1), _row(1, "gnugo-l1", 1), _row(2, "p", -1), _row(3, "gnugo-l1", -1)]
    rows = [_row(0, "p", -1), _row(1, "gnugo-l1", -1), _row(2, "p", -1), _row(3, "gnugo-l1", None)]
    # game 0: won, now lost; game 1: lost, now won; game 2: lost both times; game 3: no result
    assert discordant(base, rows, "p") == {"better": 1, "worse": 1, "p": 1.0}


@pytest.mark.parametrize(
    "args, says",
    [
        (["--config", "baseline", "--variant", "m8"], "want LABEL:KEY=VALUE"),
        (["--config", "baseline", "--games", "0"], "must be >= 1"),
        (["--config", "nope"], "no run of 'nope'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path, args: list[str], says: str):
    done = subprocess.run([sys.executable, "-m", "bench.evalsearch", "--workdir", str(tmp_path),
                           *args], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2
    assert says in done.stderr.splitlines()[-1]


def test_every_variant_plays_the_same_games_against_gnugo_and_a_resume_plays_none(tmp_path):
    """A 5x5 champion against GnuGo level 1: the default and one variant, two games each, into
    the run's store; run again, it plays nothing and reports the same."""
    finished_run(tmp_path, "baseline", 3)
    command = [sys.executable, "-m", "bench.evalsearch", "--workdir", str(tmp_path), "--config",
               "baseline", "--iteration", "3", "--games", "2", "--simulations", "4", "--variant",
               "c4:search.c_puct=4.0", "--json", str(tmp_path / "out.json")]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, env=env)
    first = json.loads((tmp_path / "out.json").read_text())
    assert first["iteration"] == 3 and [v["variant"] for v in first["variants"]] == [
        "default",
        "c4",
    ]
    assert all(v["games"] == 2 and v["cpu_s_per_game"] > 0 for v in first["variants"])
    assert first["variants"][1]["changes"] == ["search.c_puct=4.0"]
    assert set(first["variants"][1]["against_default"]) == {"better", "worse", "p"}
    store = tmp_path / "baseline" / "eval-search"
    before = {f.name: f.read_bytes() for f in store.iterdir()}
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, env=env)
    assert {f.name: f.read_bytes() for f in store.iterdir()} == before
    again = json.loads((tmp_path / "out.json").read_text())
    assert again["variants"] == first["variants"]
