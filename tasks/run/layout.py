"""Where a run's files live, how finished stages are marked, and the run lock.

```
data/<run>/
  params.yaml              the run's resolved config, frozen at its first start
  uid                      the run's identity in the tracking store (`tasks.runs.run_uid`)
  champion.json            the current best checkpoint (atomic pointer)
  budget.json              what the run may spend and has spent, iteration by iteration
  results/                 every game result of the run (the Elo table grows here)
  iter-0000/model/         the randomly initialised network that starts the run
  iter-NNNN/
    dvc.yaml, dvc.lock     the iteration's stages and their recorded hashes
    selfplay/worker-WW/    shards and sample SGFs of one self-play worker
    model/                 the exported checkpoint (model.pt) and Lightning's train.ckpt
    match/                 gating evidence, match SGFs and results
    state/STAGE.json       written last by each stage: the stage is finished
```

A stage is finished exactly when its ``state/STAGE.json`` exists (it holds the stage's record,
`tasks.run.records`; `tasks.run.markers` reads and writes it); outputs of unfinished stages are
removed and rebuilt from their seeds on resume, so nothing is duplicated.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabula.errors import TabulaError


class RunLockedError(TabulaError):
    """Another pipeline holds the run's lock."""


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run under ``project/data_dir/run``."""

    project: Path
    data_dir: str
    run: str

    @property
    def root(self) -> Path:
        return self.project / self.data_dir / self.run

    @property
    def params(self) -> Path:
        return self.root / "params.yaml"

    @property
    def uid(self) -> Path:
        return self.root / "uid"

    @property
    def champion(self) -> Path:
        return self.root / "champion.json"

    @property
    def budget(self) -> Path:
        return self.root / "budget.json"

    @property
    def results(self) -> Path:
        return self.root / "results"

    def iteration(self, i: int) -> Path:
        return self.root / f"iter-{i:04d}"

    def model_id(self, i: int) -> str:
        """The name of iteration i's network: its checkpoint's model id, its Elo player name."""
        return f"{self.run}/iter-{i:04d}"

    def stage_file(self, i: int) -> Path:
        return self.iteration(i) / "dvc.yaml"

    def selfplay(self, i: int) -> Path:
        return self.iteration(i) / "selfplay"

    def worker(self, i: int, w: int) -> Path:
        return self.selfplay(i) / f"worker-{w:02d}"

    def model_dir(self, i: int) -> Path:
        return self.iteration(i) / "model"

    def model(self, i: int) -> Path:
        return self.model_dir(i) / "model.pt"

    def trainer_ckpt(self, i: int) -> Path:
        return self.model_dir(i) / "train.ckpt"

    def match(self, i: int) -> Path:
        return self.iteration(i) / "match"

    def marker(self, i: int, name: str) -> Path:
        """A stage's marker; ``name``: `tasks.run.records.Stage.marker_name`."""
        return self.iteration(i) / "state" / f"{name}.json"

    def rel(self, path: Path) -> str:
        return str(path.resolve().relative_to(self.project.resolve()))


def relative_to(path: Path, root: Path | None) -> Path:
    """``path`` relative to ``root`` when it lies inside it (a project's file: what records
    store), else as it is (a file elsewhere, or no root)."""
    if root is None:
        return path
    resolved, base = path.resolve(), root.resolve()
    return resolved.relative_to(base) if resolved.is_relative_to(base) else path


def read_json(path: Path) -> Any | None:
    return json.loads(path.read_text()) if path.exists() else None


def reset_dir(path: Path) -> None:
    """Remove what an interrupted stage left behind and start it empty."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)


class RunLock:
    """An exclusive lock on a run (``data/<run>/.lock``); the OS drops it if the process dies."""

    def __init__(self, layout: RunLayout) -> None:
        self.path = layout.root / ".lock"
        self._handle = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held for the lock's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RunLockedError(
                f"run {self.path.parent.name!r} is already running ({holder} holds {self.path});"
                " wait for it or stop it first"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._handle = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
