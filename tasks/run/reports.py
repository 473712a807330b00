"""A run's DVC reports: its metrics and plots over the finished iterations, and the run's
``dvc.yaml`` that declares them, rewritten after each iteration from the stage records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from model.files import write_json, write_text
from tasks.run.layout import RunLayout
from tasks.run.markers import finished
from tasks.run.records import EvaluationRecord, Stage, TrainRecord
from tasks.run.summary import run_elos

LOSS_COLUMNS = ["iteration", "step", "loss", "policy_loss", "value_loss"]
#: elo, low, high: the run's latest fit (`tasks.run.summary.run_elos`); elo_then, ...: the fit
#: made when the iteration finished, over the games up to then.
ELO_COLUMNS = ["iteration", "elo", "low", "high", "elo_then", "elo_then_low", "elo_then_high"]
REPORTS_HEADER = (
    "# Written by tabula after each iteration (tasks.run.reports.write_run_reports): this run's\n"
    "# params, metrics and plots for `dvc params diff`, `dvc metrics diff`, `dvc plots show`.\n"
)

#: The folder, from the project's root, where every run branch also keeps its run's params and
#: metrics (`fixed_reports`). DVC keys params and metrics by file path, so each run's own
#: ``data/<run>/`` copies line up with no other run's; these do: ``dvc exp show --all-branches``
#: gives one row per run under the same columns, and ``dvc params diff A B --targets
#: tabula-run/params.yaml`` lists only the settings that differ.
FIXED_DIR = "tabula-run"
FIXED_DVC_YAML = (
    "# Written by tabula to each run branch (tasks.run.reports.fixed_reports): the params and\n"
    "# metrics of the run this branch records, at the same paths on every run branch, for\n"
    "# `dvc exp show --all-branches` and `dvc params diff` between runs.\n"
    "params:\n  - params.yaml\nmetrics:\n  - metrics.json\n"
)


def fixed_reports(layout: RunLayout) -> dict[str, bytes]:
    """The files the run's branch carries in ``FIXED_DIR`` (paths from the project's root):
    the run's frozen ``params.yaml``, its ``metrics.json`` as `write_run_reports` last wrote it
    (``{}`` before an iteration has finished, so a run branch started from another run's never
    shows that run's numbers) and the ``dvc.yaml`` declaring both. Only run branches hold it,
    so DVC on a branch without runs has nothing declared that is missing. They are committed
    from these bytes (`tasks.versioning.record_on_run_branch`), not from the working tree,
    which two runs share."""
    metrics = layout.metrics.read_bytes() if layout.metrics.exists() else b"{}\n"
    files = {"dvc.yaml": FIXED_DVC_YAML.encode(), "metrics.json": metrics}
    if layout.params.exists():
        files["params.yaml"] = layout.params.read_bytes()
    return {f"{FIXED_DIR}/{name}": data for name, data in files.items()}


def write_run_reports(layout: RunLayout, iterations: int) -> list[Path]:
    """The run's DVC metrics and plots over its finished iterations 1..``iterations``, and the
    ``dvc.yaml`` that declares them (with the run's ``params.yaml``), in ``data/<run>/``:

    - ``metrics.json``: the last iteration's Elo with its interval (``elo``: the run's latest
      fit; ``elo_then``: the fit its evaluation made, the same numbers unless games were added
      since), gate win rate, losses, and score and mean margin against each anchor (``dvc
      metrics show``, ``dvc metrics diff`` between two iteration tags);
    - ``plots/elo.csv`` (iteration, elo, low, high: every iteration on the run's latest fit,
      the closing table's and ``elo.png``'s numbers, `tasks.run.summary.run_elos`; elo_then,
      elo_then_low, elo_then_high: the fit made when that iteration finished),
      ``plots/loss.csv`` (iteration, global step, loss, policy_loss, value_loss) and
      ``plots/anchors.csv`` (iteration, score and margin per anchor): ``dvc plots show``
      draws the Elo, loss and anchor curves.

    Plain files (DVC's ``cache: false``): the run commits them to its branch with the stage
    files (`tasks.commits.record_lineage`). Returns the paths written."""
    rows = [r for i in range(1, iterations + 1) if (r := _iteration_metrics(layout, i))]
    latest = run_elos(layout, iterations)
    for row in rows:
        if (elo := latest.get(row["iteration"])) is not None:
            row.update(elo=elo.elo, elo_low=elo.low, elo_high=elo.high)
    anchors = sorted({k for r in rows for k in r if k.startswith(("score_vs_", "margin_vs_"))})
    elo, loss, by_anchor = layout.plot("elo"), layout.plot("loss"), layout.plot("anchors")
    written = [
        write_json(layout.metrics, rows[-1] if rows else {}),
        _write_csv(loss, LOSS_COLUMNS, rows),
        _write_csv(elo, ELO_COLUMNS, [_elo_row(r) for r in rows if "elo" in r or "elo_then" in r]),
        _write_csv(by_anchor, ["iteration", *anchors], rows),
    ]

    def rel(path: Path) -> str:  # the reporting file names its files from its own folder
        return str(path.relative_to(layout.root))

    charts: list[dict[str, Any]] = [
        {"Elo": {"x": "iteration", "y": {rel(elo): "elo"}}},
        {"Training loss": {"x": "step", "y": {rel(loss): LOSS_COLUMNS[2:]}}},
    ]
    if anchors:
        charts.append({"Anchors": {"x": "iteration", "y": {rel(by_anchor): anchors}}})
    spec = {"params": [rel(layout.params)], "metrics": [rel(layout.metrics)], "plots": charts}
    text = REPORTS_HEADER + yaml.safe_dump(spec, sort_keys=False)
    return [*written, write_text(layout.dvc_reports, text)]


def _elo_row(metrics: dict[str, Any]) -> dict[str, Any]:
    row = {"low": metrics.get("elo_low"), "high": metrics.get("elo_high")}
    return row | {k: metrics.get(k) for k in ELO_COLUMNS if k not in row}


#: `_iteration_metrics` by (train marker, evaluate marker) and their (mtime, size): the reports
#: are rewritten after every iteration from every iteration's records, and a finished
#: iteration's records do not change, so each is decoded once per process.
_METRICS: dict[tuple[Any, ...], dict[str, Any]] = {}


def _iteration_metrics(layout: RunLayout, i: int) -> dict[str, Any] | None:
    """Iteration i's numbers (None before it has trained and been evaluated): its global step
    and losses, Elo with interval as fitted when it finished (``elo_then``), gate win rate,
    score and margin against each anchor."""
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
        then = evaluation.elo
        out.update(elo_then=then.elo, elo_then_low=then.low, elo_then_high=then.high)
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
