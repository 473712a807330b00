"""``bench.strength``'s search-pays row: a champion searching deeper plays itself at the usual
budget, the games stored so that a resumed benchmark plays none again."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.strength import search_pays
from bench.strength_report import search_table
from tabula.config import ConfigError
from tests.helpers.runs import finished_run


def test_the_deeper_side_is_the_champion_itself_and_a_resume_plays_nothing(
    tmp_path: Path, one_torch_thread: None
) -> None:
    finished_run(tmp_path, "baseline", 3)
    args = argparse.Namespace(simulations=2, deep_simulations=8, search_games=4, search_set=[])
    rows = [{"config": "baseline", "champion": 3}, {"config": "tau0", "champion": 0}]
    search_pays(rows, tmp_path, args)
    record = rows[0]["search_pays"]
    assert record["simulations"] == [8, 2] and record["player"] == "strength-baseline/iter-0003@8"
    assert record["games"] == 4 and record["win_rate"] is not None and record["deeper_set"] == []
    assert "search_pays" not in rows[1]  # (no run: nothing to play)
    (stored,) = (tmp_path / "search-pays").iterdir()  # one match, one file
    before = stored.read_bytes()
    again = [{"config": "baseline", "champion": 3}]
    search_pays(again, tmp_path, args)
    assert again[0]["search_pays"] == record and stored.read_bytes() == before
    assert search_table(rows).row_count == 1


def test_a_changed_setting_of_the_deeper_side_plays_a_match_of_its_own(
    tmp_path: Path, one_torch_thread: None
) -> None:
    """``--search-set`` changes the deeper side's search alone: a match of its own, beside the
    unchanged one; a setting that is not one fails before any game."""
    finished_run(tmp_path, "baseline", 3)
    plain = argparse.Namespace(simulations=2, deep_simulations=8, search_games=2, search_set=[])
    search_pays([{"config": "baseline", "champion": 3}], tmp_path, plain)
    changed = argparse.Namespace(**{**vars(plain), "search_set": ["search.c_puct=4.0"]})
    rows = [{"config": "baseline", "champion": 3}]
    search_pays(rows, tmp_path, changed)
    assert rows[0]["search_pays"]["deeper_set"] == ["search.c_puct=4.0"]
    names = sorted(f.name for f in (tmp_path / "search-pays").iterdir())
    assert len(names) == 2 and any("search.c_puct_4.0" in n for n in names)
    wrong = argparse.Namespace(**{**vars(plain), "search_set": ["search.no_such=1"]})
    with pytest.raises(ConfigError, match="no_such"):
        search_pays([{"config": "baseline", "champion": 3}], tmp_path, wrong)
