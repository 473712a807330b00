"""The commands of a run: ``tabula run`` (run or resume the pipeline), ``status`` and ``ui``
(the MLflow UI on the run store)."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import (
    ConfigOpt,
    SetOpt,
    config_from,
    expected_errors,
    interrupt_on_signals,
    one_line_console_errors,
    project_dir,
)


@expected_errors
def run(
    config: ConfigOpt = None,
    iterations: Annotated[
        int | None, typer.Option(help="Iterations to reach (default: config).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: pipeline.name).")] = None,
    dask_address: Annotated[
        str | None, typer.Option(help="Fan self-play out to this Dask scheduler (tcp://host:8786).")
    ] = None,
    core_hours: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="CPU budget in core-hours: the rate schedule fits it, and no iteration starts"
            " once it is spent (resume or extend with a larger one).",
        ),
    ] = None,
    hours: Annotated[
        float | None, typer.Option(min=0.0, help="Wall-clock budget in hours, likewise.")
    ] = None,
    set_: SetOpt = None,
) -> None:
    """Run the pipeline (or resume it at the first unfinished stage)."""
    overrides = list(set_ or []) + ([f"pipeline.name={name}"] if name else [])
    cfg = config_from(config, overrides)  # before importing Prefect: a bad config fails at once
    from flows.api import start_api_for

    # The run's temporary Prefect server starts now, in its own process, while this one
    # imports the pipeline's libraries (about 5 CPU-seconds of one core) instead of after.
    start_api_for(cfg.pipeline.prefect_api_url, dask_address or cfg.pipeline.dask_address)
    from cli.report import print_summary, stage_progress
    from flows.pipeline import run_pipeline
    from tasks.watch import showing

    one_line_console_errors()
    interrupt_on_signals()
    with stage_progress() as display, showing(display):
        rows = run_pipeline(
            cfg, project_dir(), iterations, dask_address, core_hours, hours, cpu_start=0.0
        )
    print_summary(cfg, project_dir(), rows)


@expected_errors
def status(
    run_name: Annotated[str | None, typer.Argument(metavar="RUN", help="Run name.")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Iterations done, the champion and the last Elo of a run."""
    from cli.report import print_status
    from tabula.config import run_name as plain_run_name

    if run_name is not None:  # a path (../x, /etc) is no run: refused before it is read
        plain_run_name(run_name)
    cfg = config_from(config, set_)
    print_status(cfg, project_dir(), run_name or cfg.pipeline.name)


@expected_errors
def ui(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 5000,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Open the MLflow UI on the run store (bound to 127.0.0.1)."""
    from cli.ui import serve_ui

    cfg = config_from(config, set_)
    raise typer.Exit(
        serve_ui(
            cfg.pipeline.mlflow_tracking_uri,
            port=port,
            artifact_root=cfg.pipeline.mlflow_artifact_root,
            project=project_dir(),
        )
    )
