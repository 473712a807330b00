"""The results store (tasks.run.results): round trip, atomic writes, aborts, the table, the plot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tasks.run.results import (
    COLUMNS,
    ResultsStoreError,
    append_results,
    load_results,
    ratings_table,
    results_from_rows,
)
from tasks.watch import plot_elo_curve, read_elo_curve


def row(match: str, game: int | None, black: str, white: str, winner: int | None, **extra) -> dict:
    reason = extra.pop("reason", "score" if winner is not None else "abort: timeout")
    return {
        "match_id": match,
        "game": game,
        "black": black,
        "white": white,
        "winner": winner,
        "reason": reason,
        **extra,
    }


def files(store: Path) -> list[str]:
    return sorted(os.listdir(store))


def test_append_then_load_round_trips_every_column(tmp_path: Path) -> None:
    full = row(
        "iter-0001-vs-random",
        0,
        "iter-0001",
        "random",
        1,
        score=12.5,
        moves=61,
        sgf="data/run/sgf/iter-0001-vs-random/0.sgf",
        timestamp="2025-01-02T03:04:05+00:00",
        iteration=1,
    )
    sparse = row("iter-0001-vs-random", 1, "random", "iter-0001", -1, reason="resign")
    append_results(tmp_path / "results", [full, sparse])
    loaded = load_results(tmp_path / "results")
    assert loaded[0] == full
    assert set(loaded[1]) == set(COLUMNS)
    assert loaded[1]["score"] is None and loaded[1]["iteration"] is None
    assert loaded[1]["timestamp"]  # filled in at append time


def test_appends_accumulate_across_matches_and_calls(tmp_path: Path) -> None:
    append_results(tmp_path, [row("m1", 0, "a", "b", 1)])
    append_results(tmp_path, [row("m1", 1, "b", "a", 1), row("m2", 0, "a", "c", 0)])
    append_results(tmp_path, [row("m1", None, "a", "b", -1)])
    loaded = load_results(tmp_path)
    assert [(r["match_id"], r["game"]) for r in loaded] == [
        ("m1", 0),
        ("m1", 1),
        ("m1", None),
        ("m2", 0),
    ]
    assert files(tmp_path) == ["m1.jsonl", "m2.jsonl"]  # one file per match, no temporaries


def test_a_retried_game_replaces_the_stored_one(tmp_path: Path) -> None:
    append_results(tmp_path, [row("m", 0, "a", "b", 1), row("m", 1, "a", "b", 1)])
    append_results(tmp_path, [row("m", 1, "a", "b", -1)])
    assert [(r["game"], r["winner"]) for r in load_results(tmp_path)] == [(0, 1), (1, -1)]


def test_a_bad_row_writes_nothing(tmp_path: Path) -> None:
    append_results(tmp_path, [row("m", 0, "a", "b", 1)])
    before = (tmp_path / "m.jsonl").read_bytes()
    with pytest.raises(ResultsStoreError, match="winner"):
        append_results(tmp_path, [row("m", 1, "a", "b", 1), row("n", 0, "a", "b", 5)])
    assert (tmp_path / "m.jsonl").read_bytes() == before
    assert files(tmp_path) == ["m.jsonl"]


def test_a_crash_while_writing_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    append_results(tmp_path, [row("m", 0, "a", "b", 1)])
    before = (tmp_path / "m.jsonl").read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        append_results(tmp_path, [row("m", 1, "a", "b", -1)])
    assert (tmp_path / "m.jsonl").read_bytes() == before
    assert files(tmp_path) == ["m.jsonl"]


def test_loading_ignores_a_writers_hidden_temporary(tmp_path: Path) -> None:
    append_results(tmp_path, [row("m", 0, "a", "b", 1)])
    (tmp_path / ".tmp-m.jsonl.abc").write_text('{"half a row')
    assert len(load_results(tmp_path)) == 1


def test_a_corrupt_file_is_named_with_its_line(tmp_path: Path) -> None:
    append_results(tmp_path, [row("m", 0, "a", "b", 1)])
    with (tmp_path / "m.jsonl").open("a") as handle:
        handle.write('{"match_id": "m", "black": \n')
    with pytest.raises(ResultsStoreError, match=r"m\.jsonl:2"):
        load_results(tmp_path)


def test_no_store_yet_means_no_results(tmp_path: Path) -> None:
    assert load_results(tmp_path / "missing") == []
    assert ratings_table(tmp_path / "missing") == []


@pytest.mark.parametrize(
    "bad",
    [
        {**row("m", 0, "a", "b", 1), "colour": "black"},  # unknown column
        {k: v for k, v in row("m", 0, "a", "b", 1).items() if k != "reason"},
        row("../escape", 0, "a", "b", 1),
        row("m", 0, "a", "a", 1),
        row("m", 0, "a", "b", None, reason="score"),  # no winner but not an abort
        row("m", 0, "a", "b", 1, reason="abort: timeout"),  # an abort with a winner
        row("m", 0, "a", "b", True),
        row("m", -1, "a", "b", 1),
        row("m", 0, "a", "b", 1, score=float("inf")),
    ],
)
def test_malformed_rows_are_rejected(tmp_path: Path, bad: dict) -> None:
    with pytest.raises(ResultsStoreError):
        append_results(tmp_path, [bad])
    assert files(tmp_path) == []


def test_aborts_are_stored_but_not_rated_and_forfeits_are(tmp_path: Path) -> None:
    rows = [row("m", g, "cand", "random", 1) for g in range(6)]
    rows.append(row("m", 6, "cand", "random", None))  # abort: timeout
    rows.append(row("m", 7, "random", "cand", -1, reason="forfeit: illegal move"))
    append_results(tmp_path, rows)
    assert len(load_results(tmp_path)) == 8
    assert len(results_from_rows(load_results(tmp_path))) == 7
    table = {r["player"]: r for r in ratings_table(tmp_path)}
    assert table["cand"]["games"] == 7 and table["cand"]["wins"] == 7.0


def test_ratings_table_is_sorted_by_elo_and_anchored(tmp_path: Path) -> None:
    rows = [row("a-vs-random", g, "a", "random", 1 if g % 4 else -1) for g in range(40)]
    rows += [row("b-vs-a", g, "b", "a", 1 if g % 3 else -1) for g in range(30)]
    rows += [row("random-vs-b", g, "random", "b", -1) for g in range(10)]
    append_results(tmp_path, rows)
    table = ratings_table(tmp_path)
    assert [r["player"] for r in table] == ["b", "a", "random"]
    assert [r["rank"] for r in table] == [1, 2, 3]
    assert table[-1]["elo"] == 0.0
    assert all(r["low"] <= r["elo"] <= r["high"] for r in table)
    shifted = ratings_table(tmp_path, anchor="a", anchor_elo=1000.0)
    assert shifted[1]["player"] == "a" and shifted[1]["elo"] == 1000.0


def test_plot_writes_a_png_atomically(tmp_path: Path) -> None:
    points = [(2, 310.0, 250.0, 370.0), (0, 0.0, 0.0, 0.0), (1, 120.0, 60.0, 180.0)]
    out = plot_elo_curve(points, tmp_path / "plots" / "elo.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert files(tmp_path / "plots") == ["elo.png"]
    plot_elo_curve([], tmp_path / "plots" / "elo.png")  # nothing to draw is still a plot
    assert files(tmp_path / "plots") == ["elo.png"]


def test_the_plot_carries_the_numbers_it_draws(tmp_path: Path) -> None:
    points = [(2, -310.123456789, -370.5, -250.25), (1, 1 / 3, -60.0, 180.0)]
    out = plot_elo_curve(points, tmp_path / "elo.png", scale="gnugo-l1 = 0")
    assert read_elo_curve(out) == sorted(points)  # exactly, in iteration order
    from PIL import Image

    Image.new("RGB", (2, 2)).save(tmp_path / "other.png")
    (tmp_path / "text.png").write_text("iteration,elo,low,high\n")
    for other in ("other.png", "text.png"):
        with pytest.raises(ResultsStoreError, match="not an Elo curve"):
            read_elo_curve(tmp_path / other)


def test_plot_rejects_a_point_outside_its_interval(tmp_path: Path) -> None:
    with pytest.raises(ResultsStoreError):
        plot_elo_curve([(0, 10.0, 20.0, 30.0)], tmp_path / "elo.png")
    assert not (tmp_path / "elo.png").exists()
