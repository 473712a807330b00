"""What ``tabula gtp`` plays with, wherever a GUI starts it: the project (its MLflow store and
its runs), the checkpoint a ``--model`` names, and the config of the run it comes from.

A GUI starts an engine in a working directory of its own choosing (Sabaki and Lizzie: the
engine's folder, ``.venv/bin``), so the project is ``--project`` when given, else the working
directory when it holds runs (its ``data_dir``, ``data/``), else the checkout the installed
``tabula`` belongs to (`tasks.versioning.SOURCE_DIR`). ``MLFLOW_TRACKING_URI``, when set,
names the store as everywhere (`tasks.tracking.resolve_uri`).

The config is ``--config`` when given, else the frozen config (``data/<run>/params.yaml``) of
the run: ``--run``, else the run a ``models:/`` version is tagged with, else the run whose
folder holds a checkpoint path (wherever that is); else the quick start's. ``--set`` overrides
apply last. The board size is the checkpoint's (a network plays the one size it was trained
on) unless ``--set rules.board_size=N`` says otherwise, and a checkpoint of another size is
then refused.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tabula.config import Config, load_config
from tabula.errors import UsageError
from tabula.go.coords import MAX_SIZE, MIN_SIZE
from tasks.players import checkpoint_of
from tasks.run.layout import RunLayout
from tasks.scratch import scratch_prefix, sweep_orphans
from tasks.tracking import TAG_RUN, resolve_model
from tasks.versioning import SOURCE_DIR


@dataclass(frozen=True)
class GtpSetup:
    """What a ``tabula gtp`` engine plays with.

    ``cfg``: the config (rules, search, evaluation simulations); ``checkpoint``: the network's
    local file (None for the random player and GTP engines); ``sizes``: the board sizes the
    player can play (the checkpoint's one size, else 5..19); ``project``: the folder the MLflow
    store and runs were found in; ``run``: the run whose frozen config ``cfg`` is (None: none).
    """

    cfg: Config
    checkpoint: Path | None
    sizes: tuple[int, ...]
    project: Path
    run: str | None


def gtp_project(option: Path | None, data_dir: str, cwd: Path) -> Path:
    """``--project``; else ``cwd`` when it holds ``data_dir``; else the installed checkout."""
    if option is not None:
        if not option.is_dir():
            raise UsageError(f"--project {option}: no such folder")
        return option.resolve()
    return cwd if (cwd / data_dir).is_dir() else SOURCE_DIR


def gtp_setup(
    spec: str,
    project: Path | None,
    run: str | None,
    config: Path | None,
    overrides: list[str],
    cwd: Path,
) -> GtpSetup:
    """The `GtpSetup` of player ``spec`` (`tasks.players`' grammar) under the options
    ``--project``, ``--run``, ``--config`` and ``--set`` (the module's rules), with ``cwd`` the
    working directory. An unknown run, model or store is one line (UsageError)."""
    base = load_config(config, overrides)
    data_dir = base.pipeline.data_dir
    home = gtp_project(project, data_dir, cwd)
    tags: dict[str, str] = {}

    def resolve(uri: str) -> Path:
        sweep_orphans("model")
        scratch = Path(tempfile.mkdtemp(prefix=scratch_prefix("model")))
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)  # when the engine exits
        path, found = resolve_model(uri, base.pipeline.mlflow_tracking_uri, home, scratch)
        tags.update(found)
        return path

    checkpoint = checkpoint_of(spec, resolve)
    frozen = _frozen_config(home, data_dir, run or tags.get(TAG_RUN), required=run is not None)
    if frozen is None and run is None and checkpoint is not None:
        frozen = _config_beside(checkpoint)
    source = config if config is not None else frozen
    used = frozen.parent.name if frozen is not None else None
    if checkpoint is None:
        cfg = load_config(source, overrides)
        return GtpSetup(cfg, None, tuple(range(MIN_SIZE, MAX_SIZE + 1)), home, used)
    size = _board_size(checkpoint)
    cfg = load_config(source, [f"rules.board_size={size}", *overrides])
    return GtpSetup(cfg, checkpoint, (cfg.rules.board_size,), home, used)


def _config_beside(checkpoint: Path) -> Path | None:
    """The frozen config of the run whose folder holds ``checkpoint``
    (``<run>/iter-NNNN/model/model.pt`` beside ``<run>/params.yaml``), wherever it is."""
    model_dir = checkpoint.resolve().parent
    if model_dir.name != "model" or not re.fullmatch(r"iter-[0-9]{4,}", model_dir.parent.name):
        return None
    params = RunLayout(model_dir.parents[2], "", model_dir.parents[1].name).params
    return params if params.is_file() else None


def _frozen_config(project: Path, data_dir: str, run: str | None, required: bool) -> Path | None:
    """``data_dir/<run>/params.yaml`` when there; a ``--run`` (``required``) must have one."""
    if run is None:
        return None
    params = RunLayout(project, data_dir, run).params
    if params.is_file():
        return params
    if required:
        root = project / data_dir
        runs = sorted(p.parent.name for p in root.glob("*/params.yaml"))
        raise UsageError(
            f"--run {run}: no run {run!r} in {project} (runs: {', '.join(runs) or 'none'}; "
            "--project names another project)"
        )
    return None


def _board_size(checkpoint: Path) -> int:
    """The board size the checkpoint's network was built for (its recorded shape)."""
    from model.checkpoint import load_checkpoint  # torch only when a network plays

    return int(load_checkpoint(checkpoint)[0].board_size)
