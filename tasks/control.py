"""What the Prefect UI shows of an iteration while it runs: a line per finished stage in the
flow run's log (Prefect's run logger), and a progress artifact that moves as the stages
finish, with the iteration's MLflow run named (and linked when the store is a server).

`tabula` sends run loggers' INFO records to the Prefect API and keeps the console at warnings
(``cli.QUIET_DEFAULTS``), so the flow run page holds the stage lines while a terminal stays
quiet. A stage found finished on a resume is logged the same way, marked as found.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from tasks.layout import RunLayout
from tasks.records import EvaluationRecord, PromotionRecord, SelfplayRecord, Stage, TrainRecord
from tasks.summary import artifact_key

#: The share of an iteration done when each stage has finished (self-play dominates).
PROGRESS = {Stage.SELFPLAY: 60.0, Stage.TRAIN: 85.0, Stage.EVALUATE: 97.0, Stage.PROMOTE: 100.0}


def stage_line(record: Any) -> str:
    """One line on a finished stage's record."""
    if isinstance(record, SelfplayRecord):
        return (
            f"self-play: {record.games:,} games, {record.positions:,} positions in "
            f"{record.seconds:.0f} s ({record.positions_per_s:,.0f} positions/s), resignation "
            f"threshold {record.v_resign_used if record.v_resign_used is not None else 'off'}"
        )
    if isinstance(record, TrainRecord):
        r = record.trained.result
        return (
            f"training: {r.steps:,} steps to global step {r.global_step:,}, loss {r.loss:.3f} "
            f"(policy {r.policy_loss:.3f}, value {r.value_loss:.3f}) in "
            f"{record.trained.seconds:.0f} s"
        )
    if isinstance(record, EvaluationRecord):
        d = record.gate.decision
        gate = "off" if not d.games else f"{d.wins}-{d.losses}-{d.draws} ({d.reason})"
        parts = [f"gate {gate}"]
        if record.elo is not None:
            parts.append(
                f"Elo {record.elo.elo:+.0f} [{record.elo.low:+.0f}, {record.elo.high:+.0f}]"
            )
        for name, match in sorted(record.anchors.items()):
            margin = match.summary.mean_margin
            parts.append(
                f"{name} {match.score:.0%}" + ("" if margin is None else f" ({margin:+.1f})")
            )
        return "evaluation: " + ", ".join(parts)
    if isinstance(record, PromotionRecord):
        verdict = "promoted" if record.promoted else "not promoted"
        return f"promotion: {verdict}; champion: iteration {record.champion}"
    return f"{type(record).__name__}: finished"


class IterationProgress:
    """The iteration's progress artifact and stage log lines (`done` after each stage)."""

    def __init__(self, layout: RunLayout, i: int, mlflow_run: str, mlflow_link: str | None):
        from prefect.artifacts import create_link_artifact, create_progress_artifact
        from prefect.logging import get_run_logger

        self.logger = get_run_logger()
        key = artifact_key(layout, i)
        where = f"MLflow run {mlflow_run}" + (f" ({mlflow_link})" if mlflow_link else "")
        artifact = create_progress_artifact(
            progress=0.0, key=f"{key}-progress", description=f"{layout.run} iteration {i}: {where}"
        )
        self.artifact = cast(UUID, artifact)  # (sync here: no event loop runs this flow)
        if mlflow_link:
            create_link_artifact(
                link=mlflow_link, link_text=f"{layout.run} iteration {i} in MLflow",
                key=f"{key}-mlflow",
            )  # fmt: skip
        self.logger.info(f"iteration {i} of {layout.run}: {where}")

    def done(self, stage: Stage, record: Any, found: bool = False) -> None:
        from prefect.artifacts import update_progress_artifact

        self.logger.info(stage_line(record) + (" (finished before)" if found else ""))
        update_progress_artifact(self.artifact, PROGRESS[stage])
