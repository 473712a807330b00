"""The tags tabula sets on MLflow runs and model versions: the names (``TAG_*``) that find a
run's runs again, MLflow's source tags, and a checkpoint's lineage (`checkpoint_tags`)."""

from __future__ import annotations

from tabula.plan import IterationPlan
from tasks.run.layout import RunLayout
from tasks.run.records import TrainRecord

#: The tabula run an MLflow run or model version belongs to (its name).
TAG_RUN = "tabula.run"
#: ``pipeline`` (a run's parent MLflow run) or ``iteration`` (one child per iteration).
TAG_KIND = "tabula.kind"
#: An iteration run's (and a model version's) iteration number.
TAG_ITERATION = "tabula.iteration"
#: A model version's weights (`model.network.weights_sha256`): registering again is a no-op.
TAG_SHA = "tabula.weights_sha256"
#: The tabula run's identity (`tasks.tracking.identity.run_uid`): its runs, apart from other
#: projects' runs of the same name in a shared store. Runs begun before it have none.
TAG_UID = "tabula.run_uid"
#: The iteration whose network is the champion after an iteration's promotion.
TAG_CHAMPION = "tabula.champion_iteration"


def source_tags(commit: str) -> dict[str, str]:
    """MLflow's standard source tags for code at git ``commit`` (`versioning.code_commit`: a
    sha, with ``-dirty`` when files differ, or ``unknown``), shown in the UI's run overview."""
    tags = {"mlflow.source.name": "tabula run", "mlflow.source.type": "LOCAL"}
    if commit != "unknown":
        tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
    return tags


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
        TAG_RUN: layout.run,
        TAG_ITERATION: str(plan.iteration),
        **tags,
    }
