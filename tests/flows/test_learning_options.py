"""Issue 15's switches end to end on real Prefect, MLflow and DVC: the Gumbel search and
gating off in a two-iteration run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flows.pipeline import run_pipeline
from model.network import load_checkpoint
from model.shards import read_shard, read_shard_info
from tabula.config import load_config
from tasks.layout import RunLayout
from tasks.resume import champion
from tests.conftest import TINY

pytestmark = pytest.mark.slow


def test_gumbel_search_without_gating(prefect_server, project):
    cfg = load_config(None, [*TINY, "search.algorithm=gumbel", "search.gumbel_m=4",
                             "evaluation.gating=false", "pipeline.name=gumbel"])  # fmt: skip
    rows = run_pipeline(cfg, project, iterations=2)
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)

    # Gating off: no gate games, every candidate promoted, no gate win rate to show.
    assert [r.promoted for r in rows] == [True, True]
    assert [r.win_rate for r in rows] == [None, None]
    gate = json.loads((layout.match(2) / "gate" / "gate.json").read_text())
    assert gate["reason"] == "gating-off" and gate["games_played"] == 0
    best = champion(layout)
    assert best is not None and best.iteration == 2
    assert all(r.elo is not None for r in rows)  # still rated (games against random)

    # Self-play of iteration 2 used iteration 1's network: the latest, not a gated one.
    shards = sorted(layout.selfplay(2).rglob("*.parquet"))
    assert shards
    info = read_shard_info(shards[0])
    _, metadata = load_checkpoint(layout.model(1))
    assert info.metadata["model_id"] == metadata["model_id"]
    assert info.metadata["policy_target"] == "gumbel-improved-policy"
    pi = read_shard(shards[0]).pi
    np.testing.assert_allclose(pi.sum(axis=1), 1.0, rtol=1e-5)
    assert ((pi > 0).sum(axis=1) > cfg.search.simulations).any()  # pi', not 4 visits
