"""The side effects of ``tabula reproduce`` and of the ``train`` stage's DVC command: find the
lineage, restore inputs, retrain an iteration as the pipeline ran it, check the weights."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tabula.config import Config, parse_config
from tabula.errors import TabulaError, UsageError
from tasks import tracking, versioning
from tasks.layout import RunLayout
from tasks.records import Stage, TrainRecord
from tasks.resume import finished, finished_iterations

_ITER = re.compile(r"^(?:(?P<run>[^/@:]+)/)?(?:iter-)?(?P<i>[0-9]+)$")


def locate(
    target: str, project: Path, run: str, data_dir: str, tracking_uri: str
) -> tuple[str, int, str]:
    """(run, iteration, recorded weights sha256 or '') for an iteration or a model URI."""
    if target.startswith("models:/"):
        client = tracking.connect(tracking_uri, project)
        rest = target.removeprefix("models:/")
        if "@" in rest:
            name, alias = rest.split("@", 1)
            version = client.get_model_version_by_alias(name, alias)
        else:
            name, number = rest.rsplit("/", 1)
            version = client.get_model_version(name, number)
        tags = version.tags
        return tags["tabula.run"], int(tags["tabula.iteration"]), tags.get(tracking.TAG_SHA, "")
    match = _ITER.match(target)
    if not match:
        raise UsageError(f"{target}: expected ITERATION, RUN/ITERATION or models:/NAME@ALIAS")
    i = int(match["i"])
    if i < 1:
        raise UsageError(f"{target}: iteration 0 is the random initial network, nothing to train")
    return match["run"] or run, i, ""


def require_run(project: Path, run: str, data_dir: str) -> None:
    """Refuse, in one line naming the runs there are, a run that ``project`` neither holds
    (``data_dir/RUN/params.yaml``) nor has a run branch for."""
    local = {p.parent.name for p in (project / data_dir).glob("*/params.yaml")}
    known = sorted(local | set(versioning.run_branches(project)))
    if run not in known:
        runs = ", ".join(known) if known else "none yet"
        raise UsageError(f"no run {run!r} in {project} (runs: {runs})")


def require_iteration(project: Path, run: str, i: int, data_dir: str) -> None:
    """Refuse, in one line, an iteration of ``run`` that was never trained: no training marker
    in the project and none on the run branch."""
    layout = RunLayout(project, data_dir, run)
    marker = layout.marker(i, Stage.TRAIN.marker_name())
    if marker.exists() or versioning.on_run_branch(project, run, layout.rel(marker)):
        return
    done = finished_iterations(layout)
    trained = f"iterations 1 to {done} are" if done else "no iteration is"
    raise UsageError(f"run {run!r} has no trained iteration {i} ({trained} finished here)")


def restore_lineage(layout: RunLayout, i: int) -> None:
    """Bring back the run's text files from its run branch where the clone lacks them."""
    needed = [
        layout.params,
        layout.stage_file(i),
        layout.stage_file(i).with_name("dvc.lock"),
        layout.marker(i, Stage.TRAIN.marker_name()),
    ]
    if all(p.exists() for p in needed):
        return
    if not versioning.is_git_repo(layout.project):
        missing = next(p for p in needed if not p.exists())
        raise UsageError(f"{missing}: missing, and {layout.project} is not a git repository")
    versioning.restore_from_run_branch(layout.project, layout.run, [layout.rel(layout.root)])
    for path in needed:
        if not path.exists():
            raise UsageError(f"{layout.rel(path)}: not recorded for run {layout.run!r}")


def check_inputs(layout: RunLayout, i: int) -> list[str]:
    """Pull the training inputs that are missing; list those that differ from the record."""
    stage_file = layout.stage_file(i)
    deps = versioning.stage_deps(layout.project, stage_file, "train")
    missing = [p for p in deps if not (layout.project / p).exists()]
    if missing:
        versioning.pull(layout.project, missing)
    changed = versioning.changed_deps(layout.project, stage_file, "train")
    return [
        f"{path}: {state}, differs from the recorded {deps.get(path, '?')}"
        for path, state in sorted(changed.items())
    ]


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


def retrain(
    cfg: Config, layout: RunLayout, i: int, model_dir: Path, recorded: str = ""
) -> Reproduction:
    """Re-run iteration ``i``'s training stage as the pipeline ran it (the window, parent,
    seed, torch threads, rate schedule and precision its record holds) into ``model_dir``;
    compare the new weights and global step with the recorded ones (``recorded``: a sha256
    that overrides the record's, as a model version's tag)."""
    from tasks import stages

    record = finished(layout, i, Stage.TRAIN, TrainRecord)
    if record is None:
        raise UsageError(f"{layout.rel(layout.marker(i, Stage.TRAIN.marker_name()))}: missing")
    result = record.trained.result
    recorded = recorded or result.weights_sha256
    parent = layout.trainer_ckpt(i - 1)
    init = parent if i > 1 and parent.exists() else layout.model(i - 1)
    try:
        rebuilt = stages.train.fn(
            cfg,
            layout,
            i,
            list(record.window),
            str(init),
            result.seed,
            None,
            None,
            threads=record.trained.threads,
            model_dir=model_dir,
            lr_boundaries=list(result.lr_boundaries) or None,  # () before it was recorded
            bf16=result.bf16,
        )
    except TabulaError as refused:  # a corrupt shard is named and never trained on
        return Reproduction(
            layout.run, i, recorded, "", [f"training refused its inputs: {refused}"]
        )
    step = rebuilt.result.global_step
    differences = [] if step == result.global_step else [
        f"global step {step} != recorded {result.global_step}"
    ]  # fmt: skip
    return Reproduction(layout.run, i, recorded, rebuilt.result.weights_sha256, differences)


def run_layout(params: Path) -> tuple[Config, RunLayout]:
    """The config and layout of the run whose frozen config is ``params``
    (``data_dir/RUN/params.yaml``, the path a stage file names)."""
    if not params.is_file():
        raise UsageError(f"{params}: no such run config (a run's data_dir/RUN/params.yaml)")
    cfg = parse_config(params.read_text(), source=str(params))
    root = params.resolve().parent
    project = root.parent
    for _ in Path(cfg.pipeline.data_dir).parts:
        project = project.parent
    layout = RunLayout(project, cfg.pipeline.data_dir, root.name)
    if layout.root != root:
        raise UsageError(f"{params}: not in {cfg.pipeline.data_dir}/RUN/ as its config says")
    return cfg, layout


def redo_train_stage(cfg: Config, layout: RunLayout, i: int) -> Reproduction:
    """The ``train`` stage's command (``tabula stage train``): retrain iteration ``i`` into a
    scratch folder and compare the weights, byte for byte, with the recorded ones.

    On a match the iteration's ``model/`` is left as it is when it holds the recorded weights
    (DVC keeps the stage's outputs in place: ``persist``) and is replaced by the rebuilt one
    when it is missing or holds other weights; on a mismatch nothing is written."""
    from model.network import CheckpointError, load_checkpoint, weights_sha256

    target = layout.model_dir(i)
    scratch = Path(tempfile.mkdtemp(prefix=".rebuild-", dir=layout.iteration(i)))
    try:
        verdict = retrain(cfg, layout, i, scratch / target.name)
        if not verdict.match:
            return verdict
        try:
            kept = weights_sha256(load_checkpoint(layout.model(i))[0])
        except (CheckpointError, FileNotFoundError):
            kept = ""
        if kept != verdict.recorded_sha256 or not layout.trainer_ckpt(i).is_file():
            if target.exists():
                shutil.rmtree(target)
            os.replace(scratch / target.name, target)
        return verdict
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
