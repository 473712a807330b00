"""Prefect tasks of an iteration: one side effect each, keyed by (run, iteration, worker, seed).

Tasks pass paths and hashes, never tensors; each finds its finished output instead of redoing
it (``state/STAGE.json``, see ``tasks.layout``) and retries only on I/O errors. The work itself
lives in plain functions (``tasks.selfplay``, ``tasks.train``, ``tasks.match``) that the CLI
calls too.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
from prefect import task

from model.files import write_json
from tabula.config import Config
from tabula.errors import TabulaError
from tasks.layout import RunLayout, mark_done, reset_dir, stage_done
from tasks.progress import counter, report


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


def derive_seed(run_seed: int, *keys: int) -> int:
    """One 32-bit seed per (run, iteration, worker, ...) from the run's seed.

    32 bits because Lightning's ``seed_everything`` accepts no more.
    """
    return int(np.random.SeedSequence([run_seed, *keys]).generate_state(1, np.uint32)[0])


def plain(record: Any) -> dict[str, Any]:
    """A result object as JSON-ready data (paths as strings)."""
    if hasattr(record, "to_dict"):
        data = record.to_dict()
    elif is_dataclass(record):
        data = asdict(record)
    else:
        data = dict(record)
    return {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}


@task(name="init-model", task_run_name="init-model", **IO_RETRIES)
def init_model(cfg: Config, layout: RunLayout, seed: int) -> dict[str, Any]:
    """The randomly initialised network that starts the run (iteration 0)."""
    from model.network import network_for, save_checkpoint, weights_sha256

    done = stage_done(layout, 0, "init")
    if done is not None:
        return done
    reset_dir(layout.model_dir(0))
    net = network_for(cfg, seed)
    meta = {
        "model_id": layout.model_id(0),
        "seed": seed,
        "global_step": 0,
        "parent": None,
        "run": layout.run,
        "iteration": 0,
    }
    save_checkpoint(layout.model(0), net, meta)
    record = {"model": layout.rel(layout.model(0)), "sha256": weights_sha256(net)}
    mark_done(layout, 0, "init", record)
    return record


@task(name="selfplay-worker", task_run_name="selfplay-i{iteration}-w{worker}", **IO_RETRIES)
def selfplay_worker(
    cfg: Config, layout: RunLayout, iteration: int, worker: int, model: str, games: int, seed: int
) -> dict[str, Any]:
    """Play ``games`` games with ``model`` into ``iter-N/selfplay/worker-W`` (or find them)."""
    from tasks.selfplay import run_worker

    marker = f"selfplay-w{worker:02d}"
    done = stage_done(layout, iteration, marker)
    if done is not None:
        return done
    out = layout.worker(iteration, worker)
    reset_dir(out)  # a killed worker's shards are replaced, never appended to
    started = time.perf_counter()
    set_threads(max(1, (os.cpu_count() or 1) // cfg.selfplay.workers))
    label = f"iter {iteration} self-play w{worker} (games)"
    result = plain(
        run_worker(
            cfg,
            model,
            out,
            games=games,
            seed=seed,
            iteration=iteration,
            worker=worker,
            progress=lambda p: report(label, p.games, p.games_total),
        )
    )
    result["seconds"] = time.perf_counter() - started
    # Where it ran: a Dask worker's process on a cluster, the flow's own process locally.
    result["host"], result["pid"] = socket.gethostname(), os.getpid()
    mark_done(layout, iteration, marker, result)
    return result


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
) -> dict[str, Any]:
    """Continue training the latest network on the window; export ``iter-N/model``.

    The window is checked against its recorded DVC hashes first (``verify_window``).
    """
    from tasks.train import train_stage

    verify_window(layout, window)
    reset_dir(layout.model_dir(iteration))
    threads = threads or os.cpu_count() or 1
    set_threads(threads)
    started = time.perf_counter()
    result = plain(
        train_stage(
            cfg,
            [layout.project / w for w in window],
            layout.model(iteration),
            init=Path(init),
            steps=cfg.training.steps,
            seed=seed,
            mlflow_run_id=mlflow_run_id,
            tracking_uri=tracking_uri,
            progress=False,
            model_id=layout.model_id(iteration),
            on_step=lambda done, total: report(f"iter {iteration} training (steps)", done, total),
        )
    )
    result["seconds"] = time.perf_counter() - started
    result["threads"] = threads
    return result


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
def gate(cfg: Config, layout: RunLayout, iteration: int, best: int, seed: int) -> dict[str, Any]:
    """The candidate plays the champion; the decision comes with its evidence."""
    from tasks.match import run_gate

    out = layout.match(iteration) / "gate"
    reset_dir(out)
    started = time.perf_counter()
    decision = run_gate(
        str(layout.model(iteration)),
        str(layout.model(best)),
        cfg,
        out,
        store=layout.results,
        seed=seed,
        iteration=iteration,
        match_id=f"{layout.run}-i{iteration:04d}-gate",
        progress=counter(f"iter {iteration} gate (games)", cfg.evaluation.gating_games),
    )
    result = plain(decision)
    result["seconds"] = time.perf_counter() - started
    return result


@task(name="anchor-match", task_run_name="anchor-i{iteration}-{anchor}", **IO_RETRIES)
def anchor_match(
    cfg: Config, layout: RunLayout, iteration: int, anchor: str, seed: int
) -> dict[str, Any]:
    """A few games against a fixed anchor (random, GnuGo) that ground the Elo scale."""
    from tasks.match import run_match

    name = anchor.split()[0].removeprefix("gtp:")
    out = layout.match(iteration) / f"vs-{name}"
    reset_dir(out)
    started = time.perf_counter()
    result = plain(
        run_match(
            str(layout.model(iteration)),
            anchor,
            cfg.evaluation.anchor_games,
            cfg,
            out,
            layout.results,
            seed=seed,
            iteration=iteration,
            match_id=f"{layout.run}-i{iteration:04d}-vs-{name}",
            progress=counter(f"iter {iteration} vs {name} (games)", cfg.evaluation.anchor_games),
        )
    )
    result["seconds"] = time.perf_counter() - started
    return result


@task(name="ratings", task_run_name="ratings-i{iteration}")
def ratings(layout: RunLayout, iteration: int) -> list[dict[str, Any]]:
    """Fit Elo over every game of the run so far; write the table and the Elo curve."""
    from tasks.ratings import plot_elo_curve, ratings_table

    table = ratings_table(layout.results)
    write_json(layout.match(iteration) / "ratings.json", table)
    by_name = {row["player"]: row for row in table}
    points = []
    for j in range(0, iteration + 1):
        row = by_name.get(layout.model_id(j))
        if row is not None:
            points.append((j, row["elo"], row["low"], row["high"]))
    if points:
        plot_elo_curve(points, layout.root / "elo.png")
    return table


@task(name="dvc-commit", task_run_name="dvc-commit-i{iteration}-{stage}", **IO_RETRIES)
def dvc_commit(layout: RunLayout, iteration: int, stage: str) -> dict[str, str]:
    """Record a finished stage's outputs in dvc.lock and push them to the remote."""
    from tasks.versioning import commit_stage

    return commit_stage(layout.project, layout.stage_file(iteration), stage)


@task(name="record-lineage", task_run_name="lineage-i{iteration}", **IO_RETRIES)
def record_lineage(layout: RunLayout, iteration: int, message: str) -> str | None:
    """Commit the run's stage files and locks to ``tabula/runs/<run>``; tag the iteration."""
    from tasks.versioning import record_on_run_branch

    root = layout.root
    files = [
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
