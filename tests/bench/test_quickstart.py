"""`bench.quickstart`: the held-out figures from the champion's side, the paired comparison,
its usage errors, and one short quick start from a fresh clone, held out against GnuGo."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.quickstart import (
    ROOT,
    _our_side,
    clone,
    goal_met,
    linked_versions,
    paired,
    run_record,
    summary,
)
from tasks.players import PlayerSpecError, resolve_command
from tests.helpers.bench import assert_usage_error, run_bench


def _game(game: int, black: str, winner: int | None, score: float | None) -> dict:
    return {"game": game, "black": black, "white": "x", "winner": winner, "score": score}


def test_a_stored_game_reads_from_the_champions_side() -> None:
    as_black = _our_side(_game(0, "quickstart/iter-0025", -1, -12.5), seed=7)
    assert as_black == {"seed": 7, "game": 0, "black": True, "margin": -12.5, "won": False}
    as_white = _our_side(_game(1, "gnugo-l1", -1, -3.5), seed=7)  # white won: the champion
    assert as_white["margin"] == 3.5 and as_white["won"] is True and not as_white["black"]
    aborted = _our_side(_game(2, "gnugo-l1", None, None), seed=8)
    assert aborted["margin"] is None and aborted["won"] is None


def test_the_summary_counts_wins_whole_board_losses_and_the_interval() -> None:
    # (champion's colour, margin): no point left is -88.5 as black, -73.5 as white
    played = [(True, -88.5), (False, -73.5), (True, -80.5), (False, -20.5), (True, 10.5)]
    games = [
        {"seed": 7, "game": k, "black": black, "margin": m, "won": m > 0}
        for k, (black, m) in enumerate(played)
    ] + [{"seed": 7, "game": 5, "black": False, "margin": None, "won": None}]
    held = summary(games)
    assert (held["games"], held["won"], held["scored"]) == (6, 1, 5)
    assert held["margin"] == pytest.approx(-50.5)  # (-88.5 - 73.5 - 80.5 - 20.5 + 10.5) / 5
    assert held["whole_board_losses"] == 2  # -80.5 as black kept 8 points
    # 1.96 standard errors: the sample's standard deviation, 43.28, over the root of 5
    assert held["margin_95"] == pytest.approx(1.96 * 43.28 / 5**0.5, abs=0.05)


def test_the_goal_is_judged_at_level_one_from_a_timed_clone_only() -> None:
    assert goal_met({"margin": -33.7}, 786.5, level=1) is True
    assert goal_met({"margin": -41.9}, 805.8, level=1) is False
    assert goal_met({"margin": -33.7}, 901.0, level=1) is False  # past 15 minutes
    assert goal_met({"margin": -10.0}, 600.0, level=5) is None
    assert goal_met({"margin": -33.7}, None, level=1) is None  # the install not timed


def test_the_run_record_reads_the_share_of_its_budget(tmp_path: Path) -> None:
    run = tmp_path / "data" / "quickstart"
    run.mkdir(parents=True)
    spent = [{"iteration": 1, "cpu_s": 40.0, "wall_s": 25.0, "cores": 2},
             {"iteration": 2, "cpu_s": 1226.3, "wall_s": 644.0, "cores": 2}]  # fmt: skip
    (run / "budget.json").write_text(
        json.dumps({"core_hours": None, "hours": 0.18, "spent": spent})
    )
    model = "data/quickstart/iter-0002/model/model.pt"
    (run / "champion.json").write_text(json.dumps({"iteration": 2, "model": model}))
    record = run_record(tmp_path)
    assert (record["run_name"], record["champion"], record["iterations"]) == ("quickstart", 2, 2)
    assert record["budget_spent"] == pytest.approx(644.0 / 648.0, abs=1e-4)
    assert record["own_busy"] == pytest.approx(1226.3 / (644.0 * 2), abs=1e-4)
    cpu = {"core_hours": 0.5, "hours": None, "spent": spent}  # a CPU budget: 1226.3 of 1800
    (run / "budget.json").write_text(json.dumps(cpu))
    assert run_record(tmp_path)["budget_spent"] == pytest.approx(1226.3 / 1800, abs=1e-4)


def test_a_linked_environment_is_named_by_its_versions_and_asked_once() -> None:
    venv = Path(sys.executable).parent.parent
    linked_versions.cache_clear()
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    assert linked_versions(venv) == versions
    assert linked_versions(venv) == versions
    assert (linked_versions.cache_info().hits, linked_versions.cache_info().misses) == (1, 1)


def test_a_clone_into_a_folder_that_exists_is_refused(tmp_path: Path) -> None:
    (tmp_path / "0-abc").mkdir()
    with pytest.raises(ValueError, match="exists already"):
        clone("HEAD", tmp_path / "0-abc")


def test_the_paired_difference_takes_the_same_games_only() -> None:
    base = [{"seed": 7, "game": k, "margin": float(-10 * k)} for k in range(4)]
    other = [{"seed": 7, "game": k, "margin": float(-10 * k + 2 + k % 2)} for k in range(4)]
    other.append({"seed": 8, "game": 0, "margin": 50.0})  # no partner: left out
    pair = paired(base, other)
    assert pair is not None and pair["pairs"] == 4
    assert pair["difference"] == pytest.approx(2.5) and pair["difference_95"] < 1.0
    assert paired(base, [{"seed": 9, "game": 0, "margin": 1.0}]) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--games", "0"], "--games 0: at least 1"),
        (["--level", "11"], "--level 11: GnuGo levels from 0 to 10"),
        (["--seeds", "7,x"], "--seeds '7,x': integers, comma-separated"),
        (["--seeds", "7,7"], "--seeds [7, 7]: each seed once"),
        (["--refs", "HEAD,no-such-ref"], "'no-such-ref' is not a commit of this repository"),
        (["--venv", "/nonexistent"], "no bin/tabula in it"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(args: list[str], message: str) -> None:
    assert_usage_error(run_bench("quickstart", *args), message)


@pytest.mark.slow
def test_a_short_quick_start_from_a_fresh_clone_is_timed_and_held_out(tmp_path: Path) -> None:
    """The committed code, cloned, with this environment linked: a quick start cut to one
    small iteration, its champion's two held-out games against GnuGo level 1, read back."""
    try:
        resolve_command("gnugo --mode gtp")
    except PlayerSpecError:
        pytest.skip("GnuGo is not installed (apt-get install gnugo)")
    small = ("--iterations 1 --set selfplay.games=8 --set evaluation.anchor_games=2 "
             "--set evaluation.simulations=8")  # fmt: skip
    out = tmp_path / "q.json"
    done = run_bench("quickstart", "--venv", sys.prefix, "--args", small, "--games", "2",
                     "--seeds", "7", "--workdir", str(tmp_path / "work"), "--json", str(out),
                     timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    figures = json.loads(out.read_text())
    (row,) = figures["rows"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    assert row["commit"] == head
    assert row["iterations"] == 1 and row["champion"] == 1 and row["run_name"] == "quickstart"
    assert row["run"]["wall_s"] > 0 and row["run"]["cpu_s"] > 0 and row["run"]["rc"] == 0
    assert row["install"]["linked"] == {"python": platform.python_version(),
                                        "torch": torch.__version__}  # fmt: skip
    assert row["goal_met"] is None and not (Path(sys.prefix) / "bin" / "tabula").is_symlink()
    assert not (tmp_path / "work" / f"0-{head[:7]}" / ".venv").exists()  # never linked
    # (the run's own count: its CPU from the process's start, its wall from the pipeline's)
    assert row["own_busy"] > 0 and row["budget_spent"] is None
    assert row["held_out"]["games"] == 2 and len(row["games"]) == 2
    assert {g["black"] for g in row["games"]} == {True, False}  # colours alternate
    assert figures["venv"] is True and figures["cpu_model"]
