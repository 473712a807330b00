"""What a watcher sees of a run: progress bars, the Prefect UI's stage lines and artifacts, the
summary artifact and the Elo curve.

Progress: stages call ``report(label, done, total)`` as they go (self-play games per worker,
training steps, match games); a display installed with ``showing(display)`` in the same process
gets each call. Where none is installed (tests, a Dask worker's process on a cluster) a report
goes nowhere, so stages never depend on being watched. Reports may come from several threads.

The Prefect UI: a line per finished stage in the flow run's log (Prefect's run logger), and a
progress artifact that moves as the stages finish, with the iteration's MLflow run named (and
linked when the store is a server). `tabula` sends run loggers' INFO records to the Prefect API
and keeps the console at warnings (``cli.common.QUIET_DEFAULTS``), so the flow run page holds the
stage lines while a terminal stays quiet. A stage found finished on a resume is logged the same
way, marked as found.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from prefect import task

from model.files import write_bytes
from tasks.run.codec import to_json
from tasks.run.faults import kill_point
from tasks.run.layout import RunLayout
from tasks.run.records import (
    EvaluationRecord,
    PromotionRecord,
    SelfplayRecord,
    Stage,
    TrainRecord,
)
from tasks.run.results import ResultsStoreError
from tasks.run.summary import SummaryRow

Display = Callable[[str, int, int], None]
"""``display(label, done, total)``: ``label`` names one bar, e.g. "iter 2 training (steps)"."""

_display: Display | None = None


@contextmanager
def showing(display: Display) -> Iterator[None]:
    """Send this process's stage reports to ``display`` inside the ``with`` block."""
    global _display
    previous, _display = _display, display
    try:
        yield
    finally:
        _display = previous


def report(label: str, done: int, total: int) -> None:
    """Tell the installed display (if any) that ``done`` of ``total`` are finished."""
    display = _display
    if display is not None:
        display(label, done, total)


def reporting(stage: Stage, label: str) -> Callable[[int, int], None]:
    """``report(label, done, total)``, each call also a visit to the stage's kill point."""

    def one(done: int, total: int) -> None:
        report(label, done, total)
        kill_point(stage.value)

    return one


def counting(stage: Stage, label: str, total: int) -> Callable[[object], None]:
    """A per-item callback (a finished game) that reports one more done each call."""
    show, done = reporting(stage, label), 0

    def one(_: object) -> None:
        nonlocal done
        done += 1
        show(done, total)

    return one


#: The share of an iteration done when each stage has finished (self-play dominates).
PROGRESS = {Stage.SELFPLAY: 60.0, Stage.TRAIN: 85.0, Stage.EVALUATE: 97.0, Stage.PROMOTE: 100.0}


def stage_line(record: Any) -> str:
    """One line on a finished stage's record."""
    if isinstance(record, SelfplayRecord):
        return (
            f"self-play: {record.games:,} games, {record.positions:,} positions in "
            f"{record.seconds:.0f} s ({record.positions_per_s:,.0f} positions/s), resignation "
            f"threshold {record.v_resign_used if record.v_resign_used is not None else 'off'}"
        )
    if isinstance(record, TrainRecord):
        r = record.trained.result
        held = "" if r.val_loss is None else f", on held-out games {r.val_loss:.3f}"
        return (
            f"training: {r.steps:,} steps to global step {r.global_step:,}, loss {r.loss:.3f} "
            f"(policy {r.policy_loss:.3f}, value {r.value_loss:.3f}){held} in "
            f"{record.trained.seconds:.0f} s"
        )
    if isinstance(record, EvaluationRecord):
        d = record.gate.decision
        gate = "off" if not d.games else f"{d.wins}-{d.losses}-{d.draws} ({d.reason})"
        parts = [f"gate {gate}"]
        if record.elo is not None:
            parts.append(
                f"Elo {record.elo.elo:+.0f} [{record.elo.low:+.0f}, {record.elo.high:+.0f}]"
            )
        for name, match in sorted(record.anchors.items()):
            margin = match.summary.mean_margin
            parts.append(
                f"{name} {match.score:.0%}" + ("" if margin is None else f" ({margin:+.1f})")
            )
        return "evaluation: " + ", ".join(parts)
    if isinstance(record, PromotionRecord):
        verdict = "promoted" if record.promoted else "not promoted"
        return f"promotion: {verdict}; champion: iteration {record.champion}"
    return f"{type(record).__name__}: finished"


class IterationProgress:
    """The iteration's progress artifact and stage log lines (`done` after each stage)."""

    def __init__(self, layout: RunLayout, i: int, mlflow_run: str, mlflow_link: str | None):
        from prefect.artifacts import create_link_artifact, create_progress_artifact
        from prefect.logging import get_run_logger

        self.logger = get_run_logger()
        key = artifact_key(layout, i)
        where = f"MLflow run {mlflow_run}" + (f" ({mlflow_link})" if mlflow_link else "")
        artifact = create_progress_artifact(
            progress=0.0, key=f"{key}-progress", description=f"{layout.run} iteration {i}: {where}"
        )
        self.artifact = cast(UUID, artifact)  # (sync here: no event loop runs this flow)
        if mlflow_link:
            create_link_artifact(
                link=mlflow_link, link_text=f"{layout.run} iteration {i} in MLflow",
                key=f"{key}-mlflow",
            )  # fmt: skip
        self.logger.info(f"iteration {i} of {layout.run}: {where}")

    def done(self, stage: Stage, record: Any, found: bool = False) -> None:
        from prefect.artifacts import update_progress_artifact

        self.logger.info(stage_line(record) + (" (finished before)" if found else ""))
        update_progress_artifact(self.artifact, PROGRESS[stage])


def artifact_key(layout: RunLayout, i: int) -> str:
    """The key of iteration i's Prefect artifacts (lower case, digits and dashes only)."""
    return f"{layout.run}-iter-{i:04d}".lower().replace("_", "-").replace(".", "-")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "—" if value is None else str(value)


@task(name="iteration-summary", task_run_name="summary-i{i}")
def publish_summary(
    layout: RunLayout, i: int, row: SummaryRow, evaluation: EvaluationRecord, champion: int
) -> None:
    """Publish iteration ``i``'s summary (its ``row``, its gate's decision and the champion
    after it) as a Prefect markdown artifact."""
    from prefect.artifacts import create_markdown_artifact

    gate = evaluation.gate.decision
    lines = [
        f"# {layout.run}: iteration {i}",
        "",
        "| what | value |",
        "| --- | --- |",
        *(f"| {k} | {_fmt(v)} |" for k, v in to_json(row).items()),
        f"| gate decision | {gate.reason} ({gate.wins}–{gate.losses}) |",
        f"| champion | iteration {champion} |",
    ]
    key = artifact_key(layout, i)
    create_markdown_artifact(
        markdown="\n".join(lines), key=key, description=f"tabula {layout.run} iteration {i}"
    )


def plot_elo_curve(
    points: Sequence[tuple[int, float, float, float]],
    path: str | os.PathLike[str],
    title: str = "Elo by iteration",
    scale: str | None = None,
) -> Path:
    """Write a PNG of Elo against iteration with [low, high] error bars; returns the path.

    points: (iteration, elo, low, high), any order; scale: which player sits at 0 (e.g.
    "GnuGo level 1 = 0"), for the axis label. The file is written atomically, and carries the
    points it draws as text (`read_elo_curve`), so that its numbers can be checked against
    the closing table and ``plots/elo.csv``.
    """
    # Imported here: matplotlib is slow to import and only this function needs it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    for point in points:
        iteration, elo, low, high = point
        if not low <= elo <= high:
            raise ResultsStoreError(f"Elo point {point!r}: need low <= elo <= high")
    ordered = sorted(points)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure = Figure(figsize=(7.0, 4.0), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    if ordered:
        xs = [p[0] for p in ordered]
        ys = [p[1] for p in ordered]
        errors = [[p[1] - p[2] for p in ordered], [p[3] - p[1] for p in ordered]]
        axes.errorbar(xs, ys, yerr=errors, fmt="o-", capsize=3)
    axes.set_xlabel("iteration")
    axes.set_ylabel(f"Elo ({scale}, 95% interval)" if scale else "Elo (95% interval)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={ELO_CURVE_KEY: _curve_text(ordered)})
    write_bytes(out, buffer.getvalue())
    return out


#: The PNG text chunk (tEXt) of an Elo curve that holds its points: CSV, header
#: ``iteration,elo,low,high``, each number as Python writes a float (exact).
ELO_CURVE_KEY = "tabula:elo-curve"


def _curve_text(points: Sequence[tuple[int, float, float, float]]) -> str:
    lines = ["iteration,elo,low,high", *(",".join(repr(x) for x in p) for p in points)]
    return "\n".join(lines)


def read_elo_curve(path: str | os.PathLike[str]) -> list[tuple[int, float, float, float]]:
    """The points an Elo curve drawn by `plot_elo_curve` shows, read back from its PNG."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.load()
            text = cast(dict[str, str], getattr(image, "text", {})).get(ELO_CURVE_KEY)
    except UnidentifiedImageError:  # not an image at all
        text = None
    if text is None:
        raise ResultsStoreError(f"{path}: not an Elo curve of tabula (no {ELO_CURVE_KEY} text)")
    rows = [line.split(",") for line in text.splitlines()[1:]]
    return [(int(i), float(e), float(lo), float(hi)) for i, e, lo, hi in rows]
