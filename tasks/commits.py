"""The commits of a run: each finished stage's outputs into DVC (``dvc.lock``, the DVC
remote), and after each iteration its records onto the run's git branch ``tabula/runs/<run>``
with a tag per iteration (`tasks.versioning` makes both)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from tasks.retry import IO_RETRIES
from tasks.run.faults import kill_point
from tasks.run.layout import RunLayout
from tasks.run.reports import fixed_reports, write_run_reports
from tasks.versioning import commit_stage, push_stages, record_on_run_branch, run_branches


@task(name="dvc-commit", task_run_name="dvc-commit-i{iteration}-{stage}", **IO_RETRIES)
def dvc_commit(layout: RunLayout, iteration: int, stage: str, push: bool = False) -> dict[str, str]:
    """Record a finished stage's outputs in dvc.lock; push them to the remote now only when
    ``push`` says so (an iteration's stages are pushed together by its close: `dvc_push`)."""
    hashes = commit_stage(layout.project, layout.stage_file(iteration), stage, push)
    kill_point("dvc")
    return hashes


@task(name="dvc-push", task_run_name="dvc-push-i{iteration}", **IO_RETRIES)
def dvc_push(layout: RunLayout, iteration: int) -> int:
    """Send every output iteration ``iteration``'s ``dvc.lock`` records to the DVC remote, in
    one push (objects already there are skipped); the files sent. A kill before it ends is
    mended by the resume, which closes the iteration again (`flows.pipeline.closed_row`)."""
    return push_stages(layout.project, layout.stage_file(iteration))


@task(name="record-lineage", task_run_name="lineage-i{iteration}", **IO_RETRIES)
def record_lineage(layout: RunLayout, iteration: int, message: str) -> str | None:
    """Write the run's DVC metrics and plots (`tasks.run.reports.write_run_reports`), then
    commit them with the stage files and locks to ``tabula/runs/<run>``, and the run's params
    and metrics again at the paths every run branch shares (`tasks.run.reports.fixed_reports`,
    for ``dvc exp show --all-branches``); tag the iteration."""
    kill_point("lineage")
    reports = write_run_reports(layout, iteration) if iteration > 0 else []
    # The branch holds every iteration its earlier records committed, and a closed iteration's
    # files no longer change: so this one and the one before (which a resume mends) are enough,
    # and the cost stays flat as the run grows. The branch's first record takes them all.
    recorded = layout.run in run_branches(layout.project)
    recent = [j for j in (iteration - 1, iteration) if j >= 0]
    files = [
        *reports,
        layout.params,
        layout.uid,
        layout.champion,
        *(p for j in (recent if recorded else layout.iterations()) for p in _records(layout, j)),
        layout.project / ".dvc" / "config",
        layout.project / ".dvcignore",
    ]
    tag = f"tabula/{layout.run}/iter-{iteration:04d}" if iteration > 0 else None
    fixed = fixed_reports(layout)
    return record_on_run_branch(layout.project, layout.run, files, message, tag, fixed)


def _records(layout: RunLayout, i: int) -> list[Path]:
    """An iteration's files on its run branch: its stage file and lock, what DVC keeps out of
    git, and its stage markers (those that exist)."""
    files = [layout.stage_file(i), layout.stage_lock(i), layout.gitignore(i)]
    return [p for p in files if p.exists()] + sorted(layout.state(i).glob("*.json"))
