"""The run's typed records: what each stage returns, what its marker stores, what readers get
back (JSON through `tasks.run.codec`).

Paths inside a record are project-relative strings, so a run reads the same from a clone in
another folder or on another host.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tabula import elo
from tabula.arena import MatchSummary
from tabula.gating import GateDecision
from tasks.run.codec import FLAT, to_json


class Stage(enum.StrEnum):
    """The stages of a run, each with its marker ``iter-NNNN/state/<stage>.json``.

    INIT (iteration 0 only): the random network. PLAN: the iteration's champion, parent,
    window and seeds. SELFPLAY: one marker per worker (``selfplay-wWW``) and one for the
    totals. TRAIN, EVALUATE, PROMOTE: the rest of the iteration, in this order.
    """

    INIT = "init"
    PLAN = "plan"
    SELFPLAY = "selfplay"
    TRAIN = "train"
    EVALUATE = "evaluate"
    PROMOTE = "promote"

    def marker_name(self, worker: int | None = None) -> str:
        """The marker's file stem: the stage, or ``selfplay-wWW`` for a self-play worker."""
        return self.value if worker is None else f"{self.value}-w{worker:02d}"


#: The stages that make an iteration finished, in order.
ITERATION_STAGES = (Stage.SELFPLAY, Stage.TRAIN, Stage.EVALUATE, Stage.PROMOTE)


@dataclass(frozen=True)
class InitRecord:
    """The randomly initialised network that starts a run. model: project-relative path."""

    model: str
    sha256: str


@dataclass(frozen=True)
class WorkerResult:
    """What a worker wrote and measured. resign_samples: one `ResignTrace.to_dict()` per
    resign-disabled game (for `tabula.resign.calibrate_samples`); false_positives: how many
    of those a resignation at ``v_resign`` would have lost."""

    shards: list[Path]
    sgfs: list[Path]
    model_id: str
    games: int
    positions: int
    simulations: int
    evaluations: int
    seconds: float
    resigned_games: int
    resign_disabled_games: int
    false_positives: int
    v_resign: float | None
    resign_samples: list[dict[str, Any]] = field(default_factory=list)

    #: Derived rates, written to JSON beside the fields (`tasks.run.codec.to_json`).
    __json_extra__: ClassVar[tuple[str, ...]] = (
        "positions_per_s",
        "simulations_per_s",
        "evaluations_per_s",
    )

    @property
    def positions_per_s(self) -> float:
        return self.positions / max(self.seconds, 1e-9)

    @property
    def simulations_per_s(self) -> float:
        return self.simulations / max(self.seconds, 1e-9)

    @property
    def evaluations_per_s(self) -> float:
        return self.evaluations / max(self.seconds, 1e-9)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (paths as strings, rates included)."""
        return to_json(self)


@dataclass(frozen=True)
class WorkerRecord:
    """A finished self-play worker: what it wrote and measured, and where it ran (a Dask
    worker's process on a cluster, the flow's own process locally).

    seconds: the whole task, model loading included; the marker keeps only this one, so a
    worker read back from a marker has ``worker.seconds == seconds``.
    """

    worker: WorkerResult = field(metadata=FLAT)
    seconds: float
    host: str
    pid: int


@dataclass(frozen=True)
class SelfplayRecord:
    """The self-play totals of one iteration over its workers (`tasks.calibrate`).

    Sums: games .. false_positives. Rates: per second of the slowest worker (``seconds``).
    v_resign_used: the threshold the workers played with (None: resignation off);
    v_resign_next: the calibrated one for the next iteration, with the false-positive rate of
    the resign-disabled games at the current threshold (paper, Methods: "Self-play").
    hashes: the DVC hash of each output of the iteration's ``selfplay`` stage.
    """

    games: int
    positions: int
    simulations: int
    evaluations: int
    resigned_games: int
    resign_disabled_games: int
    false_positives: int
    mean_game_length: float
    resign_rate: float
    positions_per_s: float
    simulations_per_s: float
    evaluations_per_s: float
    v_resign_next: float | None
    false_positive_rate: float | None
    v_resign_used: float | None
    hashes: dict[str, str]
    seconds: float


@dataclass(frozen=True)
class TrainResult:
    """What a stage produced: paths and hashes, never tensors.

    ``global_step`` counts optimizer steps of the whole run (the schedule's clock); the losses
    are means over the last logging window; ``samples_per_s`` is over the whole stage.
    ``lr_boundaries``: the schedule's drops as this stage used them (global steps; empty in
    records written before they were recorded); ``lr``: the rate of its last step; ``bf16``:
    whether it trained under bf16 autocast (None: not recorded, the config's bool).
    ``val_loss``, ``val_value_loss``, ``val_policy_loss``: the trained network's losses on the
    games held out of the window (`model.system.AlphaZeroSystem.held_out_losses`), and
    ``held_out_positions`` their positions; None when no game was held out.
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
    val_loss: float | None = None
    val_value_loss: float | None = None
    val_policy_loss: float | None = None
    held_out_positions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (paths as strings)."""
        return to_json(self)


@dataclass(frozen=True)
class Trained:
    """A training stage as the task ran it: its result, seconds and torch threads (recorded
    because the thread count changes float sums, so reproduction uses the same)."""

    result: TrainResult = field(metadata=FLAT)
    seconds: float
    threads: int


@dataclass(frozen=True)
class TrainRecord:
    """A finished training stage. hashes: DVC hash of each output of the ``train`` stage;
    window: each self-play directory trained on (project-relative) -> its DVC hash."""

    trained: Trained = field(metadata=FLAT)
    hashes: dict[str, str]
    window: dict[str, str]


@dataclass(frozen=True)
class GateRecord:
    """The gate's decision with its evidence, and the seconds it took."""

    decision: GateDecision = field(metadata=FLAT)
    seconds: float


@dataclass(frozen=True)
class AnchorRecord:
    """A match against a fixed anchor, from the network's (first player's) side.

    results: one results-store row per game (`tasks.run.results.COLUMNS`); score: the summary's.
    """

    __json_extra__: ClassVar[tuple[str, ...]] = ("score",)

    match_id: str
    summary: MatchSummary = field(metadata=FLAT)
    sgf_dir: str | None
    store: str | None
    results: tuple[dict[str, Any], ...]
    seconds: float

    @property
    def score(self) -> float:
        return self.summary.score


@dataclass(frozen=True)
class RatingRow:
    """One row of the run's Elo table (`tasks.run.results.ratings_table`): its rank (1 = the
    strongest) and the fit (`tabula.elo.Rating`: [low, high] the 95% interval, wins count draws
    as a half), stored flat as one object."""

    rank: int
    fit: elo.Rating = field(metadata=FLAT)


@dataclass(frozen=True)
class Elo:
    """An iteration network's Elo with its 95% interval [low, high]."""

    elo: float
    low: float
    high: float


@dataclass(frozen=True)
class EvaluationRecord:
    """A finished evaluation: the gate, the anchor matches by the anchor's player name ("random",
    "gnugo-l1"; runs recorded before anchors had player names keyed them by spec), the Elo table
    fitted over every game of the run so far, the DVC hashes of the ``evaluate`` stage, this
    iteration's own Elo (None when it has no rated game), and the configured anchors it could not
    play, with why (a program not installed)."""

    gate: GateRecord
    anchors: dict[str, AnchorRecord]
    ratings: tuple[RatingRow, ...]
    hashes: dict[str, str]
    elo: Elo | None
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PromotionRecord:
    """The end of an iteration: promoted by the gate or not, its model version in the
    registry, and the champion's iteration afterwards."""

    promoted: bool
    version: int | str | None  # as MLflow's store gave it
    champion: int


@dataclass(frozen=True)
class Champion:
    """``champion.json``: the current best checkpoint (model: project-relative path), its
    registered model version (None for the random network of iteration 0) and the sha256 of
    its weights (`model.network.weights_sha256`, as its ``init`` or ``train`` marker records
    them; None in a file written before it was recorded: `tasks.promote.recorded_weights`
    then takes the marker's)."""

    iteration: int
    model: str
    version: int | str | None
    weights_sha256: str | None = None


@dataclass(frozen=True)
class Spent:
    """What a run had spent when iteration ``iteration`` finished, over every ``tabula run``
    process of the run (resumes included).

    cpu_s: CPU-seconds (user + system) of the run's processes and their descendants since the
        run began (`tasks.run.cputime.process_tree_cpu_seconds`); Dask workers on other
        machines are not counted.
    wall_s: wall seconds the run's processes ran.
    stages: this iteration's CPU-seconds by stage ("selfplay", "train", "evaluate": the
        matches, "ratings": the Elo fit over every game and its curve, "promote",
        "bookkeeping": the plan, DVC stage files, the DVC commits and MLflow; "close": the
        previous iteration's close, its registration, promotion record, lineage commit and
        summary, which runs beside this iteration's start: `flows.beside`).
    stage_wall_s: this iteration's wall seconds by the same stages (empty in runs recorded
        before they were measured); cores: the cores the process could use
        (`tasks.run.cputime.cores`; None before it was recorded); gpu_busy: the GPU's mean
        busy share by stage, NVML's readings (`tasks.gpu_use`; empty without a GPU).
    """

    iteration: int
    cpu_s: float
    wall_s: float
    stages: dict[str, float] = field(default_factory=dict)
    stage_wall_s: dict[str, float] = field(default_factory=dict)
    cores: int | None = None
    gpu_busy: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Budget:
    """``budget.json``: what a run may spend (None: no limit of that kind) and what it spent.

    core_hours: CPU budget, in core-hours (3600 CPU-seconds each); hours: wall-clock budget.
    spent: one entry per finished iteration, in order (`Spent`).
    """

    core_hours: float | None
    hours: float | None
    spent: tuple[Spent, ...] = ()
