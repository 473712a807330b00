"""Anchor names of the GnuGo ladder: specs, store names, fixed Elo, refusals."""

from __future__ import annotations

import pytest

from tabula.errors import UsageError
from tabula.ladder import (
    GNUGO_ELO_9X9,
    anchor_elo,
    anchor_label,
    anchor_program,
    anchor_spec,
    check_anchor,
    gnugo_spec,
)


def test_gnugo_levels_play_under_our_rules() -> None:
    spec = anchor_spec("gnugo-l5")
    assert spec == gnugo_spec(5) and spec.startswith("gtp:gnugo ")
    for flag in ("--chinese-rules", "--positional-superko", "--capture-all-dead", "--level 5"):
        assert flag in spec
    assert anchor_label("gnugo-l5") == "gnugo-l5" and anchor_program("gnugo-l5") == "gnugo"


def test_any_gtp_engine_is_an_anchor_named_as_the_store_names_it() -> None:
    name = "gtp:/opt/engines/pachi -t =5000"
    assert anchor_spec(name) == name and anchor_program(name) == "/opt/engines/pachi"
    assert anchor_label(name) == "pachi" and anchor_elo(name, 9) is None


def test_level_one_is_the_origin_on_9x9_and_other_sizes_are_rated_freely() -> None:
    assert anchor_elo("gnugo-l1", 9) == 0.0 == GNUGO_ELO_9X9[1]
    assert all(anchor_elo(f"gnugo-l{n}", 9) == e for n, e in GNUGO_ELO_9X9.items())
    assert anchor_elo("gnugo-l1", 19) is None


@pytest.mark.parametrize("bad", ["random", "gnugo", "gnugo-l0", "gnugo-l11", "gnugo-lx", "gtp: "])
def test_other_names_are_refused_in_one_line(bad: str) -> None:
    with pytest.raises(UsageError, match="gnugo-l1 .. gnugo-l10"):
        check_anchor(bad)
