"""Prefect tasks of an iteration: one side effect each, keyed by (run, iteration, worker, seed).

Tasks pass paths and hashes, never tensors, and return typed records (``tasks.records``);
the stages find their finished output instead of redoing it (``tasks.resume``: the marker
``state/STAGE.json``, see ``tasks.layout``) and retry only on I/O errors. The work itself
lives in plain functions (``tasks.selfplay``, ``tasks.train``, ``tasks.match``) that the CLI
calls too.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import task

from model.files import write_json
from tabula.config import Config
from tabula.errors import TabulaError
from tabula.gating import ungated
from tabula.ladder import anchor_label, anchor_program, anchor_spec, elo_scale, fixed_elos
from tabula.openings import match_openings
from tabula.plan import IterationPlan, plan_iteration
from tabula.resign import calibrate_samples
from tasks.layout import RunLayout, reset_dir
from tasks.progress import report
from tasks.records import (
    AnchorRecord,
    Champion,
    Elo,
    GateRecord,
    InitRecord,
    PromotionRecord,
    Rating,
    SelfplayRecord,
    Stage,
    Trained,
    WorkerRecord,
    from_json,
)
from tasks.resume import champion, finished, kill_point, resumable, write_record


def _retry_on_io(task_: Any, task_run: Any, state: Any) -> bool:
    """Retry a task only when it failed on I/O (a flaky remote, a busy disk), not on a bug."""
    try:
        state.result()
    except OSError:
        return True
    except BaseException:
        return False
    return False


IO_RETRIES: dict[str, Any] = {
    "retries": 2,
    "retry_delay_seconds": 2,
    "retry_condition_fn": _retry_on_io,
}


def set_threads(n: int) -> None:
    """torch's intra-op threads for this process: one per core, shared out among the self-play
    workers of a process; training's count is recorded, since it changes the float sums."""
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def _reporting(stage: Stage, label: str) -> Callable[[int, int], None]:
    """``report(label, done, total)``, each call also a visit to the stage's kill point."""

    def one(done: int, total: int) -> None:
        report(label, done, total)
        kill_point(stage.value)

    return one


def _counting(stage: Stage, label: str, total: int) -> Callable[[object], None]:
    """A per-item callback (a finished game) that reports one more done each call."""
    show, done = _reporting(stage, label), 0

    def one(_: object) -> None:
        nonlocal done
        done += 1
        show(done, total)

    return one


@task(name="set-champion", task_run_name="champion-i{iteration}", **IO_RETRIES)
def set_champion(layout: RunLayout, iteration: int, version: int | str | None) -> Champion:
    """Make iteration ``iteration``'s model the champion: ``champion.json``, replaced atomically."""
    crowned = Champion(iteration, layout.rel(layout.model(iteration)), version)
    write_record(layout.champion, crowned)
    return crowned


@task(name="init-model", task_run_name="init-model", **IO_RETRIES)
@resumable(Stage.INIT, InitRecord)
def init_model(cfg: Config, layout: RunLayout, seed: int) -> InitRecord:
    """The randomly initialised network that starts the run (iteration 0)."""
    from model.network import network_for, save_checkpoint, weights_sha256
    from tasks.lineage import init_metadata

    reset_dir(layout.model_dir(0))
    net = network_for(cfg, seed)
    save_checkpoint(layout.model(0), net, init_metadata(layout.run, seed))
    return InitRecord(model=layout.rel(layout.model(0)), sha256=weights_sha256(net))


@task(name="plan", task_run_name="plan-i{iteration}", **IO_RETRIES)
@resumable(Stage.PLAN, IterationPlan)
def plan(cfg: Config, layout: RunLayout, iteration: int) -> IterationPlan:
    """Fix the champion, the parent checkpoint, the window and the seeds of ``iteration``
    (`tabula.plan.plan_iteration`); written once, so that a promotion later in the run never
    changes what an earlier iteration was made from."""
    best = champion(layout)
    return plan_iteration(
        cfg,
        iteration,
        0 if best is None else best.iteration,
        lambda j: layout.rel(layout.selfplay(j)),
    )


@task(name="selfplay-worker", task_run_name="selfplay-i{iteration}-w{worker}", **IO_RETRIES)
@resumable(Stage.SELFPLAY, WorkerRecord)
def selfplay_worker(
    cfg: Config, layout: RunLayout, iteration: int, worker: int, model: str, games: int, seed: int
) -> WorkerRecord:
    """Play ``games`` games with ``model`` into ``iter-N/selfplay/worker-W`` (or find them)."""
    from tasks.selfplay import run_worker

    out = layout.worker(iteration, worker)
    reset_dir(out)  # a killed worker's shards are replaced, never appended to
    started = time.perf_counter()
    set_threads(max(1, (os.cpu_count() or 1) // cfg.selfplay.workers))
    show = _reporting(Stage.SELFPLAY, f"iter {iteration} self-play w{worker} (games)")
    result = run_worker(
        cfg,
        model,
        out,
        games=games,
        seed=seed,
        iteration=iteration,
        worker=worker,
        progress=lambda p: show(p.games, p.games_total),
    )
    # Where it ran: a Dask worker's process on a cluster, the flow's own process locally.
    return WorkerRecord(
        worker=result,
        seconds=time.perf_counter() - started,
        host=socket.gethostname(),
        pid=os.getpid(),
    )


_SUMMED = (
    "games",
    "positions",
    "simulations",
    "evaluations",
    "resigned_games",
    "resign_disabled_games",
    "false_positives",
)


@task(name="calibrate-resign", task_run_name="calibrate-resign-i{iteration}")
def calibrate(
    workers: list[WorkerRecord],
    iteration: int,
    v_resign_used: float | None,
    fp_target: float,
    hashes: dict[str, str],
) -> SelfplayRecord:
    """The self-play totals over an iteration's workers, and the v_resign for the next one
    (`tabula.resign.calibrate_samples` over the workers' resign-disabled games)."""
    totals = {k: sum(getattr(w.worker, k) for w in workers) for k in _SUMMED}
    seconds = max((w.seconds for w in workers), default=0.0) or 1e-9
    games = max(totals["games"], 1)
    samples = [s for w in workers for s in w.worker.resign_samples]
    threshold = workers[0].worker.v_resign if workers else None
    v_next, fp_rate = calibrate_samples(samples, threshold, target=fp_target)
    return SelfplayRecord(
        **totals,
        mean_game_length=totals["positions"] / games,
        resign_rate=totals["resigned_games"] / games,
        positions_per_s=totals["positions"] / seconds,
        simulations_per_s=totals["simulations"] / seconds,
        evaluations_per_s=totals["evaluations"] / seconds,
        v_resign_next=v_next,
        false_positive_rate=fp_rate,
        v_resign_used=v_resign_used,
        hashes=hashes,
        seconds=max(w.seconds for w in workers),
    )


def window_hashes(layout: RunLayout, window: tuple[str, ...]) -> dict[str, str]:
    """Each self-play directory of a window -> the DVC hash its own iteration recorded."""
    hashes = {}
    for rel in window:
        i = int(Path(rel).parent.name.removeprefix("iter-"))
        done = finished(layout, i, Stage.SELFPLAY, SelfplayRecord)
        hashes[rel] = "" if done is None else done.hashes.get(rel, "")
    return hashes


@task(name="train", task_run_name="train-i{iteration}", **IO_RETRIES)
def train(
    cfg: Config,
    layout: RunLayout,
    iteration: int,
    window: list[str],
    init: str,
    seed: int,
    mlflow_run_id: str | None,
    tracking_uri: str | None,
    threads: int | None = None,
    model_dir: Path | None = None,
    lr_boundaries: list[int] | None = None,
    bf16: bool | None = None,
) -> Trained:
    """Continue training the latest network on the window; export ``iter-N/model`` (or
    ``model_dir``: reproduction retrains into a scratch folder). lr_boundaries: the rate
    schedule's drops in global steps, bf16: the precision (`tasks.train.train_stage`'s
    defaults when None).

    The window is checked against its recorded DVC hashes first (``verify_window``).
    """
    from tasks.train import train_stage

    verify_window(layout, window)
    out = model_dir or layout.model_dir(iteration)
    reset_dir(out)
    threads = threads or os.cpu_count() or 1
    set_threads(threads)
    started = time.perf_counter()
    show = _reporting(Stage.TRAIN, f"iter {iteration} training (steps)")
    result = train_stage(
        cfg,
        [layout.project / w for w in window],
        out / layout.model(iteration).name,
        init=Path(init),
        steps=cfg.training.steps,
        seed=seed,
        mlflow_run_id=mlflow_run_id,
        tracking_uri=tracking_uri,
        progress=False,
        model_id=layout.model_id(iteration),
        on_step=show,
        lr_boundaries=lr_boundaries,
        bf16=bf16,
    )
    return Trained(result=result, seconds=time.perf_counter() - started, threads=threads)


class WindowChangedError(TabulaError, ValueError):
    """A self-play directory of the training window is not what its stage recorded; one line."""


def verify_window(layout: RunLayout, window: list[str]) -> None:
    """Refuse a training window whose data differs from the DVC hashes recorded for it.

    Each directory of ``window`` (project-relative ``.../iter-J/selfplay``) must still match
    the ``selfplay`` output in ``iter-J/dvc.lock``: a shard truncated, bit-flipped, removed,
    added or replaced changes the hash (the datamodule's per-shard checks cannot see a removed
    shard). Raises ``ShardError`` naming the file when a shard of a changed directory is corrupt,
    else ``WindowChangedError`` naming the directory; nothing is trained on a changed window.
    """
    from model.shards import validate_shard
    from tasks.versioning import status

    targets = {f"{Path(w).parent / 'dvc.yaml'}:selfplay": w for w in window}
    for target, entries in status(layout.project, list(targets)).items():
        changed = {
            k: v
            for e in entries
            if isinstance(e, dict)
            for k, v in e.get("changed outs", {}).items()
        }
        if not changed or target not in targets:
            continue
        rel = targets[target]
        for shard in sorted((layout.project / rel).rglob("*.parquet")):
            validate_shard(shard)  # a corrupt shard is named by its own check
        raise WindowChangedError(
            f"{rel}: {', '.join(sorted(set(changed.values())))} since "
            f"{Path(rel).parent / 'dvc.lock'} recorded it (a shard removed, added or replaced); "
            f"restore it with `dvc checkout {target}` before training"
        )


@task(name="gate", task_run_name="gate-i{iteration}", **IO_RETRIES)
def gate(cfg: Config, layout: RunLayout, iteration: int, best: int, seed: int) -> GateRecord:
    """The candidate plays the champion; the decision comes with its evidence. With
    ``evaluation.gating`` off, no games: the candidate is promoted (`tabula.gating.ungated`)."""
    from tasks.match import run_gate

    out = layout.match(iteration) / "gate"
    reset_dir(out)
    started = time.perf_counter()
    if not cfg.evaluation.gating:
        decision = ungated()
        evidence = {"candidate": str(layout.model(iteration)), "best": str(layout.model(best))}
        write_json(out / "gate.json", evidence | decision.to_dict() | {"games_played": 0})
        return GateRecord(decision=decision, seconds=time.perf_counter() - started)
    games = cfg.evaluation.gating_games
    decision = run_gate(
        str(layout.model(iteration)),
        str(layout.model(best)),
        cfg,
        out,
        store=layout.results,
        seed=seed,
        iteration=iteration,
        match_id=f"{layout.run}-i{iteration:04d}-gate",
        progress=_counting(Stage.EVALUATE, f"iter {iteration} gate (games)", games),
    )
    return GateRecord(decision=decision, seconds=time.perf_counter() - started)


def anchors_to_play(cfg: Config, iteration: int) -> tuple[list[str], dict[str, str]]:
    """The anchors iteration ``iteration`` plays, and those it cannot, with why.

    The uniform random player every iteration; the configured anchors (`tabula.ladder`) in
    iterations divisible by ``evaluation.anchor_every``, each when its program is installed
    (else skipped, with what to install); none at all when ``anchor_games`` is 0.
    """
    from tasks.players import PlayerSpecError, resolve_command

    evaluation = cfg.evaluation
    if evaluation.anchor_games == 0:
        return [], {}
    play, skipped = ["random"], {}
    if iteration % evaluation.anchor_every == 0:
        for name in evaluation.anchors:
            try:
                resolve_command(anchor_spec(name).removeprefix("gtp:"))
            except PlayerSpecError:
                program = anchor_program(name)
                install = " (apt-get install gnugo)" if program == "gnugo" else ""
                skipped[anchor_label(name)] = f"{program} is not installed{install}"
                continue
            play.append(name)
    return play, skipped


@task(name="anchor-match", task_run_name="anchor-i{iteration}-{anchor}", **IO_RETRIES)
def anchor_match(
    cfg: Config, layout: RunLayout, iteration: int, anchor: str, seed: int
) -> AnchorRecord:
    """Games against a fixed anchor (random, a GnuGo level) from seeded openings: its score
    and mean margin track progress, its fixed Elo grounds the scale (`tabula.ladder`)."""
    from tasks.match import run_match

    name = anchor_label(anchor)
    out = layout.match(iteration) / f"vs-{name}"
    reset_dir(out)
    started = time.perf_counter()
    games = cfg.evaluation.anchor_games
    openings = match_openings(cfg.rules.board_size, games, cfg.evaluation.opening_plies)
    match = run_match(
        str(layout.model(iteration)),
        anchor_spec(anchor),
        games,
        cfg,
        out,
        layout.results,
        seed=seed,
        iteration=iteration,
        match_id=f"{layout.run}-i{iteration:04d}-vs-{name}",
        progress=_counting(Stage.EVALUATE, f"iter {iteration} vs {name} (games)", games),
        openings=openings,
    )
    return AnchorRecord(
        match_id=match.match_id,
        summary=match.summary,
        sgf_dir=None if match.sgf_dir is None else str(match.sgf_dir),
        store=None if match.store is None else str(match.store),
        results=tuple(g.row(match.match_id, None) for g in match.games),
        seconds=time.perf_counter() - started,
    )


@task(name="ratings", task_run_name="ratings-i{iteration}")
def ratings(cfg: Config, layout: RunLayout, iteration: int) -> tuple[Rating, ...]:
    """Fit Elo over every game of the run so far; write the table and the Elo curve.

    The scale: the GnuGo ladder's (level 1 = 0) once a ladder anchor has played, else the
    random player's (random = 0), as `tabula.elo.fit_ratings` falls back."""
    from tasks.ratings import plot_elo_curve, ratings_table

    fixed = fixed_elos(cfg.evaluation.anchors, cfg.rules.board_size)
    table = ratings_table(layout.results, anchors=fixed)
    write_json(layout.match(iteration) / "ratings.json", table)
    rows = tuple(from_json(Rating, row) for row in table)
    by_name = {row.fit.player: row.fit for row in rows}
    points = []
    for j in range(0, iteration + 1):
        row = by_name.get(layout.model_id(j))
        if row is not None:
            points.append((j, row.elo, row.low, row.high))
    if points:
        scale = elo_scale(fixed, by_name)
        plot_elo_curve(points, layout.root / "elo.png", scale=scale)
    return rows


def elo_of(layout: RunLayout, iteration: int, table: tuple[Rating, ...]) -> Elo | None:
    """Iteration ``iteration``'s network's Elo in ``table``, None when it has no rated game."""
    me = next((r.fit for r in table if r.fit.player == layout.model_id(iteration)), None)
    return None if me is None else Elo(me.elo, me.low, me.high)


@task(name="promote", task_run_name="promote-i{iteration}", **IO_RETRIES)
def promote(
    layout: RunLayout, iteration: int, promoted: bool, version: int | str | None
) -> PromotionRecord:
    """Crown iteration ``iteration``'s model when the gate promoted it; the champion after."""
    if promoted:
        set_champion.fn(layout, iteration, version)
    best = champion(layout)
    return PromotionRecord(
        promoted=promoted, version=version, champion=0 if best is None else best.iteration
    )


@task(name="dvc-commit", task_run_name="dvc-commit-i{iteration}-{stage}", **IO_RETRIES)
def dvc_commit(layout: RunLayout, iteration: int, stage: str) -> dict[str, str]:
    """Record a finished stage's outputs in dvc.lock and push them to the remote."""
    from tasks.versioning import commit_stage

    hashes = commit_stage(layout.project, layout.stage_file(iteration), stage)
    kill_point("dvc")
    return hashes


@task(name="record-lineage", task_run_name="lineage-i{iteration}", **IO_RETRIES)
def record_lineage(layout: RunLayout, iteration: int, message: str) -> str | None:
    """Write the run's DVC metrics and plots (`tasks.lineage.write_run_reports`), then commit
    them with the stage files and locks to ``tabula/runs/<run>``; tag the iteration."""
    from tasks.lineage import write_run_reports
    from tasks.versioning import record_on_run_branch

    kill_point("lineage")
    root = layout.root
    reports = write_run_reports(layout, iteration) if iteration > 0 else []
    files = [
        *reports,
        layout.params,
        layout.champion,
        *root.glob("iter-*/dvc.yaml"),
        *root.glob("iter-*/dvc.lock"),
        *root.glob("iter-*/.gitignore"),
        *root.glob("iter-*/state/*.json"),
        layout.project / ".dvc" / "config",
        layout.project / ".dvcignore",
    ]
    tag = f"tabula/{layout.run}/iter-{iteration:04d}" if iteration > 0 else None
    return record_on_run_branch(layout.project, layout.run, files, message, tag=tag)


def use_prefect_api(cfg: Config) -> None:
    """Point this process's Prefect client at ``pipeline.prefect_api_url`` (when set), with
    Prefect's analytics off; before the first flow runs."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if cfg.pipeline.prefect_api_url:
        os.environ["PREFECT_API_URL"] = cfg.pipeline.prefect_api_url
