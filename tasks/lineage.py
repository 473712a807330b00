"""The DVC stage files of a run: what each iteration's outputs were made from.

``iter-0000/dvc.yaml`` holds the ``init`` stage (the randomly initialised network that starts
the run); every later ``iter-NNNN/dvc.yaml`` holds ``selfplay``, ``train`` and ``evaluate``.
Each stage names the command that makes it (the same ``tabula`` commands a user can run), its
dependencies (the champion that played, the exact training window, the parent checkpoint)
and the params it reads from the run's frozen ``params.yaml``. Prefect runs the stages; DVC
records their hashes (``tasks.versioning.commit_stage``), so ``dvc dag`` shows each
checkpoint's lineage and ``dvc.lock`` pins it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.layout import RunLayout
from tasks.versioning import write_stage_file

PARAMS = "../params.yaml"


@dataclass(frozen=True)
class IterationPlan:
    """Everything an iteration's stages depend on, fixed before the iteration starts.

    best: iteration whose model is the champion that plays self-play and the gate.
    parent: the checkpoint training continues from (``iter-(i-1)/model``: the latest network,
    whatever the gate decided, as in the paper).
    window: self-play directories (project-relative) training samples from, oldest first.
    """

    iteration: int
    best: int
    parent: int
    window: tuple[str, ...]
    selfplay_seed: int
    train_seed: int
    gate_seed: int


def _rel(layout: RunLayout, target: Path, i: int) -> str:
    return os.path.relpath(target, layout.iteration(i))


def write_init_stage(layout: RunLayout, seed: int) -> Path:
    stage = {
        "init": {
            "cmd": f"tabula init-model --config {PARAMS} --seed {seed} --out model/model.pt",
            "params": [{PARAMS: ["rules", "network"]}],
            "outs": ["model"],
        }
    }
    path = layout.stage_file(0)
    write_stage_file(path, stage)
    return path


def write_iteration_stages(layout: RunLayout, plan: IterationPlan) -> Path:
    i = plan.iteration
    best = _rel(layout, layout.model_dir(plan.best), i)
    parent = _rel(layout, layout.model_dir(plan.parent), i)
    window = [_rel(layout, layout.project / w, i) for w in plan.window]
    data_args = " ".join(f"--data {w}" for w in window)
    parent_init = f"{parent}/train.ckpt" if plan.parent > 0 else f"{parent}/model.pt"
    stages: dict[str, dict[str, Any]] = {
        "selfplay": {
            "cmd": (
                f"tabula selfplay --config {PARAMS} --model {best}/model.pt "
                f"--iteration {i} --seed {plan.selfplay_seed} --out selfplay"
            ),
            "deps": [best],
            "params": [{PARAMS: ["rules", "search", "selfplay"]}],
            "outs": ["selfplay"],
        },
        "train": {
            "cmd": (
                f"tabula train --config {PARAMS} {data_args} --init {parent_init} "
                f"--seed {plan.train_seed} --out model/model.pt"
            ),
            "deps": [*window, parent],
            "params": [{PARAMS: ["rules", "network", "training"]}],
            "outs": ["model"],
        },
        "evaluate": {
            "cmd": (
                f"tabula gate --config {PARAMS} --candidate model/model.pt "
                f"--best {best}/model.pt --seed {plan.gate_seed} --out match"
            ),
            "deps": ["model", best],
            "params": [{PARAMS: ["rules", "search", "evaluation"]}],
            "outs": ["match"],
        },
    }
    path = layout.stage_file(i)
    write_stage_file(path, stages)
    return path
