"""What a person sees of a run (the `tabula` console): closing and status tables, match and
Elo tables, and the progress bars of the long stages (the display `tasks.watch` reports to)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from tabula.config import Config
from tabula.errors import UsageError
from tabula.ladder import elo_scale, fixed_elos
from tasks.run.layout import RunLayout

if TYPE_CHECKING:  # the records import torch and Lightning: only the commands that read them
    from tasks.run.summary import SummaryRow


def _elo(row: SummaryRow) -> str:
    if row.elo is None or row.elo_low is None or row.elo_high is None:
        return "—"
    half = (row.elo_high - row.elo_low) / 2
    return f"{row.elo:.0f} ± {half:.0f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _vs_anchor(row: SummaryRow, name: str) -> str:
    if name not in row.vs_anchors:
        return "—"
    margin = row.margins.get(name)
    return _pct(row.vs_anchors[name]) + ("" if margin is None else f" ({margin:+.1f})")


def summary_table(rows: list[SummaryRow], title: str) -> Table:
    anchors = sorted({name for row in rows for name in row.vs_anchors})
    table = Table(title=title)
    columns = ["iteration", "promoted", "gate win rate", "vs random"]
    columns += [f"vs {name} (margin)" for name in anchors]
    for column in (*columns, "Elo ± 95%", "positions", "time"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row.iteration),
            "yes" if row.promoted else "no",
            _pct(row.win_rate),
            _pct(row.vs_random),
            *(_vs_anchor(row, name) for name in anchors),
            _elo(row),
            str(row.positions or "—"),
            f"{row.stage_seconds:.0f} s",
        )
    return table


def cpu_split(rows: list[SummaryRow]) -> str | None:
    """One line: the CPU-seconds of these iterations by stage, the share that went to learning
    (self-play and training) and, where wall time was measured, the share of the cores they
    kept busy; None when no iteration was measured."""
    stages: dict[str, float] = {}
    for row in rows:
        for stage, seconds in row.stage_cpu_s.items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    from tasks.run.summary import learning_share

    learning = learning_share(stages)
    if learning is None:
        return None
    parts = ", ".join(f"{stage} {seconds:,.0f}" for stage, seconds in stages.items())
    return f"CPU-seconds by stage: {parts}; learning share {learning:.0%}{_busy(rows)}"


def _busy(rows: list[SummaryRow]) -> str:
    """``"; cores busy 74% of 2 (self-play 88%, train 97%)"`` over the rows that measured wall
    time, or "" when none did."""
    from tasks.run.cputime import busy

    timed = [r for r in rows if r.stage_wall_s and r.cores]
    if not timed:
        return ""
    n = max(r.cores or 0 for r in timed)
    cpu = {s: sum(r.stage_cpu_s.get(s, 0.0) for r in timed) for s in ("selfplay", "train")}
    wall = {s: sum(r.stage_wall_s.get(s, 0.0) for r in timed) for s in ("selfplay", "train")}
    total = busy(
        sum(sum(r.stage_cpu_s.values()) for r in timed),
        sum(sum(r.stage_wall_s.values()) for r in timed),
        n,
    )
    if total is None:
        return ""
    shares = [(s, busy(cpu[s], wall[s], n)) for s in ("selfplay", "train")]
    named = ", ".join(f"{s} {share:.0%}" for s, share in shares if share is not None)
    return f"; cores busy {total:.0%} of {n}" + (f" ({named})" if named else "") + _gpu(timed)


def _gpu(rows: list[SummaryRow]) -> str:
    """``"; GPU busy 61% (selfplay 95%, train 40%)"``: each stage's readings weighed by its
    wall time, or "" when no row has any."""
    weighed: dict[str, list[float]] = {}  # stage -> [busy x wall, wall]
    for row in rows:
        for stage, share in row.gpu_busy.items():
            wall = row.stage_wall_s.get(stage, 0.0)
            acc = weighed.setdefault(stage, [0.0, 0.0])
            acc[0], acc[1] = acc[0] + share * wall, acc[1] + wall
    walls = sum(w for _, w in weighed.values())
    if not walls:
        return ""
    total = sum(b for b, _ in weighed.values()) / walls
    named = ", ".join(
        f"{s} {weighed[s][0] / weighed[s][1]:.0%}"
        for s in ("selfplay", "train")
        if weighed.get(s, [0, 0])[1]
    )
    return f"; GPU busy {total:.0%}" + (f" ({named})" if named else "")


def budget_note(layout: RunLayout) -> str | None:
    """One line on a budgeted run: what it may spend and has spent (None without a budget)."""
    from tabula.plan import spent_fraction
    from tasks.run.budget import read_budget
    from tasks.run.cputime import CORE_HOUR

    budget = read_budget(layout)
    if budget.core_hours is None and budget.hours is None:
        return None
    last = budget.spent[-1] if budget.spent else None
    cpu, wall = (last.cpu_s, last.wall_s) if last else (0.0, 0.0)
    limits = []
    if budget.core_hours is not None:
        limits.append(f"{cpu / CORE_HOUR:.2f} of {budget.core_hours:g} core-hours")
    if budget.hours is not None:
        limits.append(f"{wall / 3600:.2f} of {budget.hours:g} hours")
    done = len(budget.spent)
    if spent_fraction(budget.core_hours, budget.hours, cpu, wall) < 1.0:
        return f"budget: {', '.join(limits)} spent over {done} iteration(s)"
    return (
        f"budget spent: {', '.join(limits)} over {done} iteration(s); the run stopped at an"
        " iteration boundary (a larger --core-hours or --hours extends it)"
    )


def skipped_notes(rows: list[SummaryRow]) -> list[str]:
    """One line per anchor some iteration could not play, saying why (what to install)."""
    reasons = {name: why for row in rows for name, why in row.skipped.items()}
    return [f"{name} not played: {why}" for name, why in sorted(reasons.items())]


def print_summary(cfg: Config, project: Path, rows: list[SummaryRow]) -> None:
    from cli.ui import experiment_lines, ui_command
    from tasks.run.markers import champion, finished
    from tasks.run.records import EvaluationRecord, Stage

    console = Console()
    layout = RunLayout(project, cfg.pipeline.data_dir, cfg.pipeline.name)
    console.print(summary_table(rows, f"tabula run {cfg.pipeline.name!r}"))
    for note in skipped_notes(rows):
        console.print(note)
    split = cpu_split(rows)
    if split is not None:
        console.print(split)
    note = budget_note(layout)
    if note is not None:
        console.print(note)
    last = finished(layout, rows[-1].iteration, Stage.EVALUATE, EvaluationRecord) if rows else None
    if last is not None:
        fixed = fixed_elos(cfg.evaluation.anchors, cfg.rules.board_size)
        scale = elo_scale(fixed, (r.fit.player for r in last.ratings))
        console.print(f"Elo scale: {scale} (margins: points, Tromp-Taylor)")
    best = champion(layout)
    if best is None:
        console.print("champion: none yet")
    else:
        console.print(f"champion: iteration {best.iteration} ({best.model})")
    if layout.elo_plot.exists():
        console.print(f"Elo curve: {layout.rel(layout.elo_plot)}")
    console.print("Open the MLflow UI (http://127.0.0.1:5000) with:  make ui   or")
    print(
        ui_command(
            cfg.pipeline.mlflow_tracking_uri, cfg.pipeline.mlflow_artifact_root, project=project
        )
    )
    # The run's runs table and charts there (plain print: rich would wrap the long URLs).
    uri = cfg.pipeline.mlflow_tracking_uri
    for line in experiment_lines(uri, project=project, run=cfg.pipeline.name):
        print(line)


def print_status(cfg: Config, project: Path, run: str) -> None:
    from tasks.run.markers import champion, finished
    from tasks.run.records import ITERATION_STAGES, EvaluationRecord, Stage

    layout = RunLayout(project.resolve(), cfg.pipeline.data_dir, run)
    if not layout.root.exists():
        raise UsageError(f"no run named {run!r} under {layout.root.parent}")
    done = []
    i = 1
    while layout.iteration(i).exists():
        stages = [s for s in ITERATION_STAGES if layout.marker(i, s.marker_name()).exists()]
        done.append((i, stages))
        i += 1
    console = Console()
    finished_ = [i for i, s in done if len(s) == len(ITERATION_STAGES)]
    console.print(f"run {run!r}: {len(finished_)} iteration(s) finished")
    for i, stages in done:
        if len(stages) < len(ITERATION_STAGES):
            console.print(f"iteration {i}: unfinished (done: {', '.join(stages) or 'nothing'})")
    best = champion(layout)
    console.print(f"champion: iteration {0 if best is None else best.iteration}")
    if finished_:
        last = finished(layout, finished_[-1], Stage.EVALUATE, EvaluationRecord)
        elo = None if last is None else last.elo
        if elo is not None:
            console.print(
                f"last Elo: {elo.elo:.0f} "
                f"[{elo.low:.0f}, {elo.high:.0f}] (iteration {finished_[-1]})"
            )


def match_table(result: Any) -> None:
    """The result of ``tabula match`` from the first (``--black``) player's side."""
    s = result.summary
    table = Table(title=f"{s.first} vs {s.second}")
    for column in (
        "games",
        "wins",
        "losses",
        "draws",
        "score",
        "as black",
        "as white",
        "forfeits",
        "aborts",
        "duplicates",
        "mean moves",
    ):
        table.add_column(column, justify="right")
    table.add_row(
        str(s.games),
        str(s.wins),
        str(s.losses),
        str(s.draws),
        f"{s.score:.1%}",
        str(s.wins_as_black),
        str(s.wins_as_white),
        str(s.forfeits),
        str(s.aborts),
        str(s.duplicates),
        f"{s.mean_moves:.0f}",
    )
    console = Console()
    console.print(table)
    if result.store is not None:
        console.print(f"results appended to {result.store}")


def elo_table(rows: list[dict[str, Any]]) -> None:
    table = Table(title="Elo (Bradley–Terry, 95% intervals)")
    for column in ("rank", "player", "Elo", "95% interval", "games", "wins"):
        table.add_column(column, justify="right" if column != "player" else "left")
    for row in rows:
        table.add_row(
            str(row["rank"]),
            row["player"],
            f"{row['elo']:.0f}",
            f"[{row['low']:.0f}, {row['high']:.0f}]",
            str(row["games"]),
            f"{row['wins']:g}",
        )
    Console().print(table)


@contextmanager
def selfplay_progress(total: int) -> Iterator[Callable[[Any], None]]:
    """A rich progress bar for a self-play worker: games, positions/s, simulations/s."""
    columns = [
        TextColumn("self-play"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("games"),
        TextColumn("{task.fields[pps]:>6.0f} positions/s"),
        TextColumn("{task.fields[sps]:>7.0f} simulations/s"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task("selfplay", total=total, pps=0.0, sps=0.0)

        def update(p: Any) -> None:
            seconds = max(p.seconds, 1e-9)
            bar.update(
                task, completed=p.games, pps=p.positions / seconds, sps=p.simulations / seconds
            )

        yield update


@contextmanager
def stage_progress() -> Iterator[Callable[[str, int, int], None]]:
    """Rich progress bars for the pipeline's long stages, one per label as reports arrive
    (``tasks.watch``): self-play games per worker, training steps, match games."""
    columns = [
        TextColumn("{task.description:<32}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, transient=False) as bar:
        bars: dict[str, Any] = {}
        lock = threading.Lock()  # self-play workers report from several threads

        def show(label: str, done: int, total: int) -> None:
            with lock:
                if label not in bars:
                    bars[label] = bar.add_task(label, total=total)
            bar.update(bars[label], completed=done, total=total)

        yield show
