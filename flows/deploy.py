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

from prefect import flow

from flows.pipeline import run_pipeline
from tabula.config import load_config
from tasks.summary import SummaryRow


@flow(name="tabula-scheduled-pipeline", log_prints=True)
def scheduled_pipeline(
    config: str = "configs/quickstart.yaml",
    iterations: int | None = None,
    name: str | None = None,
    dask_address: str | None = None,
    overrides: list[str] | None = None,
    project: str | None = None,
) -> list[SummaryRow]:
    """Run (or resume) a pipeline run; returns the summary rows of its iterations.

    config: a YAML file (relative to the working directory), or "" for the embedded quick-start
    config. iterations: iterations to reach (default: ``pipeline.iterations``). name: the run
    name (default: ``pipeline.name``). dask_address: fan self-play out to this Dask scheduler
    (default: ``pipeline.dask_address``). overrides: ``section.key=value`` items, as the CLI's
    ``--set`` (e.g. ``pipeline.mlflow_tracking_uri=http://mlflow:5000``). project: the folder
    that holds ``data/`` and the DVC and git records (default: the working directory).

    Raises ConfigError for a bad config, RunLockedError when the run is already going.
    """
    items = list(overrides or []) + ([f"pipeline.name={name}"] if name else [])
    cfg = load_config(config or None, items)
    return run_pipeline(cfg, Path(project or "."), iterations, dask_address)
