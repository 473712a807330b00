"""Where a run's files live, how finished stages are marked, and the run lock.

The one drawing of a run's folder (the README and docs/design.md link here). Each path in it is
the `RunLayout` member named on its right, and nothing else builds a run's paths
(`tests/tasks/test_layout.py` checks that every member is drawn here):

```
data/<run>/                  root
  .lock                      lock: held by the pipeline running the run (`RunLock`)
  params.yaml                params: the run's resolved config, frozen at its first start
  uid                        uid: the run's identity in the tracking store (first start)
  champion.json              champion: the current best checkpoint (an atomic pointer)
  budget.json                budget: what the run may spend and has spent, by iteration
  results/                   results: every game result of the run (the Elo table grows here)
  elo.png                    elo_plot: the Elo curve over the iterations
  dvc.yaml                   dvc_reports: the run's DVC reporting file (params, metrics, plots)
  metrics.json               metrics: the last iteration's numbers (`dvc metrics show`)
  plots/                     plots: the curves over the iterations (`dvc plots show`)
    CURVE.csv                plot(curve): elo, loss and anchors
  iter-0000/model/model.pt   model(0): the randomly initialised network that starts the run
  iter-NNNN/                 iteration(i)
    dvc.yaml                 stage_file(i): the iteration's DVC stages
    dvc.lock                 stage_lock(i): their recorded hashes
    .gitignore               gitignore(i): DVC's, naming the outputs it keeps out of git
    selfplay/                selfplay(i)
      worker-WW/             worker(i, w): the shards and sample SGFs of one self-play worker
    model/                   model_dir(i)
      model.pt               model(i): the exported checkpoint
      train.ckpt             trainer_ckpt(i): Lightning's, which the next training resumes
    match/                   match(i): the iteration's games after training
      gate/                  gate(i): the gating evidence (gate.json) and its games' SGFs
      vs-ANCHOR/             anchor_match(i, anchor): the SGFs of the games against an anchor
      ratings.json           ratings(i): the Elo table after the iteration's games
    state/                   state(i)
      STAGE.json             marker(i, stage): written last by each stage
```

A stage is finished exactly when its ``state/STAGE.json`` exists (it holds the stage's record,
`tasks.run.records`; `tasks.run.markers` reads and writes it); outputs of unfinished stages are
removed and rebuilt from their seeds on resume, so nothing is duplicated. The run's files on
its git branch are its config, identity, champion and reports, and each iteration's stage
file, lock, ``.gitignore`` and markers (`tasks.commits.record_lineage`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabula.errors import TabulaError


class RunLockedError(TabulaError):
    """Another pipeline holds the run's lock."""


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run under ``project/data_dir/run``: the members of the module's drawing."""

    project: Path
    data_dir: str
    run: str

    @property
    def root(self) -> Path:
        return self.project / self.data_dir / self.run

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

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

    @property
    def elo_plot(self) -> Path:
        return self.root / "elo.png"

    @property
    def dvc_reports(self) -> Path:
        return self.root / "dvc.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    def plot(self, curve: str) -> Path:
        return self.plots / f"{curve}.csv"

    def iteration(self, i: int) -> Path:
        return self.root / f"iter-{i:04d}"

    def iterations(self) -> list[int]:
        """The iterations that have a folder on disk, in order."""
        found = (re.fullmatch(r"iter-([0-9]+)", p.name) for p in self.root.glob("iter-*"))
        return sorted(int(m.group(1)) for m in found if m)

    def model_id(self, i: int) -> str:
        """The name of iteration i's network: its checkpoint's model id, its Elo player name."""
        return f"{self.run}/iter-{i:04d}"

    def stage_file(self, i: int) -> Path:
        return self.iteration(i) / "dvc.yaml"

    def stage_lock(self, i: int) -> Path:
        return self.iteration(i) / "dvc.lock"

    def gitignore(self, i: int) -> Path:
        return self.iteration(i) / ".gitignore"

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

    def gate(self, i: int) -> Path:
        return self.match(i) / "gate"

    def anchor_match(self, i: int, anchor: str) -> Path:
        return self.match(i) / f"vs-{anchor}"

    def ratings(self, i: int) -> Path:
        return self.match(i) / "ratings.json"

    def state(self, i: int) -> Path:
        return self.iteration(i) / "state"

    def marker(self, i: int, stage: str) -> Path:
        """A stage's marker; ``stage``: `tasks.run.records.Stage.marker_name`."""
        return self.state(i) / f"{stage}.json"

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
    """An exclusive lock on a run (`RunLayout.lock`); the OS drops it if the process dies."""

    def __init__(self, layout: RunLayout) -> None:
        self.path = layout.lock
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
