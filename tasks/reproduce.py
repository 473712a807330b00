"""The side effects of ``tabula reproduce`` and of the ``train`` stage's DVC command: find the
lineage, restore inputs, retrain an iteration as the pipeline ran it, check the weights."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from model.evaluator import set_threads
from tabula.config import Config, parse_config, run_name
from tabula.errors import TabulaError, UsageError
from tabula.plan import torch_threads
from tasks import tracking, versioning
from tasks.planning import read_plan
from tasks.run.layout import RunLayout
from tasks.run.markers import finished, finished_iterations
from tasks.run.records import SelfplayRecord, Stage, TrainRecord
from tasks.selfplay import play_spec
from tasks.train import train

_ITER = re.compile(r"^(?:(?P<run>[^/@:]+)/)?(?:iter-)?(?P<i>[0-9]+)$")


def locate(
    target: str, project: Path, run: str, data_dir: str, tracking_uri: str
) -> tuple[str, int, str]:
    """(run, iteration, recorded weights sha256 or '') for an iteration or a model URI."""
    if target.startswith("models:/"):
        tags = tracking.model_version(target, tracking_uri, project).tags
        return tags["tabula.run"], int(tags["tabula.iteration"]), tags.get(tracking.TAG_SHA, "")
    match = _ITER.match(target)
    if not match:
        raise UsageError(f"{target}: expected ITERATION, RUN/ITERATION or models:/NAME@ALIAS")
    i = int(match["i"])
    if i < 1:
        raise UsageError(f"{target}: iteration 0 is the random initial network, nothing to train")
    return match["run"] or run, i, ""


def require_run(project: Path, run: str, data_dir: str) -> None:
    """Refuse, in one line, a name that is not a plain run name (`tabula.config.run_name`:
    ``../x`` is none) and, naming the runs there are, a run that ``project`` neither holds
    (``data_dir/RUN/params.yaml``) nor has a run branch for."""
    run_name(run)
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
        layout.stage_lock(i),
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
    """Re-run iteration ``i``'s training stage as the pipeline ran it (its plan's training
    spec, on the torch threads its record holds) into ``model_dir``; compare the new weights
    and global step with the recorded ones (``recorded``: a sha256 that overrides the
    record's, as a model version's tag)."""
    record = finished(layout, i, Stage.TRAIN, TrainRecord)
    plan = read_plan(cfg, layout, i)
    if record is None or plan is None or plan.train is None:
        raise UsageError(f"{layout.rel(layout.marker(i, Stage.TRAIN.marker_name()))}: missing")
    result = record.trained.result
    recorded = recorded or result.weights_sha256
    try:
        rebuilt = train.fn(
            cfg, layout, plan.train, None, None, threads=record.trained.threads, model_dir=model_dir
        )
    except versioning.LockFileError:
        raise  # a lock that does not read is the user's to restore, not a verdict on the weights
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
    from model.checkpoint import CheckpointError, load_checkpoint
    from model.network import weights_sha256

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


def redo_selfplay_stage(cfg: Config, layout: RunLayout, i: int) -> list[str]:
    """The ``selfplay`` stage's command (``tabula stage selfplay``): replay iteration ``i``'s
    self-play as the pipeline ran it (every worker with its own seed, games and folder, the
    recorded champion, the resignation threshold it played with) into a scratch folder and
    compare its DVC hash with the one ``dvc.lock`` recorded. Returns what differs (empty: a
    match).

    On a match ``selfplay/`` is left as it is when it holds the same files, byte for byte, and
    replaced by the replay when it is missing or differs; on a mismatch nothing is written."""
    plan = read_plan(cfg, layout, i)
    record = finished(layout, i, Stage.SELFPLAY, SelfplayRecord)
    if plan is None or record is None:
        raise UsageError(f"run {layout.run!r} has no finished self-play in iteration {i}")
    target = layout.selfplay(i)
    recorded = versioning.stage_outs(layout.project, layout.stage_file(i), "selfplay")
    expected = recorded.get(layout.rel(target), "")
    scratch = Path(tempfile.mkdtemp(prefix=".rebuild-", dir=layout.iteration(i)))
    try:
        rebuilt = scratch / target.name
        set_threads(torch_threads(cfg.selfplay.workers))
        for spec in plan.workers:
            folder = layout.project / spec.folder
            play_spec(cfg, layout.project, spec, out=rebuilt / folder.relative_to(target))
        replayed = versioning.dir_hash(rebuilt)
        if replayed != expected:
            kept = _differing_files(target, rebuilt) if target.exists() else []
            return [f"{layout.rel(target)}: replayed {replayed}, recorded {expected or '?'}",
                    *kept]  # fmt: skip
        if not target.exists() or _differing_files(target, rebuilt):
            if target.exists():
                shutil.rmtree(target)
            os.replace(rebuilt, target)
        return []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _differing_files(recorded: Path, rebuilt: Path) -> list[str]:
    """The files that are in one folder only or differ in bytes (paths under ``recorded``)."""

    def files(root: Path) -> dict[str, Path]:
        return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}

    a, b = files(recorded), files(rebuilt)
    return [
        f"{recorded.name}/{name}: "
        + ("not replayed" if name not in b else "not recorded" if name not in a else "differs")
        for name in sorted(a.keys() | b.keys())
        if name not in a or name not in b or a[name].read_bytes() != b[name].read_bytes()
    ]
