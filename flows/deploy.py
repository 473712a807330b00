"""The deployment entry point: ``tabula run`` as a flow a Prefect work pool can schedule.

``prefect.yaml`` (repo root) points its deployments here. A worker of the pool runs this flow
in the project folder (the deployment's ``pull`` step sets it), so paths in the parameters are
relative to the project, exactly as on the command line::

    prefect deployment run tabula-scheduled-pipeline/quickstart \\
        --param iterations=2 --param dask_address=tcp://scheduler:8786

The flow only loads the config and calls `flows.pipeline.run_pipeline`, which takes the run's
lock: a second scheduled run of the same run name is refused, not interleaved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from prefect import flow
from pydantic import Field

from flows.pipeline import run_pipeline
from tabula.config import load_config
from tabula.config.models import NAME_PATTERN
from tasks.run.layout import RunLayout
from tasks.run.markers import finished_iterations
from tasks.run.summary import SummaryRow


@flow(name="tabula-scheduled-pipeline", log_prints=True, validate_parameters=True)
def scheduled_pipeline(
    config: str = "configs/quickstart.yaml",
    iterations: Annotated[int, Field(ge=1)] | None = None,
    more: Annotated[int, Field(ge=1)] | None = None,
    name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None,
    dask_address: str | None = None,
    overrides: list[str] | None = None,
    project: str | None = None,
) -> list[SummaryRow]:
    """Run (or resume) a pipeline run; returns the summary rows of its iterations.

    Args:
        config: A YAML config file, relative to the project ("" for the embedded quick start).
        iterations: The iterations to reach (default: with neither this nor ``more``, the
            config's budget on a new run, the quick start's nine minutes, else its
            ``pipeline.iterations``); a run with a budget also stops where it is spent.
        more: When iterations is not given: this many past the run's last finished iteration
            (the daily schedule gives 1, so each scheduled run adds one iteration).
        name: The run name (default: the config's ``pipeline.name``).
        dask_address: A Dask scheduler to fan self-play out to (tcp://host:8786).
        overrides: section.key=value items, as the CLI's --set (for example
            pipeline.mlflow_tracking_uri=http://mlflow:5000), checked against the config's
            types before anything runs.
        project: The folder that holds data/ and the DVC and git records (default: the
            worker's working directory).

    Raises ConfigError for a bad config or override, RunLockedError when the run is already
    going.
    """
    items = list(overrides or []) + ([f"pipeline.name={name}"] if name else [])
    cfg = load_config(config or None, items)
    folder = Path(project or ".")
    if iterations is None and more is not None:
        layout = RunLayout(folder.resolve(), cfg.pipeline.data_dir, cfg.pipeline.name)
        iterations = finished_iterations(layout) + more
    return run_pipeline(cfg, folder, iterations, dask_address)
