"""A finished `bench.strength` run's folder, as the benchmark leaves it, for the benches that
rate its checkpoints."""

from __future__ import annotations

from pathlib import Path

from bench.strength import run_layout
from model.checkpoint import save_checkpoint
from model.network import make_network
from tabula.config import dump_config, load_config


def finished_run(workdir: Path, name: str, i: int) -> None:
    """Config ``name``'s run under ``workdir``: its params (5x5, PUCT) and iteration ``i``'s
    checkpoint, a one-block network."""
    layout = run_layout(workdir / name, name)
    layout.root.mkdir(parents=True)
    cfg = load_config(None, ["rules.board_size=5", "rules.komi=0.5", "search.algorithm=puct"])
    layout.params.write_text(dump_config(cfg))
    net = make_network(5, blocks=1, filters=8, seed=0, value_hidden=16)
    layout.model(i).parent.mkdir(parents=True)
    save_checkpoint(layout.model(i), net, {"model_id": layout.model_id(i)})
