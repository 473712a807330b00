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
from pathlib import Path

from prefect import flow

from tabula.config import parse_config
from tasks.reproduce import Reproduction, check_inputs, locate, restore_lineage, retrain
from tasks.run.layout import RunLayout
from tasks.versioning import ensure_repo


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
    differences = check_inputs(layout, i)
    with tempfile.TemporaryDirectory(prefix="tabula-reproduce-") as scratch:
        verdict = retrain(cfg, layout, i, Path(scratch) / "model", recorded)
    verdict.differences[:0] = differences
    return verdict
