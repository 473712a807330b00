"""The side effects of ``tabula reproduce``: find the lineage, restore inputs, check hashes."""

from __future__ import annotations

import re
from pathlib import Path

from tabula.errors import UsageError
from tasks import tracking, versioning
from tasks.layout import RunLayout
from tasks.records import Stage
from tasks.resume import finished_iterations

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
