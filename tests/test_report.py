"""The closing lines of ``tabula run`` (`cli.report`): CPU-seconds by stage, the learning
share and the share of the cores the iterations kept busy."""

from __future__ import annotations

from dataclasses import replace

from cli.report import cpu_split
from tasks.run.summary import SummaryRow


def _row(i: int, cpu: dict[str, float], wall: dict[str, float], cores: int | None) -> SummaryRow:
    return SummaryRow(
        iteration=i, promoted=True, win_rate=None, elo=None, elo_low=None, elo_high=None,
        positions=0, games=0, v_resign=None, false_positive_rate=None, loss=0.0,
        policy_loss=0.0, value_loss=0.0, stage_seconds=0.0, vs_random=None,
        stage_cpu_s=cpu, stage_wall_s=wall, cores=cores,
    )  # fmt: skip


def test_the_cores_busy_are_cpu_over_wall_times_cores() -> None:
    rows = [
        _row(1, {"selfplay": 30.0, "train": 18.0, "bookkeeping": 2.0},
             {"selfplay": 20.0, "train": 10.0, "bookkeeping": 5.0}, 2),
        _row(2, {"selfplay": 34.0, "train": 20.0, "bookkeeping": 2.0},
             {"selfplay": 20.0, "train": 10.0, "bookkeeping": 5.0}, 2),
    ]  # fmt: skip
    line = cpu_split(rows)
    # 106 CPU-s over 70 s on 2 cores: 76%; self-play 64 / (40 * 2) = 80%, train 38 / 40 = 95%
    assert line == (
        "CPU-seconds by stage: selfplay 64, train 38, bookkeeping 4; learning share 96%;"
        " cores busy 76% of 2 (selfplay 80%, train 95%)"
    )


def test_rows_without_wall_time_give_the_cpu_split_alone() -> None:
    rows = [_row(1, {"selfplay": 30.0, "train": 10.0}, {}, None)]
    assert cpu_split(rows) == "CPU-seconds by stage: selfplay 30, train 10; learning share 100%"
    assert cpu_split([_row(1, {}, {}, None)]) is None


def test_the_gpu_busy_share_is_weighed_by_each_stage_wall_time() -> None:
    rows = [
        _row(1, {"selfplay": 30.0, "train": 10.0}, {"selfplay": 10.0, "train": 30.0}, 16),
        _row(2, {"selfplay": 30.0, "train": 10.0}, {"selfplay": 30.0, "train": 30.0}, 16),
    ]
    rows[0] = replace(rows[0], gpu_busy={"selfplay": 0.9, "train": 0.3})
    rows[1] = replace(rows[1], gpu_busy={"selfplay": 0.5, "train": 0.3})
    line = cpu_split(rows)
    # self-play (0.9 x 10 + 0.5 x 30) / 40 = 60%; train 30%; all (24 + 18) / 100 = 42%
    assert line is not None and line.endswith("; GPU busy 42% (selfplay 60%, train 30%)")
    assert "GPU" not in (cpu_split([replace(r, gpu_busy={}) for r in rows]) or "")
