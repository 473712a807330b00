"""``tabula elo`` from outside: a run's games rated on the run's one scale, the GnuGo ladder's
(level 1 = 0) from the run's frozen config, as the pipeline's own fit rates them; ``--anchor``
still fixes any player instead.

The store is a real results store on 9x9 (`tasks.run.results.append_results`); no games are
played, so these run in seconds. That the command agrees with the closing table, ``elo.png``
and ``plots/elo.csv`` of a finished run is `tests/flows/test_pipeline.py`'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tabula.config import dump_config, load_config
from tabula.ladder import fixed_elos
from tasks.run.layout import RunLayout
from tasks.run.results import append_results, ratings_table

TABULA = str(Path(sys.executable).parent / "tabula")
RUN = "ladder"
NETWORK = f"{RUN}/iter-0001"


def _games(project: Path) -> Path:
    """A 9x9 run's store: GnuGo level 1 beats random 18 of 20, the network wins 4 of 20
    against GnuGo and 15 of 20 against random."""
    store = RunLayout(project, "data", RUN).results

    def match(name: str, a: str, b: str, wins: int) -> list[dict]:
        return [
            {
                "match_id": name,
                "game": g,
                "black": a,
                "white": b,
                "reason": "score",
                "winner": 1 if g < wins else -1,
            }  # fmt: skip
            for g in range(20)
        ]

    rows = match("l1-random", "gnugo-l1", "random", 18) + match("net-l1", NETWORK, "gnugo-l1", 4)
    append_results(store, rows + match("net-random", NETWORK, "random", 15))
    return store


def _elo(project: Path, *args: str) -> tuple[dict[str, int], str]:
    """``tabula elo`` in ``project``: {player: its printed Elo}, and the scale line."""
    env = {**os.environ, "COLUMNS": "200", "PREFECT_LOGGING_LEVEL": "WARNING"}
    argv = [TABULA, "elo", "--set", f"pipeline.name={RUN}", *args]
    proc = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in proc.stdout.splitlines()]
    table = {row[1]: int(row[2]) for row in cells if len(row) == 6 and row[0].isdigit()}
    scale = [line for line in proc.stdout.splitlines() if line.startswith("Elo scale: ")]
    assert len(scale) == 1, proc.stdout
    return table, scale[0]


def test_tabula_elo_rates_on_the_gnugo_ladder_as_the_pipeline_does(tmp_path: Path) -> None:
    store = _games(tmp_path)
    table, scale = _elo(tmp_path, "--set", "evaluation.anchors=[gnugo-l1]")
    assert scale == "Elo scale: gnugo-l1 = 0" and table["gnugo-l1"] == 0
    fit = {r["player"]: r["elo"] for r in ratings_table(store, anchors={"gnugo-l1": 0.0})}
    assert table == {player: round(elo) for player, elo in fit.items()}
    assert table["random"] < table[NETWORK] < 0  # random is no longer the origin


def test_tabula_elo_takes_the_scale_from_the_runs_frozen_config(tmp_path: Path) -> None:
    _games(tmp_path)
    frozen = load_config(None, [f"pipeline.name={RUN}", "evaluation.anchors=[gnugo-l1]"])
    assert fixed_elos(frozen.evaluation.anchors, frozen.rules.board_size) == {"gnugo-l1": 0.0}
    RunLayout(tmp_path, "data", RUN).params.write_text(dump_config(frozen))
    # the command's own config names no anchor: the run's frozen one still sets the scale
    table, scale = _elo(tmp_path, "--set", "evaluation.anchors=[]")
    assert scale == "Elo scale: gnugo-l1 = 0" and table["gnugo-l1"] == 0


def test_tabula_elo_with_an_anchor_fixes_that_player(tmp_path: Path) -> None:
    _games(tmp_path)
    table, scale = _elo(tmp_path, "--anchor", "random", "--anchor-elo", "100")
    assert scale == "Elo scale: random = 100" and table["random"] == 100
    assert table["gnugo-l1"] > 100
