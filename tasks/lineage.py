"""A checkpoint's lineage as the tags of its registered model version (`checkpoint_tags`):
the same references as its checkpoint file's lineage and its iteration's DVC stage file."""

from __future__ import annotations

from tabula.plan import IterationPlan
from tasks.run.layout import RunLayout
from tasks.run.records import TrainRecord


def checkpoint_tags(
    layout: RunLayout, plan: IterationPlan, train: TrainRecord, tags: dict[str, str]
) -> dict[str, str]:
    """The lineage tags of iteration ``plan.iteration``'s model version (and ``tags``): its
    parent checkpoint, the exact window with its DVC hashes, the seed, the global step, the
    model's DVC hash, the run and the iteration."""
    return {
        "tabula.parent_checkpoint": layout.rel(layout.model(plan.parent)),
        "tabula.window": ",".join(f"{p}@{h}" for p, h in train.window.items()),
        "tabula.seed": str(plan.train_seed),
        "tabula.global_step": str(train.trained.result.global_step),
        "tabula.dvc_model": next(iter(train.hashes.values()), ""),
        "tabula.run": layout.run,
        "tabula.iteration": str(plan.iteration),
        **tags,
    }
