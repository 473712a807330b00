"""Rebuild a checkpoint from its lineage and compare its weights with the recorded ones.

``tabula reproduce ITERATION | models:/NAME@ALIAS | models:/NAME/VERSION``:

1. find the run and iteration (a model version carries them as tags);
2. restore the iteration's stage file and lock from the run branch when the clone lacks them;
3. pull the training stage's recorded inputs (the window's self-play directories and the parent
   checkpoint) from the DVC remote where they are missing, and check each one against the hash
   that ``dvc.lock`` recorded;
4. re-run the training stage with the recorded seed, steps and params into a scratch folder;
5. compare the sha256 of the new weights with the recorded one: MATCH, or what differs.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow

from tabula.config import parse_config
from tabula.errors import TabulaError, UsageError
from tasks import stages
from tasks.layout import RunLayout
from tasks.records import Stage, TrainRecord
from tasks.reproduce import check_inputs, locate, restore_lineage
from tasks.resume import finished
from tasks.versioning import ensure_repo


@dataclass
class Reproduction:
    """The verdict of a reproduction: ``match`` and, when not, what differs."""

    run: str
    iteration: int
    recorded_sha256: str
    rebuilt_sha256: str
    differences: list[str] = field(default_factory=list)

    @property
    def match(self) -> bool:
        return self.recorded_sha256 == self.rebuilt_sha256 and not self.differences


@flow(name="tabula-reproduce", flow_run_name="reproduce-{target}")
def reproduce(
    target: str, project: str, run: str, tracking_uri: str, dvc_remote: str, data_dir: str = "data"
) -> Reproduction:
    """Rebuild ``target``'s checkpoint in ``project`` (a clone is enough: see the module)."""
    project_path = Path(project).resolve()
    ensure_repo(project_path, dvc_remote)
    run, i, recorded = locate(target, project_path, run, data_dir, tracking_uri)
    layout = RunLayout(project_path, data_dir, run)
    restore_lineage(layout, i)
    cfg = parse_config(layout.params.read_text(), source=str(layout.params))
    train_record = finished(layout, i, Stage.TRAIN, TrainRecord)
    if train_record is None:  # restore_lineage brought it back or refused
        raise UsageError(f"{layout.rel(layout.marker(i, Stage.TRAIN.marker_name()))}: missing")
    recorded_result = train_record.trained.result
    recorded = recorded or recorded_result.weights_sha256
    differences = check_inputs(layout, i)
    parent = layout.trainer_ckpt(i - 1)
    init = parent if i > 1 and parent.exists() else layout.model(i - 1)
    with tempfile.TemporaryDirectory(prefix="tabula-reproduce-") as scratch:
        try:
            rebuilt = stages.train.fn(
                cfg,
                layout,
                i,
                list(train_record.window),
                str(init),
                recorded_result.seed,
                None,
                None,
                threads=train_record.trained.threads,
                model_dir=Path(scratch) / "model",
                lr_boundaries=list(recorded_result.lr_boundaries) or None,  # () before recorded
                bf16=recorded_result.bf16,
            )
        except TabulaError as refused:  # a corrupt shard is named and never trained on
            differences.append(f"training refused its inputs: {refused}")
            return Reproduction(run, i, recorded, "", differences)
    step, recorded_step = rebuilt.result.global_step, recorded_result.global_step
    if step != recorded_step:
        differences.append(f"global step {step} != recorded {recorded_step}")
    return Reproduction(run, i, recorded, rebuilt.result.weights_sha256, differences)
