"""MLflow: the only package that calls MLflow.

Layout of a run in the tracking store (docs/reproducing.md, "MLflow"):

* one experiment per project (``tabula``, or ``MLFLOW_EXPERIMENT_NAME``; a run begun in the
  per-run experiment ``tabula/<run>`` of earlier versions stays there), marked as model
  training so that the UI opens on its runs; inside it one parent run per pipeline run (kind
  ``pipeline``, tag ``tabula.run``) and one child run per iteration (kind ``iteration``), found
  again by their tags on resume so that a killed and restarted pipeline never leaves orphan
  runs for the same stage; each carries the tabula run's identity (tag ``tabula.run_uid``, the
  run folder's ``uid`` file), so that two projects sharing a store never take each other's runs
  for their own (`identity`);
* the full config as params of the parent and of every child; metrics with their step (the
  global training step for losses and the learning rate, the iteration for everything else);
* datasets through ``log_inputs`` (source: the DVC path, digest: the DVC hash);
* a picture (SVG) of one self-play game and one anchor game of each iteration on its run
  (``pictures/``, `tasks.pictures`);
* every exported checkpoint a logged model of its iteration's run (its evaluation metrics and
  its Elo linked to it) and a version of the run's own registered model (``tabula-<run>``),
  the promoted one carrying the alias ``champion``.

The modules, by concern: ``store`` (where the store is, one client per process and URI, the
experiments), ``preflight`` (a store that is down, refused in seconds), ``identity`` (the run's
uid, the refusal of a taken name, the runs a dead process left RUNNING), ``runs`` (the
`Tracking` handle and what is done to one MLflow run), ``log`` (the Prefect tasks the flows
call with the handle), ``registry`` (model versions, ``models:/...`` URIs), ``tags`` (the tag
names and sets) and ``logger`` (Lightning's logger on an iteration's run, imported from there
by the training stage alone: importing Lightning takes seconds that ``tabula ui`` need not
wait).
"""

from tasks.tracking.identity import RunNameTakenError, mark_killed, read_uid, require_own_name
from tasks.tracking.log import (
    evaluation_metrics,
    fail,
    finish,
    log_artifacts,
    log_datasets,
    log_metrics,
    log_pictures,
    log_run_elos,
    metrics_of,
    open_iteration_run,
    open_pipeline_run,
    register,
    run_link,
)
from tasks.tracking.preflight import TrackingStoreError, require_reachable, without_password
from tasks.tracking.registry import model_version, resolve_model
from tasks.tracking.runs import Tracking
from tasks.tracking.store import (
    EXPERIMENT,
    connect,
    experiment_name,
    find_experiment,
    is_uri,
    resolve_uri,
)
from tasks.tracking.tags import (
    TAG_CHAMPION,
    TAG_ITERATION,
    TAG_KIND,
    TAG_RUN,
    TAG_SHA,
    TAG_UID,
    checkpoint_tags,
    source_tags,
)

__all__ = [
    "EXPERIMENT",
    "TAG_CHAMPION",
    "TAG_ITERATION",
    "TAG_KIND",
    "TAG_RUN",
    "TAG_SHA",
    "TAG_UID",
    "RunNameTakenError",
    "Tracking",
    "TrackingStoreError",
    "checkpoint_tags",
    "connect",
    "evaluation_metrics",
    "experiment_name",
    "fail",
    "find_experiment",
    "finish",
    "is_uri",
    "log_artifacts",
    "log_datasets",
    "log_metrics",
    "log_pictures",
    "log_run_elos",
    "mark_killed",
    "metrics_of",
    "model_version",
    "open_iteration_run",
    "open_pipeline_run",
    "read_uid",
    "register",
    "require_own_name",
    "require_reachable",
    "resolve_model",
    "resolve_uri",
    "run_link",
    "source_tags",
    "without_password",
]
