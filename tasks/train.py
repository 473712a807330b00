"""The training stage: continue the latest network on the current data window, export it;
its Prefect task checks the window against its recorded hashes first.

``train_stage`` is a plain function (its Prefect task below and ``tabula train``
call it). It

1. validates every shard of the window (a bad one fails with its name before any step),
2. starts from ``init``: a Lightning ``.ckpt`` (weights, momentum buffers, global step: the
   paper's training continues from the latest parameters whatever the gate decided), an exported
   model (weights only; the schedule resumes at its recorded ``global_step``), or nothing (a
   fresh network from ``seed``),
3. runs ``steps`` SGD steps (or, with ``samples_per_row``, as many as the window's newest
   rows call for: `tabula.plan.sized_steps`) as one Lightning epoch (so the saved ``.ckpt`` is
   an end-of-epoch checkpoint and the next stage starts a clean epoch on its own window),
4. writes ``train.ckpt`` beside ``out`` (for the next stage; also saved every
   ``training.checkpoint_every`` steps) and the exported model ``out`` with its lineage: parent
   path and sha256, every shard with its sha256, seed, global step, config, losses, versions,
5. with ``holdout_games``, measures the trained network's losses on the games held out of the
   window (``val/loss``, ``val/value_loss``, ``val/policy_loss`` in MLflow, beside the
   training losses, and in the result).

With ``training.deterministic`` the same inputs and seed give bit-identical weights on CPU
(``weights_sha256``): Lightning's ``seed_everything``, ``torch.use_deterministic_algorithms``
(restored afterwards), all sampling drawn from the seed in the main process.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from prefect import task
from pytorch_lightning.callbacks import Callback, TQDMProgressBar
from pytorch_lightning.loggers import MLFlowLogger

from model.checkpoint import (
    CheckpointError,
    CheckpointLineage,
    FileRef,
    ShardRef,
    load_checkpoint,
    save_checkpoint,
)
from model.datamodule import ShardDataModule
from model.evaluator import native_bf16, set_threads
from model.files import atomic_path, file_sha256
from model.network import config_network_args, network_args, weights_sha256
from model.system import LOG_EVERY_N_STEPS, AlphaZeroSystem, lr_at
from tabula.config import Config
from tabula.errors import TabulaError
from tabula.plan import TrainSpec, sized_steps, torch_threads
from tasks.retry import IO_RETRIES
from tasks.run.layout import RunLayout, relative_to, reset_dir
from tasks.run.markers import finished
from tasks.run.records import SelfplayRecord, Stage, Trained, TrainResult
from tasks.versioning import code_commit, status
from tasks.watch import reporting

CKPT_NAME = "train.ckpt"


class TrainError(TabulaError, ValueError):
    """A training stage cannot start: bad ``init``, a network that does not fit; one line."""


class _BorrowedRunLogger(MLFlowLogger):
    """MLFlowLogger writing into a run the caller owns: it neither logs Lightning's hparams
    (the tracking task logs the config once; MLflow params are immutable) nor ends the run,
    nor leaves ``MLFLOW_TRACKING_URI`` set in the process's environment (MLflow's
    ``set_tracking_uri``, which it calls, sets it; processes started later would inherit it)."""

    @property
    def experiment(self) -> Any:
        before = os.environ.get("MLFLOW_TRACKING_URI")
        try:
            return super().experiment
        finally:
            if before is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = before

    def log_hyperparams(self, params: Any) -> None:
        return None

    def finalize(self, status: str = "success") -> None:
        return None


class _PeriodicCheckpoint(Callback):
    """Overwrites ``path`` (atomically) with the trainer's state every ``every`` steps."""

    def __init__(self, path: Path, every: int) -> None:
        self.path, self.every = path, every

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step % self.every == 0:
            _save_trainer(trainer, self.path)


class _StepReport(Callback):
    """Calls ``on_step(done, steps)`` after each step of this stage (a progress display)."""

    def __init__(self, on_step: Callable[[int, int], None], steps: int) -> None:
        self.on_step, self.steps, self.start = on_step, steps, 0

    def on_train_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.start = trainer.global_step  # a resumed stage counts from where it was

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.on_step(trainer.global_step - self.start, self.steps)


def _save_trainer(trainer: pl.Trainer, path: Path) -> None:
    with atomic_path(path) as tmp:
        # weights_only=False here means "with optimizer and loop state", what a resume needs.
        trainer.save_checkpoint(tmp, weights_only=False)


def _read_init(init: Path, cfg: Config) -> tuple[str, dict[str, Any]]:
    """Classify ``init``: ("lightning", ckpt dict) or ("exported", metadata + state)."""
    if not init.is_file():
        raise TrainError(f"{init}: init checkpoint not found")
    try:
        payload = torch.load(init, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one user-facing line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TrainError(f"{init}: not a readable checkpoint ({first})") from None
    want = config_network_args(cfg)
    if isinstance(payload, dict) and "pytorch-lightning_version" in payload:
        got = network_args(payload.get("hyper_parameters") or {})
        kind = "lightning"
    elif isinstance(payload, dict) and payload.get("format") == "tabula-checkpoint":
        got = network_args(payload.get("network") or {})
        kind = "exported"
    else:
        raise TrainError(f"{init}: neither a Lightning .ckpt nor a tabula model checkpoint")
    if got != want:
        raise TrainError(f"{init}: network {got} does not match the config's {want}")
    return kind, payload


def _system(
    cfg: Config, init: Path | None, seed: int, log_every: int, lr_boundaries: list[int]
) -> tuple[AlphaZeroSystem, str | None, int]:
    """The LightningModule to fit, the ckpt path to resume (or None) and the max epochs."""
    kind, payload = _read_init(init, cfg) if init is not None else (None, {})
    step_offset = 0
    if kind == "lightning":
        step_offset = int(payload["hyper_parameters"].get("step_offset", 0))
    elif kind == "exported":
        step_offset = int(payload.get("metadata", {}).get("global_step") or 0)
    t = cfg.training
    pl.seed_everything(seed, workers=True, verbose=False)  # fresh weights depend on the seed
    system = AlphaZeroSystem(
        **config_network_args(cfg),
        ownership_weight=t.ownership_weight,
        score_weight=t.score_weight,
        fast_row_weight=t.fast_row_weight,
        lr_boundaries=list(lr_boundaries),
        lr_values=list(t.lr_values),
        momentum=t.momentum,
        weight_decay=t.weight_decay,
        step_offset=step_offset,
        log_every_n_steps=log_every,
    )
    if kind == "exported":
        assert init is not None
        try:
            net, _ = load_checkpoint(init, expect_board_size=cfg.rules.board_size)
        except CheckpointError as e:
            raise TrainError(str(e)) from None
        system.net.load_state_dict(net.state_dict())
    if kind == "lightning":
        # One epoch per stage: the resumed trainer runs exactly one more epoch.
        return system, str(init), int(payload.get("epoch", 0)) + 1
    return system, None, 1


@contextmanager
def _quiet_and_deterministic() -> Iterator[None]:
    """Process-wide switches for the stage only; restored afterwards."""
    was = torch.are_deterministic_algorithms_enabled()
    lg = logging.getLogger("pytorch_lightning")
    level = lg.level
    lg.setLevel(logging.WARNING)  # no banners ("GPU available", tips); the bar is separate
    try:
        with warnings.catch_warnings():
            # In-process batches are measured at >= 5x training's rate (bench/train.py).
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*treespec.*")
            yield
    finally:
        torch.use_deterministic_algorithms(was)
        lg.setLevel(level)


def _logger(tracking_uri: str | None, run_id: str | None) -> Any:
    """Lightning's MLflow logger on the caller's run (a new run if none), or no logger."""
    if tracking_uri is None:
        return False
    return _BorrowedRunLogger(
        tracking_uri=tracking_uri, run_id=run_id, experiment_name="tabula-train"
    )


def _trainer(
    cfg: Config,
    out: Path,
    ckpt: Path,
    max_epochs: int,
    logger: Any,
    progress: bool,
    steps: int,
    extra: list[Callback],
    log_every: int,
    bf16: bool,
) -> pl.Trainer:
    t = cfg.training
    callbacks: list[Callback] = [_PeriodicCheckpoint(ckpt, t.checkpoint_every), *extra]
    if progress:
        callbacks.append(TQDMProgressBar(refresh_rate=max(1, steps // 100)))
    return pl.Trainer(
        accelerator="auto",
        devices=1,
        max_epochs=max_epochs,
        precision="bf16-mixed" if bf16 else "32-true",
        deterministic=t.deterministic,
        logger=logger,
        callbacks=callbacks,
        log_every_n_steps=log_every,
        enable_checkpointing=False,
        enable_progress_bar=progress,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=out.parent,
    )


def _lineage(
    cfg: Config,
    init: Path | None,
    dm: ShardDataModule,
    system: AlphaZeroSystem,
    seed: int,
    steps: int,
    model_id: str | None,
    project: Path | None,
) -> CheckpointLineage:
    window = dm.window
    assert window is not None

    def rel(path: Path) -> str:
        return str(relative_to(path, project))

    return CheckpointLineage(
        model_id=model_id,
        seed=seed,
        global_step=system.run_step,
        parent=None if init is None else FileRef(rel(init), file_sha256(init)),
        shards=tuple(ShardRef(rel(p), file_sha256(p), p in window.used) for p in window.shards),
        window={
            "positions": len(window),
            "games": window.games,
            "iterations": list(window.iterations),
            "dropped_games": window.dropped_games,
            **({} if window.held_out is None else {"held_out_games": window.held_out.games}),
        },
        steps=steps,
        lr_boundaries=tuple(int(b) for b in system.hparams["lr_boundaries"]),
        losses=dict(system.final_losses),
        config=cfg.model_dump(mode="json"),
        code_commit=code_commit(),
        # Bit-identical rebuilds need the same torch build and intra-op thread count.
        torch_threads=torch.get_num_threads(),
        torch=str(torch.__version__),
        lightning=str(pl.__version__),
    )


def train_stage(
    cfg: Config,
    data: list[Path],
    out: Path,
    *,
    init: Path | None = None,
    steps: int,
    seed: int,
    mlflow_run_id: str | None = None,
    tracking_uri: str | None = None,
    progress: bool = True,
    model_id: str | None = None,
    ckpt: Path | None = None,
    on_step: Callable[[int, int], None] | None = None,
    lr_boundaries: Sequence[int] | None = None,
    bf16: bool | None = None,
    project: Path | None = None,
    samples_per_row: float | None = None,
    holdout_games: int = 0,
) -> TrainResult:
    """Train ``steps`` steps on the window of ``data`` (shard files/folders) from ``init``.

    samples_per_row: train instead as many steps as draw each row of the window's newest
    iteration about that many times (`tabula.plan.sized_steps`); holdout_games: leave the newest
    that-many games of that iteration out of the window and measure the trained network on
    them (`model.system.AlphaZeroSystem.held_out_losses`).

    lr_boundaries: the global steps where the rate drops (default: the config's schedule for
    a run of ``pipeline.iterations``, `tabula.config.TrainingConfig.boundaries_for`); the
    pipeline passes those of the run it is running, reproduction the recorded ones. bf16:
    autocast or not (default: ``training.bf16``, "auto" resolved for this machine).

    Writes the exported model to ``out`` and the Lightning checkpoint to ``ckpt`` (default:
    ``train.ckpt`` beside ``out``). Metrics go to MLflow run ``mlflow_run_id`` (or a new run)
    when ``tracking_uri`` is given; ``on_step(done, steps)`` after every step. Raises
    ``ShardError``/``DataWindowError`` for bad data and ``TrainError`` for a bad ``init``, all
    before the first step. project: the folder the lineage's paths are relative to (the
    pipeline's project; default: the paths as given).
    """
    if steps < 1:
        raise TrainError(f"steps must be >= 1 (got {steps})")
    out = Path(out)
    init = None if init is None else Path(init)
    ckpt = Path(ckpt) if ckpt is not None else out.with_name(CKPT_NAME)
    t = cfg.training
    dm = ShardDataModule(data, cfg.rules.board_size, t.batch_size, steps, seed,
                         window_games=t.window_games, window_iterations=t.window_iterations,
                         num_workers=t.num_workers,
                         value_target_mix=t.value_target_mix,
                         aux=cfg.network.aux_heads, holdout_games=holdout_games)  # fmt: skip
    with _quiet_and_deterministic():
        dm.setup("fit")  # every shard validated before anything else happens
        assert dm.window is not None
        if samples_per_row is not None:
            steps = dm.steps = sized_steps(dm.window.latest, samples_per_row, t.batch_size)
        # A stage shorter than the interval logs every `steps` steps: one point at least.
        log_every = min(LOG_EVERY_N_STEPS, steps)
        if lr_boundaries is None:
            lr_boundaries = t.boundaries_for(cfg.pipeline.iterations)
        system, resume, max_epochs = _system(cfg, init, seed, log_every, list(lr_boundaries))
        logger = _logger(tracking_uri, mlflow_run_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        extra = [] if on_step is None else [_StepReport(on_step, steps)]
        if bf16 is None:
            bf16 = native_bf16(cfg.pipeline.device) if t.bf16 == "auto" else bool(t.bf16)
        trainer = _trainer(
            cfg, out, ckpt, max_epochs, logger, progress, steps, extra, log_every, bf16
        )
        started = time.perf_counter()
        # Our .ckpt files hold only tensors and plain values: load them the safe way.
        trainer.fit(system, datamodule=dm, ckpt_path=resume, weights_only=True)
        seconds = time.perf_counter() - started
        _save_trainer(trainer, ckpt)
    lineage = _lineage(cfg, init, dm, system, seed, steps, model_id, project)
    save_checkpoint(out, system.net, lineage)
    held = dm.window.held_out
    val = {} if held is None else system.held_out_losses(held.in_order(t.batch_size))
    if val and logger:
        logger.log_metrics(_val_metrics(val), step=system.run_step)
    losses = system.final_losses
    return TrainResult(
        model=out,
        ckpt=ckpt,
        global_step=system.run_step,
        steps=steps,
        seed=seed,
        loss=losses["total"],
        value_loss=losses["value"],
        policy_loss=losses["policy"],
        l2_loss=losses["l2"],
        weights_sha256=weights_sha256(system.net),
        samples_per_s=steps * t.batch_size / seconds,
        positions=len(dm.window),
        games=dm.window.games,
        lr_boundaries=tuple(int(b) for b in system.hparams["lr_boundaries"]),
        lr=lr_at(system.run_step - 1, system.hparams["lr_boundaries"], t.lr_values),
        bf16=bf16,
        val_loss=val.get("total"),
        val_value_loss=val.get("value"),
        val_policy_loss=val.get("policy"),
        held_out_positions=None if held is None else len(held),
    )


def _val_metrics(losses: dict[str, float]) -> dict[str, float]:
    """Held-out losses (`model.system.AlphaZeroSystem.held_out_losses`) as MLflow metrics:
    ``val/loss`` (the total, as training's ``loss``) and ``val/value_loss``,
    ``val/policy_loss`` (and ``val/ownership_loss``, ``val/score_loss`` with the auxiliary
    heads); the L2 term is training's own."""
    named = {f"val/{k}_loss": v for k, v in losses.items() if k not in ("total", "l2")}
    return {"val/loss": losses["total"], **named}


def window_hashes(layout: RunLayout, window: tuple[str, ...]) -> dict[str, str]:
    """Each self-play directory of a window -> the DVC hash its own iteration recorded."""
    hashes = {}
    for rel in window:
        i = int(Path(rel).parent.name.removeprefix("iter-"))
        done = finished(layout, i, Stage.SELFPLAY, SelfplayRecord)
        hashes[rel] = "" if done is None else done.hashes.get(rel, "")
    return hashes


def training_init(layout: RunLayout, parent: int) -> Path:
    """What training continues from: the parent's Lightning checkpoint (weights, optimizer and
    loop state) when it has one, else its exported model (iteration 0, the random network)."""
    ckpt = layout.trainer_ckpt(parent)
    return ckpt if parent > 0 and ckpt.exists() else layout.model(parent)


@task(name="train", task_run_name="train-i{spec.iteration}", **IO_RETRIES)
def train(
    cfg: Config,
    layout: RunLayout,
    spec: TrainSpec,
    mlflow_run_id: str | None,
    tracking_uri: str | None,
    threads: int | None = None,
    model_dir: Path | None = None,
) -> Trained:
    """Train ``spec`` (`training_init` of its parent, its window, seed, steps or samples per
    row, rate schedule, precision and held-out games) and export ``iter-N/model`` (or
    ``model_dir``: reproduction retrains into a scratch folder) on ``threads`` torch threads
    (default: one per core; reproduction passes the recorded count). Paths in the result are
    project-relative.

    The window is checked against its recorded DVC hashes first (``verify_window``).
    """
    i = spec.iteration
    verify_window(layout, list(spec.window))
    out = model_dir or layout.model_dir(i)
    reset_dir(out)
    threads = threads or torch_threads()
    set_threads(threads)
    started = time.perf_counter()
    show = reporting(Stage.TRAIN, f"iter {i} training (steps)")
    result = train_stage(
        cfg,
        [layout.project / w for w in spec.window],
        out / layout.model(i).name,
        init=training_init(layout, spec.parent),
        steps=spec.steps,
        seed=spec.seed,
        mlflow_run_id=mlflow_run_id,
        tracking_uri=tracking_uri,
        progress=False,
        model_id=layout.model_id(i),
        on_step=show,
        lr_boundaries=list(spec.lr_boundaries),
        bf16=spec.bf16,
        project=layout.project,
        samples_per_row=spec.samples_per_row,
        holdout_games=spec.holdout_games,
    )
    relative = dataclasses.replace(
        result,
        model=relative_to(result.model, layout.project),  # (a reproduction may train elsewhere)
        ckpt=relative_to(result.ckpt, layout.project),
    )
    return Trained(result=relative, seconds=time.perf_counter() - started, threads=threads)


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
