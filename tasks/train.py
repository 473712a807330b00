"""The training stage: continue the latest network on the current data window, export it;
its Prefect task checks the window against its recorded hashes first.

``train_stage`` is a plain function (its Prefect task below and ``tabula train`` call it) that
trains one `tabula.plan.TrainSpec`, built for both by `tabula.plan.train_spec`. It

1. loads the spec's window (`model.datamodule.load_window`: every shard validated, a bad one
   failing with its name before any step) and sizes the stage on it (``steps``, or with
   ``samples_per_row`` as many as the window's newest rows call for: `TrainSpec.steps_on`),
   before the DataModule exists,
2. starts from ``init`` (`model.checkpoint.read_initial`): a Lightning ``.ckpt`` (weights,
   momentum buffers, global step: the paper's training continues from the latest parameters
   whatever the gate decided), an exported model (weights only; the schedule resumes at its
   recorded ``global_step``), or nothing (a fresh network from the spec's seed),
3. runs the steps as one Lightning epoch (so the saved ``.ckpt`` is an end-of-epoch checkpoint
   and the next stage starts a clean epoch on its own window),
4. writes ``train.ckpt`` beside ``out`` (for the next stage; also saved every
   ``training.checkpoint_every`` steps) and the exported model ``out`` with its lineage: parent
   path and sha256, every shard with its sha256, seed, global step, config, losses, versions,
5. with the spec's ``holdout_games``, measures the trained network's losses on the games held
   out of the window (``val/loss``, ``val/value_loss``, ``val/policy_loss`` in MLflow, beside
   the training losses, and in the result).

With ``training.deterministic`` the same inputs and seed give bit-identical weights on CPU
(``weights_sha256``): Lightning's ``seed_everything``, ``torch.use_deterministic_algorithms``
(restored afterwards), all sampling drawn from the seed in the main process.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from prefect import task
from pytorch_lightning.callbacks import Callback, TQDMProgressBar
from pytorch_lightning.loggers import Logger

from model.checkpoint import (
    CheckpointError,
    CheckpointLineage,
    FileRef,
    InitialNetwork,
    ShardRef,
    read_initial,
    save_checkpoint,
)
from model.datamodule import PositionWindow, ShardDataModule, load_window
from model.evaluator import set_threads
from model.files import atomic_path, file_sha256
from model.network import NetworkShape, weights_sha256
from model.system import LOG_EVERY_N_STEPS, AlphaZeroSystem, Objective, lr_at
from tabula.config import Config
from tabula.errors import TabulaError
from tabula.plan import TrainSpec, torch_threads
from tasks.planning import training_bf16
from tasks.retry import IO_RETRIES
from tasks.run.layout import RunLayout, relative_to, reset_dir
from tasks.run.markers import finished
from tasks.run.records import SelfplayRecord, Stage, Trained, TrainResult
from tasks.tracking.logger import lightning_logger
from tasks.versioning import code_commit, status
from tasks.watch import reporting

CKPT_NAME = "train.ckpt"


class TrainError(TabulaError, ValueError):
    """A training stage cannot start: bad ``init``, a network that does not fit; one line."""


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


def _initial(shape: NetworkShape, spec: TrainSpec, init: Path | None) -> InitialNetwork | None:
    """What the stage continues from (`model.checkpoint.read_initial`: deepened to ``shape``
    where the config grows the network at this iteration), refused in one line."""
    if init is None:
        return None
    try:
        return read_initial(init, shape, seed=spec.seed)
    except CheckpointError as e:
        raise TrainError(str(e)) from None


def _system(
    cfg: Config,
    spec: TrainSpec,
    shape: NetworkShape,
    initial: InitialNetwork | None,
    log_every: int,
) -> AlphaZeroSystem:
    """The LightningModule to fit: a fresh network of ``shape`` from the spec's seed, holding
    the initial checkpoint's weights when there is one."""
    pl.seed_everything(spec.seed, workers=True, verbose=False)  # fresh weights depend on it
    system = AlphaZeroSystem(
        shape,
        Objective.of(cfg, spec.lr_boundaries),
        step_offset=0 if initial is None else initial.step_offset,
        log_every_n_steps=log_every,
    )
    if initial is not None and initial.resume_epochs is None:  # an exported model's weights
        system.net.load_state_dict(initial.net.state_dict())  # (the trainer restores a .ckpt)
    return system


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


def _callbacks(
    cfg: Config, ckpt: Path, steps: int, progress: bool | Callable[[int, int], None]
) -> list[Callback]:
    """The periodic checkpoint, and a progress bar (``progress`` True) or a step report."""
    callbacks: list[Callback] = [_PeriodicCheckpoint(ckpt, cfg.training.checkpoint_every)]
    if progress is True:
        callbacks.append(TQDMProgressBar(refresh_rate=max(1, steps // 100)))
    elif callable(progress):
        callbacks.append(_StepReport(progress, steps))
    return callbacks


def _trainer(
    cfg: Config,
    root: Path,
    epochs: int,
    logger: Logger | None,
    callbacks: list[Callback],
    log_every: int,
    bf16: bool,
) -> pl.Trainer:
    return pl.Trainer(
        accelerator="auto",
        devices=1,
        max_epochs=epochs,
        precision="bf16-mixed" if bf16 else "32-true",
        deterministic=cfg.training.deterministic,
        logger=logger or False,
        callbacks=callbacks,
        log_every_n_steps=log_every,
        enable_checkpointing=False,
        enable_progress_bar=any(isinstance(c, TQDMProgressBar) for c in callbacks),
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )


@dataclass(frozen=True)
class _Fitted:
    """A stage's fit: the trained system, the window it sampled, the steps it took (sized
    before the DataModule existed), their seconds, the precision and the saved ``.ckpt``."""

    system: AlphaZeroSystem
    window: PositionWindow
    steps: int
    seconds: float
    bf16: bool
    ckpt: Path


def _fit_steps(
    trainer: pl.Trainer, system: AlphaZeroSystem, dm: ShardDataModule, resume: str | None
) -> None:
    """``trainer.fit``, a Ctrl-C inside it raised as the KeyboardInterrupt it is. Lightning
    catches that one, shuts down and calls ``sys.exit(1)``: the run would exit 1 on Prefect's
    crash lines instead of ending as an interrupt (exit 130, `cli.common.expected_errors`)."""
    try:
        trainer.fit(system, datamodule=dm, ckpt_path=resume, weights_only=True)
    except SystemExit as stop:
        if isinstance(stop.__context__, KeyboardInterrupt):  # (Lightning's own exit)
            raise KeyboardInterrupt("interrupted while training") from stop
        raise


def _fit(
    cfg: Config,
    spec: TrainSpec,
    out: Path,
    init: Path | None,
    project: Path | None,
    logger: Logger | None,
    progress: bool | Callable[[int, int], None],
) -> _Fitted:
    t = cfg.training
    window = load_window(
        [Path(w) if project is None else project / w for w in spec.window],
        cfg.rules.board_size,
        window_games=t.window_games,
        window_iterations=t.window_iterations,
        value_target_mix=t.value_target_mix,
        aux=cfg.network.aux_heads,
        holdout_games=spec.holdout_games,
    )  # every shard validated before anything else happens
    shape = NetworkShape.of(cfg, spec.iteration)  # (grown where the config says)
    window = window.with_inputs(shape.inputs)
    frequency = t.row_weights == "frequency"
    steps = spec.steps_on(window.latest_weight if frequency else window.latest, t.batch_size)
    log_every = min(LOG_EVERY_N_STEPS, steps)  # a short stage logs one point at least
    initial = _initial(shape, spec, init)
    system = _system(cfg, spec, shape, initial, log_every)
    resumed = None if initial is None else initial.resume_epochs
    ckpt = out.with_name(CKPT_NAME)
    out.parent.mkdir(parents=True, exist_ok=True)
    bf16 = training_bf16(cfg) if spec.bf16 is None else spec.bf16
    callbacks = _callbacks(cfg, ckpt, steps, progress)
    # One epoch per stage: a resumed trainer runs exactly one more.
    trainer = _trainer(cfg, out.parent, (resumed or 0) + 1, logger, callbacks, log_every, bf16)
    dm = ShardDataModule(
        window, t.batch_size, steps, spec.seed, num_workers=t.num_workers,
        frequency_weights=frequency,
    )  # fmt: skip
    started = time.perf_counter()
    # Our .ckpt files hold only tensors and plain values: load them the safe way.
    resume = None if resumed is None else str(init)
    _fit_steps(trainer, system, dm, resume)
    seconds = time.perf_counter() - started
    _save_trainer(trainer, ckpt)
    return _Fitted(system, window, steps, seconds, bf16, ckpt)


def _lineage(
    cfg: Config,
    spec: TrainSpec,
    fitted: _Fitted,
    init: Path | None,
    model_id: str | None,
    project: Path | None,
) -> CheckpointLineage:
    window, system = fitted.window, fitted.system

    def rel(path: Path) -> str:
        return str(relative_to(path, project))

    return CheckpointLineage(
        model_id=model_id,
        seed=spec.seed,
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
        steps=fitted.steps,
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
    spec: TrainSpec,
    out: Path,
    *,
    init: Path | None = None,
    project: Path | None = None,
    logger: Logger | None = None,
    model_id: str | None = None,
    progress: bool | Callable[[int, int], None] = True,
) -> TrainResult:
    """Train ``spec`` (`tabula.plan.TrainSpec`: its window, seed, steps or samples per row,
    rate schedule, precision and held-out games) from ``init`` and export the network to
    ``out``, the Lightning checkpoint to ``train.ckpt`` beside it.

    project: the folder the spec's window and the lineage's paths are relative to (the
    pipeline's project; None: the paths as given). logger: Lightning's logger of the
    metrics, the held-out losses too (None: none). model_id: the lineage's. progress: True
    draws a progress bar; a callable is called as ``progress(done, steps)`` after every step.

    Raises ``ShardError``/``DataWindowError`` for bad data and ``TrainError`` for a bad
    ``init``, all before the first step.
    """
    if spec.steps < 1:
        raise TrainError(f"steps must be >= 1 (got {spec.steps})")
    out = Path(out)
    with _quiet_and_deterministic():
        fitted = _fit(cfg, spec, out, init, project, logger, progress)
    save_checkpoint(out, fitted.system.net, _lineage(cfg, spec, fitted, init, model_id, project))
    held = fitted.window.held_out
    system = fitted.system
    val = {} if held is None else system.held_out_losses(held.in_order(cfg.training.batch_size))
    if val and logger:
        logger.log_metrics(_val_metrics(val), step=system.run_step)
    return _result(cfg, spec, out, fitted, val)


def _result(
    cfg: Config, spec: TrainSpec, out: Path, fitted: _Fitted, val: dict[str, float]
) -> TrainResult:
    system, window, steps = fitted.system, fitted.window, fitted.steps
    losses, boundaries = system.final_losses, system.hparams["lr_boundaries"]
    t = cfg.training
    return TrainResult(
        model=out,
        ckpt=fitted.ckpt,
        global_step=system.run_step,
        steps=steps,
        seed=spec.seed,
        loss=losses["total"],
        value_loss=losses["value"],
        policy_loss=losses["policy"],
        l2_loss=losses["l2"],
        weights_sha256=weights_sha256(system.net),
        samples_per_s=steps * t.batch_size / fitted.seconds,
        positions=len(window),
        games=window.games,
        lr_boundaries=tuple(int(b) for b in boundaries),
        lr=lr_at(system.run_step - 1, boundaries, t.lr_values),
        bf16=fitted.bf16,
        val_loss=val.get("total"),
        val_value_loss=val.get("value"),
        val_policy_loss=val.get("policy"),
        held_out_positions=None if window.held_out is None else len(window.held_out),
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
    """Train ``spec`` (`train_stage`, from `training_init` of its parent) and export
    ``iter-N/model`` (or
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
        spec,
        out / layout.model(i).name,
        init=training_init(layout, spec.parent),
        project=layout.project,
        logger=lightning_logger(tracking_uri, mlflow_run_id),
        model_id=layout.model_id(i),
        progress=show,
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
