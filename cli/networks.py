"""The commands that make a network: ``tabula init-model`` (the random network a run starts
from) and ``tabula train`` (one training stage, as the pipeline's)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import ConfigOpt, SetOpt, config_from, expected_errors


@expected_errors
def train(
    data: Annotated[
        list[Path], typer.Option("--data", help="Shard files or folders (repeatable).")
    ],
    out: Annotated[Path, typer.Option(help="Exported model file to write (model.pt).")],
    init: Annotated[
        Path | None, typer.Option(help="Lightning .ckpt to resume, or an exported model.")
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option(
            help="SGD steps (default: training.steps, or as many as training.samples_per_row"
            " asks of the newest rows when it is set)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for sampling and initialisation.")] = 0,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run one training stage on a window of self-play shards, as the pipeline's: steps sized
    to the data and games held out when the config says so."""
    from tabula.plan import RunState, next_iteration, train_spec
    from tasks.train import train_stage

    cfg = config_from(config, set_)
    # Planned as the first iteration of a run of pipeline.iterations, as the pipeline would.
    planned = next_iteration(cfg.training, RunState.first(cfg.pipeline.iterations))
    window = [str(d) for d in data]
    spec = train_spec(cfg, window, seed=seed, lr_boundaries=planned.lr_boundaries, steps=steps)
    result = train_stage(cfg, spec, out, init=init)
    held = "" if result.val_loss is None else f", on held-out games {result.val_loss:.4f}"
    typer.echo(
        f"wrote {result.model} ({result.steps} steps to global step {result.global_step}, "
        f"loss {result.loss:.4f}{held}, sha256 {result.weights_sha256[:16]}…, "
        f"{result.samples_per_s:.0f} samples/s)"
    )


@expected_errors
def init_model(
    out: Annotated[Path, typer.Option(help="Checkpoint file to write.")],
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
    run: Annotated[
        str | None, typer.Option(help="The run it starts: its metadata as the pipeline's.")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Write a randomly initialised network (iteration 0 of a run)."""
    from model.checkpoint import CheckpointLineage, save_checkpoint
    from model.network import network_for
    from tasks.stage_files import init_metadata

    cfg = config_from(config, set_)
    net = network_for(cfg, seed)
    lineage = init_metadata(run, seed) if run else CheckpointLineage(out.stem, seed, 0)
    save_checkpoint(out, net, lineage)
    typer.echo(f"wrote {out}")
