"""Lightning's MLflow logger on a run the caller owns: the training stage's losses and
learning rate, by global step, in the iteration's MLflow run."""

from __future__ import annotations

import os
from typing import Any

from pytorch_lightning.loggers import MLFlowLogger


class BorrowedRunLogger(MLFlowLogger):
    """MLFlowLogger writing into a run the caller owns: it neither logs Lightning's hparams
    (the tracking task logs the config once; MLflow params are immutable) nor ends the run,
    nor leaves ``MLFLOW_TRACKING_URI`` set in the process's environment (MLflow's
    ``set_tracking_uri``, which it calls, sets it; processes started later would inherit it)."""

    @property
    def experiment(self) -> Any:
        before = os.environ.get("MLFLOW_TRACKING_URI")
        try:
            return super().experiment
        finally:
            if before is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = before

    def log_hyperparams(self, params: Any) -> None:
        return None

    def finalize(self, status: str = "success") -> None:
        return None


def lightning_logger(tracking_uri: str | None, run_id: str | None) -> BorrowedRunLogger | None:
    """Lightning's MLflow logger on run ``run_id`` of the store ``tracking_uri`` (a new run
    in experiment ``tabula-train`` if None), or None without a store."""
    if tracking_uri is None:
        return None
    return BorrowedRunLogger(
        tracking_uri=tracking_uri, run_id=run_id, experiment_name="tabula-train"
    )
