"""The commands of docs/reproducing.md: ``tabula reproduce`` (rebuild a checkpoint and
compare), ``tabula stage selfplay|train`` (the DVC commands of those stages: the same check, in
the iteration's place) and ``tabula push`` (publish a run's data, branch and tags)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import (
    ConfigOpt,
    SetOpt,
    config_from,
    expected_errors,
    one_line_console_errors,
    project_dir,
)

ParamsOpt = Annotated[
    Path, typer.Option(help="The run's frozen config (data_dir/RUN/params.yaml).")
]

stage_app = typer.Typer(
    help="The commands of a run's DVC stages (what `dvc repro` runs).", no_args_is_help=True
)


def _verdict(result) -> None:  # a tasks.reproduce.Reproduction
    typer.echo(f"run {result.run} iteration {result.iteration}")
    typer.echo(f"recorded sha256 {result.recorded_sha256}")
    typer.echo(f"rebuilt  sha256 {result.rebuilt_sha256}")
    for line in result.differences:
        typer.echo(f"differs: {line}")
    typer.echo("MATCH" if result.match else "MISMATCH")
    if not result.match:
        raise typer.Exit(1)


@expected_errors
def reproduce(
    target: Annotated[
        str,
        typer.Argument(
            help="ITERATION, RUN/ITERATION, models:/NAME@ALIAS or models:/NAME/VERSION."
        ),
    ],
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Rebuild a checkpoint from its DVC lineage and compare the weights' sha256."""
    from flows.api import prefect_api
    from flows.reproduce import reproduce as reproduce_flow
    from tasks.reproduce import locate, require_iteration, require_run

    cfg = config_from(config, set_)
    # An unknown run, iteration, model or store is one line, before anything is created.
    uri = cfg.pipeline.mlflow_tracking_uri
    run, i, _ = locate(target, project_dir(), cfg.pipeline.name, cfg.pipeline.data_dir, uri)
    require_run(project_dir(), run, cfg.pipeline.data_dir)
    require_iteration(project_dir(), run, i, cfg.pipeline.data_dir)
    one_line_console_errors()
    with prefect_api(cfg.pipeline.prefect_api_url):
        reproduction = reproduce_flow(
            target,
            str(project_dir()),
            cfg.pipeline.name,
            cfg.pipeline.mlflow_tracking_uri,
            cfg.pipeline.dvc_remote,
            cfg.pipeline.data_dir,
        )
    _verdict(reproduction)


@stage_app.command("train")
@expected_errors
def stage_train(
    params: ParamsOpt,
    iteration: Annotated[int, typer.Option(min=1, help="The iteration to retrain.")],
) -> None:
    """Retrain an iteration as the pipeline did and check its weights byte for byte.

    The ``train`` stage's command in ``iter-NNNN/dvc.yaml``, so ``dvc repro -f -s
    ITERATION/dvc.yaml:train`` is a reproduction check: a MATCH keeps (or, where missing,
    brings back) the recorded checkpoint; a MISMATCH exits 1 and writes nothing."""
    from tasks.reproduce import redo_train_stage, require_iteration, run_layout

    cfg, layout = run_layout(params)
    require_iteration(layout.project, layout.run, iteration, layout.data_dir)
    _verdict(redo_train_stage(cfg, layout, iteration))


@stage_app.command("selfplay")
@expected_errors
def stage_selfplay(
    params: ParamsOpt,
    iteration: Annotated[int, typer.Option(min=1, help="The iteration to replay.")],
) -> None:
    """Replay an iteration's self-play as the pipeline did and check the games byte for byte.

    The ``selfplay`` stage's command in ``iter-NNNN/dvc.yaml``: a MATCH keeps (or, where
    missing, brings back) the recorded games; a MISMATCH exits 1 and writes nothing."""
    from tasks.reproduce import redo_selfplay_stage, run_layout

    cfg, layout = run_layout(params)
    differences = redo_selfplay_stage(cfg, layout, iteration)
    typer.echo(f"run {layout.run} iteration {iteration} self-play")
    for line in differences:
        typer.echo(f"differs: {line}")
    typer.echo("MISMATCH" if differences else "MATCH")
    if differences:
        raise typer.Exit(1)


@expected_errors
def push(
    run_name: Annotated[str | None, typer.Argument(metavar="RUN", help="Run name.")] = None,
    remote: Annotated[str, typer.Option(help="The git remote to push to.")] = "origin",
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Publish a run: its data to the DVC remote, then its branch and iteration tags to git."""
    from tasks.reproduce import require_run
    from tasks.versioning import RUN_BRANCH_PREFIX, push_run

    cfg = config_from(config, set_)
    run = run_name or cfg.pipeline.name
    require_run(project_dir(), run, cfg.pipeline.data_dir)
    files, refs = push_run(project_dir(), run, remote)
    typer.echo(f"dvc: {files} files pushed to the run's DVC remote")
    typer.echo(f"git: {RUN_BRANCH_PREFIX}{run} and {len(refs) - 1} iteration tags on {remote}")
