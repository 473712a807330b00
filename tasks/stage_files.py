"""The DVC stage files of a run: what each iteration's outputs were made from.

``iter-0000/dvc.yaml`` holds the ``init`` stage (the randomly initialised network that starts
the run); every later ``iter-NNNN/dvc.yaml`` holds ``selfplay``, ``train`` and ``evaluate``.
Each stage names the command that makes it (the same ``tabula`` commands a user can run), its
dependencies (the champion that played, the exact training window, the parent checkpoint)
and the params it reads from the run's frozen ``params.yaml`` (`tasks.frozen_config`). Prefect
runs the stages; DVC records their hashes (`tasks.commits.dvc_commit`), so ``dvc dag`` shows
each checkpoint's lineage and ``dvc.lock`` pins it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model.checkpoint import CheckpointLineage
from tabula.plan import IterationPlan
from tasks.run.layout import RunLayout
from tasks.versioning import write_stage_file


def _from_iteration(layout: RunLayout, i: int) -> Callable[[Path], str]:
    """A path as iteration i's stage file names it: from the iteration's folder, where DVC
    runs the stage's command."""
    return lambda path: os.path.relpath(path, layout.iteration(i))


#: Why the ``evaluate`` stage is ``frozen`` (DVC's ``desc``): its command (the ``tabula gate``
#: a user can run by hand) does not redo all that the pipeline did, so ``dvc repro`` verifies
#: its outputs instead of rewriting them.
FROZEN_WHY = {
    "evaluate": "frozen: the pipeline also played the anchors and added every game to the run's"
    " results store (data/<run>/results), which DVC does not track",
}

#: The ``selfplay`` and ``train`` stages are exact: their commands redo what the pipeline did
#: and check it against the record, keeping the recorded outputs (``persist``).
EXACT_DESC = {
    "selfplay": "replays this iteration's self-play as the pipeline did (every worker with its"
    " seed, games and folder, the recorded champion and resignation threshold) and compares the"
    " games byte for byte with the recorded ones: a mismatch fails and writes nothing; DVC"
    " leaves the outputs in place (persist)",
    "train": "retrains this iteration as the pipeline did (its recorded window, parent, seed,"
    " threads, rate schedule and precision) and compares the weights byte for byte with the"
    " recorded ones: a mismatch fails and writes nothing; DVC leaves the outputs in place"
    " (persist)",
}


def init_metadata(run: str, seed: int) -> CheckpointLineage:
    """The lineage of a run's randomly initialised checkpoint (the pipeline's ``init`` stage
    and ``tabula init-model --run``, so that ``dvc repro`` of ``init`` redoes it exactly)."""
    return CheckpointLineage(
        model_id=f"{run}/iter-0000", seed=seed, global_step=0, run=run, iteration=0
    )


def write_init_stage(layout: RunLayout, seed: int) -> Path:
    """Iteration 0's stage: exact (``dvc repro -f -s ...iter-0000/dvc.yaml:init`` rebuilds the
    same bytes), so not frozen."""
    here = _from_iteration(layout, 0)
    params = here(layout.params)
    stage = {
        "init": {
            "cmd": (
                f"tabula init-model --config {params} --seed {seed} --run {layout.run} "
                f"--out {here(layout.model(0))}"
            ),
            "params": [{params: ["rules", "network"]}],
            "outs": [here(layout.model_dir(0))],
        }
    }
    path = layout.stage_file(0)
    write_stage_file(path, stage)
    return path


def write_iteration_stages(layout: RunLayout, plan: IterationPlan) -> Path:
    i = plan.iteration
    here = _from_iteration(layout, i)
    params, model, match = here(layout.params), here(layout.model_dir(i)), here(layout.match(i))
    best = here(layout.model_dir(plan.best))
    window = [here(layout.project / w) for w in plan.window]
    stages: dict[str, dict[str, Any]] = {
        "selfplay": {
            "cmd": f"tabula stage selfplay --params {params} --iteration {i}",
            "desc": EXACT_DESC["selfplay"],
            "deps": [best],
            "params": [{params: ["rules", "search", "selfplay"]}],
            "outs": [{here(layout.selfplay(i)): {"persist": True}}],
        },
        "train": {
            "cmd": f"tabula stage train --params {params} --iteration {i}",
            "desc": EXACT_DESC["train"],
            "deps": [*window, here(layout.model_dir(plan.parent))],
            "params": [{params: ["rules", "network", "training"]}],
            "outs": [{model: {"persist": True}}],
        },
        "evaluate": {
            "cmd": (
                f"tabula gate --config {params} --candidate {here(layout.model(i))} "
                f"--best {here(layout.model(plan.best))} --seed {plan.gate_seed} --out {match}"
            ),
            "deps": [model, best],
            "params": [{params: ["rules", "search", "evaluation"]}],
            "outs": [match],
        },
    }
    for name, why in FROZEN_WHY.items():
        stages[name].update({"desc": why, "frozen": True})
    path = layout.stage_file(i)
    write_stage_file(path, stages)
    return path
