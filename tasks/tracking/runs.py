"""An iteration's place in the tracking store (`Tracking`, the handle the flows pass to every
log task) and what is done to one MLflow run through a client: find or make it, write its
tags, params, metrics, inputs and artifacts, end it.

MLflow's active run is per thread in its fluent API, and tasks run in pools: everything here
names its run explicitly.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: Which runs of a handle a log task writes to (`Tracking.ids`).
Scope = Literal["iteration", "pipeline", "both"]


@dataclass(frozen=True)
class Tracking:
    """Where a pipeline run, or one of its iterations, records in MLflow: made once by the flow
    that opens the run (`tasks.tracking.open_pipeline_run`, `open_iteration_run`) and passed to
    every log task, which then neither reads the config nor finds the experiment again.

    Strings only, so that it pickles to a Dask worker in another process; each process makes
    its own client from ``uri`` (`tasks.tracking.connect`, one per URI).
    """

    uri: str  # the tracking store, resolved (`resolve_uri`): an absolute sqlite:/// path
    experiment_id: str  # the experiment of the run's MLflow runs (`run_experiment_name`)
    run: str  # the tabula run's name (tag ``tabula.run``)
    uid: str  # the tabula run's identity (tag ``tabula.run_uid``, `identity.run_uid`)
    model: str  # the run's registered model (``tabula-<run>``)
    run_id: str  # this handle's MLflow run: the pipeline's, or an iteration's
    parent_id: str | None = None  # an iteration handle's pipeline run; None for the pipeline's

    def child(self, run_id: str) -> Tracking:
        """The handle of the iteration run ``run_id`` under this pipeline handle's run."""
        return dataclasses.replace(self, run_id=run_id, parent_id=self.run_id)

    @property
    def pipeline_id(self) -> str:
        """The pipeline's MLflow run (the parent of an iteration's)."""
        return self.parent_id or self.run_id

    def ids(self, scope: Scope = "both") -> list[str]:
        """The MLflow runs ``scope`` names: this handle's own run (``iteration``), the
        pipeline's (``pipeline``), or both (the iteration's first; one run for the pipeline's
        own handle)."""
        if scope == "iteration":
            return [self.run_id]
        if scope == "pipeline":
            return [self.pipeline_id]
        return list(dict.fromkeys([self.run_id, self.pipeline_id]))


def find_or_create_run(
    client: Any,
    experiment_id: str,
    key: Mapping[str, str],
    run_name: str,
    parent_id: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> str:
    """The run whose tags equal ``key`` (reopened if it was killed), or a new one."""
    clauses = [f"tags.`{k}` = '{v}'" for k, v in key.items()]
    if parent_id:
        clauses.append(f"tags.`mlflow.parentRunId` = '{parent_id}'")
    found = client.search_runs([experiment_id], filter_string=" and ".join(clauses), max_results=1)
    all_tags = {**key, **(tags or {})}
    if parent_id:
        all_tags["mlflow.parentRunId"] = parent_id
    if found:
        reopen(client, found[0].info.run_id, tags or {}, status=found[0].info.status)
        return found[0].info.run_id
    return create_run(client, experiment_id, run_name, all_tags)


def reopen(client: Any, run_id: str, tags: Mapping[str, str], status: str | None = None) -> None:
    """Mark a found run RUNNING again unless it had finished, and set ``tags`` on it. status:
    the run's, when the search that found it gave it (else it is read)."""
    status = client.get_run(run_id).info.status if status is None else status
    if status != "FINISHED":
        client.update_run(run_id, status="RUNNING")
    write_tags(client, run_id, tags)


def create_run(client: Any, experiment_id: str, run_name: str, tags: Mapping[str, str]) -> str:
    return client.create_run(experiment_id, run_name=run_name, tags=dict(tags)).info.run_id


def write_tags(client: Any, run_id: str, tags: Mapping[str, Any]) -> None:
    from mlflow.entities import RunTag

    if tags:
        client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def write_params(client: Any, run_id: str, params: Mapping[str, Any]) -> None:
    """Log params once; a resumed run with the same config logs nothing new."""
    from mlflow.entities import Param

    logged = client.get_run(run_id).data.params
    new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in logged]
    for start in range(0, len(new), 100):
        client.log_batch(run_id, params=new[start : start + 100])


def write_metrics(
    client: Any,
    run_id: str,
    metrics: Mapping[str, float | None],
    step: int,
    model_id: str | None = None,
) -> None:
    """Metrics at one step (None values skipped); with ``model_id`` they are also the logged
    model's (MLflow 3 links a metric to the model it measures)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [
        Metric(k, float(v), now, int(step), model_id=model_id)
        for k, v in metrics.items()
        if v is not None
    ]
    for start in range(0, len(batch), 500):
        client.log_batch(run_id, metrics=batch[start : start + 500])


def write_points(
    client: Any,
    run_id: str,
    points: Sequence[tuple[str, float, int]],
    model_id: str | None = None,
) -> None:
    """Metric values at steps of their own: ``(key, value, step)``; with ``model_id`` also
    the logged model's."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, int(step), model_id=model_id) for k, v, step in points]
    for start in range(0, len(batch), 500):
        client.log_batch(run_id, metrics=batch[start : start + 500])


def write_dataset(
    client: Any, run_id: str, name: str, dvc_path: str, digest: str, context: str = "training"
) -> None:
    """Record a dataset input: source is the DVC path, digest the DVC hash."""
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = resolve_dataset_source(dvc_path)
    dataset = MetaDataset(source=source, name=name, digest=digest[:36])
    tags = [InputTag("mlflow.data.context", context)]
    client.log_inputs(run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), tags=tags)])


def write_artifact(client: Any, run_id: str, path: Path, artifact_path: str | None = None) -> None:
    if Path(path).is_dir():
        client.log_artifacts(run_id, str(path), artifact_path)
    else:
        client.log_artifact(run_id, str(path), artifact_path)


def end_run(client: Any, run_id: str, status: str = "FINISHED") -> None:
    client.set_terminated(run_id, status=status)


def end_status(error: BaseException) -> str:
    """The MLflow status of a run whose stage raised ``error``: KILLED for an interrupt (Ctrl-C;
    SIGTERM, which Prefect's engine raises as its ``TerminationSignal`` inside a flow run, and
    `cli` as KeyboardInterrupt outside one), FAILED for anything else."""
    from prefect.exceptions import ExternalSignal

    interrupted = isinstance(error, KeyboardInterrupt | SystemExit | ExternalSignal)
    return "KILLED" if interrupted else "FAILED"
