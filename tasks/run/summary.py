"""What an iteration reports: its summary row, for the run's closing table and the
iteration's artifact; and the run's Elo scale, one fit for every iteration (`run_elos`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tasks.run.layout import RunLayout
from tasks.run.markers import finished
from tasks.run.records import (
    Elo,
    EvaluationRecord,
    RatingRow,
    SelfplayRecord,
    Stage,
    TrainRecord,
)


@dataclass(frozen=True)
class SummaryRow:
    """One iteration at a glance (the run's closing table, the iteration's artifact).

    win_rate: the candidate's gate score (None with gating off); vs_random: its score against
    the random anchor (None without anchor games); vs_anchors / margins: its score and mean
    score margin (points, from its side) against each other anchor it played ("gnugo-l1"),
    and skipped: the anchors it could not play, with why; elo, elo_low, elo_high: its Elo and
    95% interval (None when unrated): the fit made when the iteration finished in the row an
    iteration returns (its artifact), the run's latest fit in the closing table
    (`with_final_ratings`); stage_cpu_s: CPU-seconds by stage (`Spent.stages`; empty when not
    measured); stage_wall_s: wall seconds by the same stages (`Spent.stage_wall_s`), and
    cores: the cores the iteration could use (None when not measured); gpu_busy: the GPU's
    mean busy share by stage (`Spent.gpu_busy`; empty without a GPU); stage_seconds:
    self-play (slowest worker), training, gate and anchor matches.
    """

    iteration: int
    promoted: bool
    win_rate: float | None
    elo: float | None
    elo_low: float | None
    elo_high: float | None
    positions: int
    games: int
    v_resign: float | None
    false_positive_rate: float | None
    loss: float
    policy_loss: float
    value_loss: float
    stage_seconds: float
    vs_random: float | None
    vs_anchors: dict[str, float] = field(default_factory=dict)
    margins: dict[str, float | None] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    stage_cpu_s: dict[str, float] = field(default_factory=dict)
    stage_wall_s: dict[str, float] = field(default_factory=dict)
    cores: int | None = None
    gpu_busy: dict[str, float] = field(default_factory=dict)

    @property
    def learning_share(self) -> float | None:
        """The share of the iteration's CPU-seconds spent in self-play and training."""
        return learning_share(self.stage_cpu_s)


def learning_share(stage_cpu_s: Mapping[str, float]) -> float | None:
    """The share of CPU-seconds by stage that went to learning: self-play and training (None
    when nothing was measured)."""
    total = sum(stage_cpu_s.values())
    if not total:
        return None
    return (stage_cpu_s.get("selfplay", 0.0) + stage_cpu_s.get("train", 0.0)) / total


def summary_row(
    i: int,
    selfplay: SelfplayRecord,
    train: TrainRecord,
    evaluation: EvaluationRecord,
    promoted: bool,
) -> SummaryRow:
    """Iteration ``i``'s row from its stages' records and the gate's decision (``promoted``:
    known before the promotion is recorded, so the row is made while the iteration closes)."""
    gate, elo, trained = evaluation.gate, evaluation.elo, train.trained
    seconds = selfplay.seconds + trained.seconds + gate.seconds
    seconds += sum(m.seconds for m in evaluation.anchors.values())
    random = evaluation.anchors.get("random")
    return SummaryRow(
        iteration=i,
        promoted=promoted,
        win_rate=gate.decision.win_rate if gate.decision.games else None,
        elo=None if elo is None else elo.elo,
        elo_low=None if elo is None else elo.low,
        elo_high=None if elo is None else elo.high,
        positions=selfplay.positions,
        games=selfplay.games,
        v_resign=selfplay.v_resign_used,
        false_positive_rate=selfplay.false_positive_rate,
        loss=trained.result.loss,
        policy_loss=trained.result.policy_loss,
        value_loss=trained.result.value_loss,
        stage_seconds=seconds,
        vs_random=None if random is None else random.score,
        vs_anchors={k: m.score for k, m in evaluation.anchors.items() if k != "random"},
        margins={k: m.summary.mean_margin for k, m in evaluation.anchors.items() if k != "random"},
        skipped=dict(evaluation.skipped),
    )


def with_final_ratings(rows: list[SummaryRow], elos: Mapping[int, Elo]) -> list[SummaryRow]:
    """``rows`` with each iteration's Elo from ``elos``, the run's latest fit (`run_elos`).

    An iteration's own row holds the fit made when it finished; later games move every rating,
    so the run's closing table uses one fit for all, the one the Elo plot shows.
    """
    out = []
    for row in rows:
        me = elos.get(row.iteration)
        if me is not None:
            row = replace(row, elo=me.elo, elo_low=me.low, elo_high=me.high)
        out.append(row)
    return out


def elos_by_iteration(
    ratings: tuple[RatingRow, ...], layout: RunLayout, last: int
) -> dict[int, Elo]:
    """The Elo in ``ratings`` of each iteration 0..``last`` that has a rated game, by iteration."""
    fit = {r.fit.player: r.fit for r in ratings}
    found = ((i, fit.get(layout.model_id(i))) for i in range(last + 1))
    return {i: Elo(me.elo, me.low, me.high) for i, me in found if me is not None}


def run_elos(layout: RunLayout, last: int) -> dict[int, Elo]:
    """The run's Elo by iteration on its one scale: the latest fit, the one the evaluation of
    the last finished iteration up to ``last`` made over every game of the run (the closing
    table, ``elo.png``, ``plots/elo.csv`` and the ``elo`` metrics of MLflow and DVC). Empty
    before any evaluation."""
    for i in range(last, 0, -1):
        evaluation = finished(layout, i, Stage.EVALUATE, EvaluationRecord)
        if evaluation is not None:
            return elos_by_iteration(evaluation.ratings, layout, i)
    return {}
