"""One training stage: continue the latest network on the current data window, export it.

``train_stage`` is a plain function (the Prefect task in ``tasks.stages`` and ``tabula train``
call it). It

1. validates every shard of the window (a bad one fails with its name before any step),
2. starts from ``init``: a Lightning ``.ckpt`` (weights, momentum buffers, global step: the
   paper's training continues from the latest parameters whatever the gate decided), an exported
   model (weights only; the schedule resumes at its recorded ``global_step``), or nothing (a
   fresh network from ``seed``),
3. runs ``steps`` SGD steps as one Lightning epoch (so the saved ``.ckpt`` is an end-of-epoch
   checkpoint and the next stage starts a clean epoch on its own window),
4. writes ``train.ckpt`` beside ``out`` (for the next stage; also saved every
   ``training.checkpoint_every`` steps) and the exported model ``out`` with its lineage: parent
   path and sha256, every shard with its sha256, seed, global step, config, losses, versions.

With ``training.deterministic`` the same inputs and seed give bit-identical weights on CPU
(``weights_sha256``): Lightning's ``seed_everything``, ``torch.use_deterministic_algorithms``
(restored afterwards), all sampling drawn from the seed in the main process.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, TQDMProgressBar
from pytorch_lightning.loggers import MLFlowLogger

from model.datamodule import ShardDataModule
from model.evaluator import native_bf16
from model.files import atomic_path, file_sha256
from model.network import (
    CheckpointError,
    config_network_args,
    load_checkpoint,
    network_args,
    save_checkpoint,
    weights_sha256,
)
from model.system import AlphaZeroSystem, lr_at
from tabula.config import Config
from tabula.errors import TabulaError

CKPT_NAME = "train.ckpt"
#: Steps between logged metrics (losses are means over the window; see model.system).
LOG_EVERY_N_STEPS = 10


class TrainError(TabulaError, ValueError):
    """A training stage cannot start: bad ``init``, a network that does not fit; one line."""


@dataclass(frozen=True)
class TrainResult:
    """What a stage produced: paths and hashes, never tensors.

    ``global_step`` counts optimizer steps of the whole run (the schedule's clock); the losses
    are means over the last logging window; ``samples_per_s`` is over the whole stage.
    ``lr_boundaries``: the schedule's drops as this stage used them (global steps; empty in
    records written before they were recorded); ``lr``: the rate of its last step; ``bf16``:
    whether it trained under bf16 autocast (None: not recorded, the config's bool).
    """

    model: Path
    ckpt: Path
    global_step: int
    steps: int
    seed: int
    loss: float
    value_loss: float
    policy_loss: float
    l2_loss: float
    weights_sha256: str
    samples_per_s: float
    positions: int
    games: int
    lr_boundaries: tuple[int, ...] = ()
    lr: float | None = None
    bf16: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (paths as strings)."""
        from tasks.records import to_json

        return to_json(self)


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


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


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
) -> dict[str, Any]:
    window = dm.window
    assert window is not None
    return {
        "model_id": model_id,
        "parent": None if init is None else {"path": str(init), "sha256": file_sha256(init)},
        "shards": [
            {"path": str(p), "sha256": file_sha256(p), "used": p in window.used}
            for p in window.shards
        ],
        "window": {
            "positions": len(window),
            "games": window.games,
            "iterations": list(window.iterations),
            "dropped_games": window.dropped_games,
        },
        "seed": seed,
        "steps": steps,
        "global_step": system.run_step,
        "lr_boundaries": list(system.hparams["lr_boundaries"]),
        "losses": dict(system.final_losses),
        "config": cfg.model_dump(mode="json"),
        "code_commit": _git_commit(),
        # Bit-identical rebuilds need the same torch build and intra-op thread count.
        "torch_threads": torch.get_num_threads(),
        "torch": str(torch.__version__),
        "lightning": str(pl.__version__),
    }


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
) -> TrainResult:
    """Train ``steps`` steps on the window of ``data`` (shard files/folders) from ``init``.

    lr_boundaries: the global steps where the rate drops (default: the config's schedule for
    a run of ``pipeline.iterations``, `tabula.config.TrainingConfig.boundaries_for`); the
    pipeline passes those of the run it is running, reproduction the recorded ones. bf16:
    autocast or not (default: ``training.bf16``, "auto" resolved for this machine).

    Writes the exported model to ``out`` and the Lightning checkpoint to ``ckpt`` (default:
    ``train.ckpt`` beside ``out``). Metrics go to MLflow run ``mlflow_run_id`` (or a new run)
    when ``tracking_uri`` is given; ``on_step(done, steps)`` after every step. Raises
    ``ShardError``/``DataWindowError`` for bad data and ``TrainError`` for a bad ``init``, all
    before the first step.
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
                         aux=cfg.network.aux_heads)  # fmt: skip
    with _quiet_and_deterministic():
        dm.setup("fit")  # every shard validated before anything else happens
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
    save_checkpoint(out, system.net, _lineage(cfg, init, dm, system, seed, steps, model_id))
    assert dm.window is not None
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
    )
