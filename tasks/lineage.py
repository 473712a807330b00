"""The DVC stage files of a run: what each iteration's outputs were made from.

``iter-0000/dvc.yaml`` holds the ``init`` stage (the randomly initialised network that starts
the run); every later ``iter-NNNN/dvc.yaml`` holds ``selfplay``, ``train`` and ``evaluate``.
Each stage names the command that makes it (the same ``tabula`` commands a user can run), its
dependencies (the champion that played, the exact training window, the parent checkpoint)
and the params it reads from the run's frozen ``params.yaml``. Prefect runs the stages; DVC
records their hashes (``tasks.versioning.commit_stage``), so ``dvc dag`` shows each
checkpoint's lineage and ``dvc.lock`` pins it. The run's config is frozen in its
``params.yaml`` at the first start (`freeze_config`), and every registered checkpoint carries
its lineage as tags (`checkpoint_tags`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from prefect import task

from model.checkpoint import CheckpointLineage
from model.files import write_json, write_text
from tabula.config import Config, ConfigError, config_to_flat_dict, dump_config, parse_config
from tabula.plan import IterationPlan
from tasks.retry import IO_RETRIES
from tasks.run.faults import kill_point
from tasks.run.layout import RunLayout
from tasks.run.markers import finished
from tasks.run.records import EvaluationRecord, Stage, TrainRecord
from tasks.versioning import commit_stage, record_on_run_branch, run_branches, write_stage_file

PARAMS = "../params.yaml"


def _rel(layout: RunLayout, target: Path, i: int) -> str:
    return os.path.relpath(target, layout.iteration(i))


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
    stage = {
        "init": {
            "cmd": (
                f"tabula init-model --config {PARAMS} --seed {seed} --run {layout.run} "
                "--out model/model.pt"
            ),
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
    stages: dict[str, dict[str, Any]] = {
        "selfplay": {
            "cmd": f"tabula stage selfplay --params {PARAMS} --iteration {i}",
            "desc": EXACT_DESC["selfplay"],
            "deps": [best],
            "params": [{PARAMS: ["rules", "search", "selfplay"]}],
            "outs": [{"selfplay": {"persist": True}}],
        },
        "train": {
            "cmd": f"tabula stage train --params {PARAMS} --iteration {i}",
            "desc": EXACT_DESC["train"],
            "deps": [*window, parent],
            "params": [{PARAMS: ["rules", "network", "training"]}],
            "outs": [{"model": {"persist": True}}],
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
    for name, why in FROZEN_WHY.items():
        stages[name].update({"desc": why, "frozen": True})
    path = layout.stage_file(i)
    write_stage_file(path, stages)
    return path


#: An iteration's files on its run branch: its stage file and lock, what DVC keeps out of git,
#: and its stage markers.
LINEAGE_FILES = ("dvc.yaml", "dvc.lock", ".gitignore", "state/*.json")
LOSS_COLUMNS = ["iteration", "step", "loss", "policy_loss", "value_loss"]
ELO_COLUMNS = ["iteration", "elo", "low", "high"]
REPORTS_HEADER = (
    "# Written by tabula after each iteration (tasks.lineage.write_run_reports): this run's\n"
    "# params, metrics and plots for `dvc params diff`, `dvc metrics diff`, `dvc plots show`.\n"
)


def write_run_reports(layout: RunLayout, iterations: int) -> list[Path]:
    """The run's DVC metrics and plots over its finished iterations 1..``iterations``, and the
    ``dvc.yaml`` that declares them (with the run's ``params.yaml``), in ``data/<run>/``:

    - ``metrics.json``: the last iteration's Elo with its interval, gate win rate, losses, and
      score and mean margin against each anchor (``dvc metrics show``, ``dvc metrics diff``
      between two iteration tags);
    - ``plots/elo.csv`` (iteration, elo, low, high), ``plots/loss.csv`` (iteration, global
      step, loss, policy_loss, value_loss) and ``plots/anchors.csv`` (iteration, score and
      margin per anchor): ``dvc plots show`` draws the Elo, loss and anchor curves.

    Plain files (DVC's ``cache: false``): the run commits them to its branch with the stage
    files (`record_lineage`). Returns the paths written."""
    rows = [r for i in range(1, iterations + 1) if (r := _iteration_metrics(layout, i))]
    anchors = sorted({k for r in rows for k in r if k.startswith(("score_vs_", "margin_vs_"))})
    root = layout.root
    plots = root / "plots"
    written = [
        write_json(root / "metrics.json", rows[-1] if rows else {}),
        _write_csv(plots / "loss.csv", LOSS_COLUMNS, rows),
        _write_csv(plots / "elo.csv", ELO_COLUMNS, [_elo_row(r) for r in rows if "elo" in r]),
        _write_csv(plots / "anchors.csv", ["iteration", *anchors], rows),
    ]
    charts: list[dict[str, Any]] = [
        {"Elo": {"x": "iteration", "y": {"plots/elo.csv": "elo"}}},
        {"Training loss": {"x": "step", "y": {"plots/loss.csv": LOSS_COLUMNS[2:]}}},
    ]
    if anchors:
        charts.append({"Anchors": {"x": "iteration", "y": {"plots/anchors.csv": anchors}}})
    spec = {"params": ["params.yaml"], "metrics": ["metrics.json"], "plots": charts}
    text = REPORTS_HEADER + yaml.safe_dump(spec, sort_keys=False)
    return [*written, write_text(root / "dvc.yaml", text)]


def _elo_row(metrics: dict[str, Any]) -> dict[str, Any]:
    return {"iteration": metrics["iteration"], "elo": metrics["elo"],
            "low": metrics["elo_low"], "high": metrics["elo_high"]}  # fmt: skip


#: `_iteration_metrics` by (train marker, evaluate marker) and their (mtime, size): the reports
#: are rewritten after every iteration from every iteration's records, and a finished
#: iteration's records do not change, so each is decoded once per process.
_METRICS: dict[tuple[Any, ...], dict[str, Any]] = {}


def _iteration_metrics(layout: RunLayout, i: int) -> dict[str, Any] | None:
    """Iteration i's numbers (None before it has trained and been evaluated): its global step
    and losses, Elo with interval, gate win rate, score and margin against each anchor."""
    markers = [layout.marker(i, s.marker_name()) for s in (Stage.TRAIN, Stage.EVALUATE)]
    try:
        key = tuple((str(m), st.st_mtime_ns, st.st_size) for m in markers for st in [m.stat()])
    except FileNotFoundError:
        return None
    if key not in _METRICS:
        metrics = _read_iteration_metrics(layout, i)
        if metrics is None:
            return None
        _METRICS[key] = metrics
    return dict(_METRICS[key])


def _read_iteration_metrics(layout: RunLayout, i: int) -> dict[str, Any] | None:
    train = finished(layout, i, Stage.TRAIN, TrainRecord)
    evaluation = finished(layout, i, Stage.EVALUATE, EvaluationRecord)
    if train is None or evaluation is None:
        return None
    r = train.trained.result
    out: dict[str, Any] = {"iteration": i, "step": r.global_step, "loss": r.loss,
                           "policy_loss": r.policy_loss, "value_loss": r.value_loss}  # fmt: skip
    if evaluation.elo is not None:
        out.update(elo=evaluation.elo.elo, elo_low=evaluation.elo.low, elo_high=evaluation.elo.high)
    if evaluation.gate.decision.games:
        out["win_rate"] = evaluation.gate.decision.win_rate
    for name, match in evaluation.anchors.items():
        out[f"score_vs_{name}"] = match.score
        if match.summary.mean_margin is not None:
            out[f"margin_vs_{name}"] = match.summary.mean_margin
    return out


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> Path:
    """``rows`` as CSV under ``columns`` (a missing value is empty, floats have 6 digits)."""

    def cell(value: Any) -> str:
        if value is None:
            return ""
        return f"{value:.6g}" if isinstance(value, float) else str(value)

    lines = [",".join(columns), *(",".join(cell(r.get(c)) for c in columns) for r in rows)]
    return write_text(path, "\n".join(lines) + "\n")


#: What a resume may change: how far the run goes and where its work runs, never what it
#: computes (the Dask scheduler and the Prefect API may move between restarts of a run), and the
#: format its config was written in (which only says how the fields a file leaves out read; the
#: values read are compared).
RESUME_MAY_CHANGE = ("iterations", "dask_address", "prefect_api_url", "config_version")


def freeze_config(cfg: Config, layout: RunLayout) -> str:
    """The run's config text: written on the first start, checked on every resume (only the
    ``pipeline`` fields of ``RESUME_MAY_CHANGE`` may differ; the new Dask and Prefect addresses
    are used, while the iterations to run are the caller's business)."""
    text = dump_config(cfg)
    frozen = layout.params.read_text() if layout.params.exists() else None
    if frozen is None:
        write_text(layout.params, text)
        return text
    frozen_cfg = parse_config(frozen, source=str(layout.params))
    before, now = config_to_flat_dict(frozen_cfg), config_to_flat_dict(cfg)
    free = {f"pipeline.{name}" for name in RESUME_MAY_CHANGE}
    changed = sorted(k for k in now if now[k] != before.get(k) and k not in free)
    if changed:
        raise ConfigError(
            f"run {layout.run!r} was started with a different config ({', '.join(changed[:4])}"
            f"{' …' if len(changed) > 4 else ''} differ from {layout.params}); "
            "resume it with the same settings or start a new run with --name"
        )
    moved = {name: getattr(cfg.pipeline, name) for name in ("dask_address", "prefect_api_url")}
    if all(getattr(frozen_cfg.pipeline, k) == v for k, v in moved.items()):
        return frozen
    pipeline = frozen_cfg.pipeline.model_copy(update=moved)
    return dump_config(frozen_cfg.model_copy(update={"pipeline": pipeline}))


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


@task(name="dvc-commit", task_run_name="dvc-commit-i{iteration}-{stage}", **IO_RETRIES)
def dvc_commit(layout: RunLayout, iteration: int, stage: str) -> dict[str, str]:
    """Record a finished stage's outputs in dvc.lock and push them to the remote."""
    hashes = commit_stage(layout.project, layout.stage_file(iteration), stage)
    kill_point("dvc")
    return hashes


@task(name="record-lineage", task_run_name="lineage-i{iteration}", **IO_RETRIES)
def record_lineage(layout: RunLayout, iteration: int, message: str) -> str | None:
    """Write the run's DVC metrics and plots (`tasks.lineage.write_run_reports`), then commit
    them with the stage files and locks to ``tabula/runs/<run>``; tag the iteration."""
    kill_point("lineage")
    root = layout.root
    reports = write_run_reports(layout, iteration) if iteration > 0 else []
    # The branch holds every iteration its earlier records committed, and a closed iteration's
    # files no longer change: so this one and the one before (which a resume mends) are enough,
    # and the cost stays flat as the run grows. The branch's first record takes them all.
    recorded = layout.run in run_branches(layout.project)
    recent = [f"iter-{j:04d}" for j in (iteration - 1, iteration) if j >= 0]
    folders = recent if recorded else ["iter-*"]
    files = [
        *reports,
        layout.params,
        layout.uid,
        layout.champion,
        *(p for folder in folders for name in LINEAGE_FILES for p in root.glob(f"{folder}/{name}")),
        layout.project / ".dvc" / "config",
        layout.project / ".dvcignore",
    ]
    tag = f"tabula/{layout.run}/iter-{iteration:04d}" if iteration > 0 else None
    return record_on_run_branch(layout.project, layout.run, files, message, tag=tag)
