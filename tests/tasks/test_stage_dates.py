"""Stage outputs carry no wall-clock date: the evaluate stage played again on
another day (a resume after midnight) writes the same bytes, so DVC records the same hash.

The clock is moved in-process: ``time.time`` and the ``datetime``/``date`` classes as every
project module sees them (``import datetime`` or ``from datetime import ...``) read a day later.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tabula.config import Config
from tasks import versioning
from tasks.evaluate import anchor_match, gate, ratings
from tasks.run.layout import RunLayout

PROJECT_PACKAGES = ("tabula", "tasks", "model", "flows", "cli")


def _move_clock(monkeypatch: pytest.MonkeyPatch, days: int) -> None:
    """Make every clock the project reads (``time.time``, ``datetime.now``/``utcnow``/
    ``today``, ``date.today``) ``days`` later, until the test ends."""
    delta = dt.timedelta(days=days)
    real_datetime, real_date, real_time = dt.datetime, dt.date, time.time

    class Later(real_datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Later:  # type: ignore[override]
            return real_datetime.now(tz) + delta  # type: ignore[return-value]

        @classmethod
        def utcnow(cls) -> Later:  # type: ignore[override]
            return real_datetime.now(dt.UTC).replace(tzinfo=None) + delta  # type: ignore[return-value]

        @classmethod
        def today(cls) -> Later:  # type: ignore[override]
            return cls.now()

    class LaterDate(real_date):
        @classmethod
        def today(cls) -> LaterDate:  # type: ignore[override]
            return real_date.today() + delta  # type: ignore[return-value]

    monkeypatch.setattr(time, "time", lambda: real_time() + delta.total_seconds())
    monkeypatch.setattr(dt, "datetime", Later)
    monkeypatch.setattr(dt, "date", LaterDate)
    fakes = (("datetime", real_datetime, Later), ("date", real_date, LaterDate))
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in PROJECT_PACKAGES:
            continue
        for attr, real, fake in fakes:
            if getattr(module, attr, None) is real:
                monkeypatch.setattr(module, attr, fake)


def _evaluate(cfg: Config, layout: RunLayout, i: int) -> dict[str, bytes]:
    """Run the evaluate stage's games and fit (gate, an anchor match, the ratings) as the
    pipeline does, each resetting its folder; returns every file of ``match/`` by path."""
    gate.fn(cfg, layout, i, i - 1, 7)
    anchor_match.fn(cfg, layout, i, "random", 8)
    ratings.fn(cfg, layout, i)
    out = layout.match(i)
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_an_evaluate_stage_resumed_the_next_day_hashes_the_same(
    tmp_path: Path,
    config5: Callable[..., Config],
    tiny_checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = config5(
        "evaluation.gating=true",
        "evaluation.gating_games=2",
        "evaluation.anchor_games=2",
        "evaluation.simulations=2",
    )
    layout = RunLayout(tmp_path, "data", "dates")
    for i in (0, 1):
        layout.model_dir(i).mkdir(parents=True)
        shutil.copy(tiny_checkpoint, layout.model(i))

    today = _evaluate(cfg, layout, 1)
    hash_today = versioning.dir_hash(layout.match(1))
    assert any(name.endswith(".sgf") for name in today) and "gate/gate.json" in today

    day = dt.datetime.now(dt.UTC).date()
    _move_clock(monkeypatch, days=1)
    assert dt.datetime.now(dt.UTC).date() > day  # the clock the stage reads is a day on
    tomorrow = _evaluate(cfg, layout, 1)  # the stage resumed after midnight: done again
    assert versioning.dir_hash(layout.match(1)) == hash_today
    assert tomorrow == today
