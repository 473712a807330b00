"""External anchors in a real pipeline run: GnuGo games, margins in MLflow and the closing
table, a missing engine skipped with what to install, and the ladder's Elo scale."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli.report import skipped_notes, summary_table
from flows.pipeline import run_pipeline
from tabula.config import load_config
from tabula.ladder import elo_scale, fixed_elos
from tabula.openings import OPENINGS_SEED, opening_set
from tabula.sgf import read_sgf, replay
from tasks import tracking
from tasks.evaluate import anchors_to_play
from tasks.run.layout import RunLayout
from tasks.run.markers import finished
from tasks.run.records import EvaluationRecord, Stage
from tests.conftest import TINY

GNUGO = shutil.which("gnugo") or shutil.which("gnugo", path="/usr/games")
MISSING = "gtp:/nonexistent/engine --mode gtp"


@pytest.mark.slow
@pytest.mark.gnugo
@pytest.mark.skipif(GNUGO is None, reason="gnugo is not installed (apt-get install gnugo)")
def test_a_run_plays_gnugo_logs_the_margin_and_skips_a_missing_engine(
    prefect_server, project: Path
) -> None:
    anchors = [f"evaluation.anchors=[gnugo-l1, '{MISSING}']", "evaluation.anchor_every=1"]
    cfg = load_config(None, [*TINY, *anchors])
    rows = run_pipeline(cfg, project, iterations=1)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    evaluation = finished(layout, 1, Stage.EVALUATE, EvaluationRecord)
    assert evaluation is not None and set(evaluation.anchors) == {"random", "gnugo-l1"}
    gnugo = evaluation.anchors["gnugo-l1"].summary
    assert gnugo.games == 2 and gnugo.scored + gnugo.resignations + gnugo.aborts == 2
    assert evaluation.skipped == {"engine": "/nonexistent/engine is not installed"}
    # both games started from the set's first opening (games 0 and 1 share it, colours swapped)
    opening = opening_set(5, 1, cfg.evaluation.opening_plies, OPENINGS_SEED)[0]
    for result in evaluation.anchors["gnugo-l1"].results:
        assert not Path(result["sgf"]).is_absolute()  # project-relative, as every stored path
        record = read_sgf((project / result["sgf"]).read_bytes())
        assert tuple(m for _, m in record.moves[: len(opening)]) == opening
        assert replay(record).score() == result["score"] or result["score"] is None

    row = rows[0]
    assert set(row.vs_anchors) == {"gnugo-l1"} and row.margins["gnugo-l1"] == gnugo.mean_margin
    header = [c.header for c in summary_table(rows, "t").columns]
    assert "vs gnugo-l1 (margin)" in header
    assert skipped_notes(rows) == ["engine not played: /nonexistent/engine is not installed"]

    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, project)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    child = next(
        r
        for r in client.search_runs([exp.experiment_id])
        if r.data.tags.get(tracking.TAG_KIND) == "iteration"
    )
    assert "eval/score_vs_gnugo-l1" in child.data.metrics
    pictures = {a.path for a in client.list_artifacts(child.info.run_id, "pictures")}
    assert pictures == {"pictures/selfplay.svg", "pictures/anchor-gnugo-l1.svg"}
    picture = client.download_artifacts(child.info.run_id, "pictures/anchor-gnugo-l1.svg")
    assert "vs gnugo-l1" in Path(picture).read_text()
    if gnugo.mean_margin is not None:
        assert child.data.metrics["eval/margin_vs_gnugo-l1"] == pytest.approx(gnugo.mean_margin)
    # 5x5 is off the ladder (9x9's): GnuGo is rated freely and random stays the origin
    fixed = fixed_elos(cfg.evaluation.anchors, cfg.rules.board_size)
    assert fixed == {} and elo_scale(fixed, (r.fit.player for r in evaluation.ratings)) == (
        "random = 0"
    )


def test_anchors_play_every_anchor_every_iterations_and_random_every_random_every() -> None:
    cfg = load_config(None, ["evaluation.anchors=[gnugo-l1]", "evaluation.anchor_every=3"])
    play_3, _ = anchors_to_play(cfg, 3)
    assert play_3 == (["random", "gnugo-l1"] if GNUGO else ["random"])
    assert anchors_to_play(cfg, 4) == ([], {})  # the random player with the anchors (default)
    assert anchors_to_play(cfg, 4, planned=4) == (play_3, {})  # the run's last, rated
    # an iteration in turn skips them when the last planned, which plays them, is near
    assert anchors_to_play(cfg, 3, planned=4) == ([], {})  # 1 ahead: less than 3 / 2
    assert anchors_to_play(cfg, 3, planned=5) == (play_3, {})  # 2 ahead
    assert anchors_to_play(cfg, 3, planned=None) == (play_3, {})  # a plan written before
    every = load_config(
        None, ["evaluation.anchor_every=3", "evaluation.anchor_skip_near_last=false"]
    )
    assert anchors_to_play(every, 3, planned=4)[0] == play_3  # every one in turn
    always = load_config(None, ["evaluation.anchor_every=3", "evaluation.random_every=1"])
    play_4, skipped_4 = anchors_to_play(always, 4)
    assert play_4 == ["random"] and skipped_4 == {}
    apart = load_config(None, ["evaluation.anchor_every=3", "evaluation.random_every=2"])
    assert anchors_to_play(apart, 2)[0] == ["random"]
    assert anchors_to_play(apart, 3)[0] == (["gnugo-l1"] if GNUGO else [])
    none = load_config(None, ["evaluation.anchor_games=0"])
    assert anchors_to_play(none, 3) == ([], {})
    missing = load_config(None, [f"evaluation.anchors=['{MISSING}']", "evaluation.anchor_every=1"])
    assert anchors_to_play(missing, 1) == (
        ["random"],
        {"engine": "/nonexistent/engine is not installed"},
    )


def test_the_ladder_fixes_gnugo_levels_on_9x9_only() -> None:
    fixed = fixed_elos(["gnugo-l1", "gnugo-l10", "gnugo-l3"], 9)
    assert fixed == {"gnugo-l1": 0.0, "gnugo-l10": 114.0}
    assert elo_scale(fixed, ["gnugo-l10", "random"]) == "gnugo-l10 = 114"
    assert elo_scale(fixed, ["gnugo-l10", "random", "gnugo-l1"]) == "gnugo-l1 = 0"
    assert elo_scale(fixed, ["random", "tiny/iter-0001"]) == "random = 0"
    assert fixed_elos(["gnugo-l1"], 19) == {}
