"""Shared builders for the model tests: random but valid shard records."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from model.shards import ShardRecords


def random_records(rows: int, n: int, rng: np.random.Generator) -> ShardRecords:
    """Valid records: 0/1 planes whose colour plane matches to_play, pi a distribution."""
    to_play = rng.choice(np.array([-1, 1], np.int8), rows)
    planes = (rng.random((rows, 17, n, n)) < 0.3).astype(np.uint8)
    planes[:, 16] = (to_play == 1)[:, None, None]
    pi = rng.random((rows, n * n + 1)).astype(np.float32)
    pi[pi < 0.7] = 0.0
    pi[:, -1] += np.float32(1e-3)
    pi = (pi / pi.sum(axis=1, keepdims=True)).astype(np.float32)
    return ShardRecords(
        planes=planes,
        pi=pi,
        z=rng.choice(np.array([-1.0, 0.0, 1.0], np.float32), rows),
        to_play=to_play,
        game_id=np.array([f"r0-i2-w1-g{i // 7}" for i in range(rows)], dtype=np.str_),
        move_number=(np.arange(rows) % 7).astype(np.int32),
        iteration=np.full(rows, 2, np.int32),
        model_id=np.array(["ckpt-0001"] * rows, dtype=np.str_),
        resign_disabled=rng.random(rows) < 0.1,
        ownership=rng.integers(-1, 2, (rows, n * n)).astype(np.int8),
        score=rng.normal(0.0, 10.0, rows).astype(np.float32),
        scored=rng.random(rows) < 0.8,
    )


@pytest.fixture
def make_records() -> Callable[[int, int, np.random.Generator], ShardRecords]:
    """The builder itself, for tests that vary rows and board size."""
    return random_records


@pytest.fixture
def records() -> ShardRecords:
    return random_records(50, 9, np.random.default_rng(0))
