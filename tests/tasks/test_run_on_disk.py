"""The run on disk (`tasks.run`) is read without the heavy systems: ``tabula status`` and every
marker reader load no torch, Lightning, MLflow, DVC or Prefect to do it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ROOT / "tests" / "tasks" / "markers"  # the markers of a real one-iteration run
HEAVY = ("torch", "pytorch_lightning", "mlflow", "dvc", "prefect")


def _old_run(project: Path) -> None:
    root = project / "data" / "tiny"
    (root / "iter-0000" / "state").mkdir(parents=True)
    (root / "iter-0001" / "state").mkdir(parents=True)
    for marker in MARKERS.glob("*.json"):
        if marker.name == "champion.json":
            shutil.copy(marker, root / "champion.json")
        elif marker.name == "init.json":
            shutil.copy(marker, root / "iter-0000" / "state" / marker.name)
        else:
            shutil.copy(marker, root / "iter-0001" / "state" / marker.name)


READ_ALL = """
import sys
from pathlib import Path
from cli import app
from tabula.plan import IterationPlan
from tasks.run.layout import RunLayout
from tasks.run.markers import champion, finished
from tasks.run.records import (EvaluationRecord, InitRecord, PromotionRecord, SelfplayRecord,
                               Stage, TrainRecord, WorkerRecord)
from tasks.run.summary import summary_row

app(["status", "--set", "pipeline.name=tiny"], standalone_mode=False)
layout = RunLayout(Path.cwd(), "data", "tiny")
read = [finished(layout, 1, s, r) for s, r in [(Stage.PLAN, IterationPlan),
        (Stage.SELFPLAY, SelfplayRecord), (Stage.TRAIN, TrainRecord),
        (Stage.EVALUATE, EvaluationRecord), (Stage.PROMOTE, PromotionRecord)]]
read += [finished(layout, 1, Stage.SELFPLAY, WorkerRecord, worker=0), champion(layout),
         finished(layout, 0, Stage.INIT, InitRecord)]
assert all(r is not None for r in read), read
summary_row(1, *read[1:4], read[4].promoted)
print("heavy:", *sorted(m for m in %r if m in sys.modules))
"""


def test_status_and_marker_readers_load_nothing_heavy(tmp_path: Path) -> None:
    _old_run(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", READ_ALL % (HEAVY,)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 iteration(s) finished" in done.stdout
    assert done.stdout.splitlines()[-1] == "heavy:", done.stdout
