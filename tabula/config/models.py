"""The config models: one pydantic section per part of a run, and `Config` over all seven.

A run is described by one `Config` with seven sections (rules, network, search, selfplay,
training, evaluation, pipeline). Every section forbids unknown keys, is strict about types
(YAML already gives typed scalars) and is frozen; every field has a description. Field defaults
are the quick-start run (9x9, tiny network), so ``Config()`` needs no file.

Three fields default to ``None`` and are scaled to the board by `Config.resolve()` (the rule
is ours unless the paper gives it; 19x19 gives the paper's number exactly):

- ``search.dirichlet_alpha``: 0.03 * 361 / N**2 (paper 0.03 on 19x19; the small-board rule
  of Leela Zero and KataGo).
- ``selfplay.temperature_moves``: round(30 * N**2 / 361) (paper tau = 1 for 30 moves).
- ``pipeline.registered_model``: f"tabula-{pipeline.name}" (not scaled, but one per run).

A config frozen by an older version reads as it ran (`tabula.config.legacy`). This module imports
nothing else of the package but that; `tabula.config.io` builds on it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tabula.config import legacy
from tabula.go.coords import MAX_SIZE, MIN_SIZE
from tabula.ladder import anchor_label, check_anchor

__all__ = [
    "Config",
    "EvaluationConfig",
    "NetworkConfig",
    "PipelineConfig",
    "RulesConfig",
    "SearchConfig",
    "SelfPlayConfig",
    "TrainingConfig",
    "without_password",
    "without_userinfo",
]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # safe in paths, MLflow and DVC names
_NAME = NAME_PATTERN
_TRACKING_URI = re.compile(
    r"^(?:(?:sqlite|postgresql|mysql|mssql)(?:\+\w+)?://|https?://|databricks)"
)
# scheme://user:password@host...: the password is group 2.
_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/:@]*):([^/@]*)@")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")
#: Where each URI field's password goes instead of the URI: a URI is recorded as given, in
#: the frozen params.yaml, MLflow's params, checkpoints and Prefect's parameters.
_PASSWORD_GOES = {
    "mlflow_tracking_uri": "MLFLOW_TRACKING_PASSWORD for a server, PGPASSWORD or ~/.pgpass for"
    " PostgreSQL",
    "mlflow_artifact_root": "the store's own credentials (AWS_SECRET_ACCESS_KEY for s3://)",
    "dvc_remote": "`dvc remote modify --local tabula password ...` (.dvc/config.local)",
    "prefect_api_url": "PREFECT_API_AUTH_STRING",
    "dask_address": "TLS certificates (docs/scaling-out.md)",
}


def without_password(uri: str) -> str:
    """``uri`` with the password of its ``scheme://user:password@`` part shown as ``***``."""
    return _USERINFO_PASSWORD.sub(r"\1:***@", uri)


def without_userinfo(url: str) -> str:
    """``url`` without its ``user[:password]@`` part: a link to click, where a browser asks
    for the credentials itself."""
    return _USERINFO.sub(r"\1", url)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; the CPU count elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Section(BaseModel):
    # strict: YAML already gives typed scalars, so "200" or 1.5 for an int is a mistake.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class RulesConfig(_Section):
    """The game: board size and komi (the rules themselves are fixed, see docs/design.md)."""

    board_size: int = Field(
        default=9, ge=MIN_SIZE, le=MAX_SIZE, description="N: an N x N board (paper 19)."
    )
    komi: float = Field(
        default=7.5, ge=-361, le=361, description="Added to White; a multiple of 0.5 (paper 7.5)."
    )

    @field_validator("komi")
    @classmethod
    def _half_points(cls, komi: float) -> float:
        if not (2 * komi).is_integer():
            raise ValueError("must be a multiple of 0.5")
        return komi


class NetworkConfig(_Section):
    """The residual tower f_theta(s) = (p, v) (paper Methods, 'Neural network architecture')."""

    blocks: int = Field(default=4, ge=1, description="Residual blocks (paper 19 or 39).")
    filters: int = Field(default=32, ge=1, description="Conv filters per layer (paper 256).")
    value_hidden: int = Field(default=256, ge=1, description="Value head FC width (paper 256).")
    aux_heads: bool = Field(
        default=True,
        description="Ownership and score heads trained on each played-out game's final"
        " position (KataGo, Wu 2019: 1.65x less compute); not in the paper.",
    )
    global_pooling: bool = Field(
        default=False,
        description="Every second residual block adds per-channel biases pooled (mean and"
        " max) over the board from a quarter of its channels (KataGo, Wu 2019: 1.6x less"
        " compute); not in the paper.",
    )
    liberties: bool = Field(
        default=True,
        description="6 input planes after the paper's 17: each side's stones whose chain has"
        " 1, 2, or 3 and more liberties, derived from the position (KataGo's liberty inputs,"
        " Wu 2019; `tabula.features`); not in the paper. On in the quick start since the"
        " screening `libs` (docs/strength.md).",
    )
    ladders: bool = Field(
        default=False,
        description="3 input planes after those: each side's stones that a ladder captures,"
        " and the side to move's moves that start one, read by a ladder search from the"
        " position (KataGo's ladder inputs, Wu 2019; `tabula.ladders`); not in the paper.",
    )
    grow: list[list[int]] = Field(
        default_factory=list,
        description="[[ITERATION, BLOCKS], ...]: from ITERATION's training on, the network has"
        " BLOCKS residual blocks, appended to the tower of the network it continues from; each"
        " new block starts as the identity (its residual branch's last batch norm scaled to"
        " zero), so the grown network plays as the one it grew from. A net that grows with the"
        " run (KataGo grew b6 -> b10 -> b15 ...; Net2Net, Chen et al. 2016); not in the paper.",
    )

    @field_validator("grow")
    @classmethod
    def _growing(cls, grow: list[list[int]]) -> list[list[int]]:
        if any(len(step) != 2 for step in grow):
            raise ValueError(f"each step is [ITERATION, BLOCKS], got {grow}")
        iterations, blocks = [i for i, _ in grow], [b for _, b in grow]
        if any(i < 1 for i in iterations) or iterations != sorted(set(iterations)):
            raise ValueError(f"iterations must be >= 1 and increasing, got {iterations}")
        if blocks != sorted(set(blocks)):
            raise ValueError(f"blocks must increase, got {blocks}")
        return grow

    @model_validator(mode="after")
    def _grows_from_blocks(self) -> NetworkConfig:
        if self.grow and self.grow[0][1] <= self.blocks:
            raise ValueError(
                f"grow: the first growth must give more than blocks={self.blocks} blocks,"
                f" got {self.grow[0][1]}"
            )
        return self

    def blocks_at(self, iteration: int) -> int:
        """The residual blocks of the network that iteration ``iteration`` trains (``grow``;
        iteration 0: the initial network's ``blocks``)."""
        grown = [b for i, b in self.grow if i <= iteration]
        return grown[-1] if grown else self.blocks


class SearchConfig(_Section):
    """MCTS: PUCT selection and root Dirichlet noise (the paper), or the Gumbel search;
    batched leaves kept apart by virtual loss."""

    algorithm: Literal["puct", "gumbel"] = Field(
        default="gumbel",
        description="puct: the paper's search, pi = visit counts. gumbel: Danihelka et al. 2022"
        " (Gumbel-top-k and Sequential Halving at the root, pi' = softmax(logits +"
        " sigma(completed Q)) as the policy target; `tabula.mcts.gumbel`).",
    )
    simulations: int = Field(default=16, ge=1, description="Per self-play move (paper 1600).")
    c_puct: float = Field(
        default=1.25, gt=0, description="U = c_puct P sqrt(sum_b N_b) / (1 + N); not in the paper."
    )
    fpu: float = Field(
        default=0.0, ge=-1, le=1, description="Q of an unvisited edge, side to move (paper 0)."
    )
    dirichlet_alpha: float | None = Field(
        default=None, gt=0, description="Root noise Dir(alpha); None = 0.03 * 361 / N**2."
    )
    dirichlet_epsilon: float = Field(
        default=0.25, ge=0, le=1, description="P = (1 - eps) p + eps eta (paper 0.25)."
    )
    leaves_per_game: int = Field(
        default=4, ge=1, description="Leaves per game per network batch (paper 8); <= sims left."
    )
    virtual_loss: float = Field(
        default=1.0, ge=0, description="Added to N and taken from W on a pending path, then undone."
    )
    early_pass: bool = Field(
        default=False,
        description="True: pass is a legal search move at any time (the paper). False (ours):"
        " the search passes only after the opponent passed or when every other legal move fills"
        " its own single-point eye, so a briefly trained net cannot learn to pass away games"
        " that Tromp-Taylor scoring (dead stones count) decides on the board.",
    )
    own_area_pass: bool = Field(
        default=False,
        description="(without early_pass) True: pass also stays legal when every other legal"
        " move lies in the player's own area, an empty region that reaches its stones alone:"
        " under area scoring such a move gains nothing and can only take an eye, and an"
        " opponent that plays on (GnuGo capturing the dead) would otherwise make it fill its"
        " own eye space until its groups die (ours; off in every preset: it lost at the quick"
        " budget, docs/strength.md). False: as early_pass=false says.",
    )
    fill_own_eyes: bool = Field(
        default=False,
        description="True: the search may fill its own single-point eyes (the paper: every"
        " legal move). False (ours): those moves are pruned, as the random player and most"
        " Go programs' playouts do; a barely trained net would otherwise kill its own groups"
        " and learn little from games that Tromp-Taylor scoring decides on the board.",
    )
    gumbel_m: int = Field(
        default=16, ge=1, description="Gumbel: moves considered at the root (Danihelka et al.: 16)."
    )
    gumbel_c_visit: float = Field(
        default=50.0, ge=0, description="Gumbel: sigma's c_visit (Danihelka et al.; mctx: 50)."
    )
    gumbel_c_scale: float = Field(
        default=0.1, gt=0, description="Gumbel: sigma's c_scale (mctx's default value_scale 0.1)."
    )
    score_utility: float = Field(
        default=0.0,
        ge=0,
        description="The score's share of the search's values: (v + w * 2/pi * atan(score /"
        " (score_scale * N))) / (1 + w) for the network's leaves (its score head) and for"
        " finished games (`tabula.mcts.utility`), so that a decided game still fights for"
        " points. 0: the value alone (the paper). KataGo's static score utility is 0.1 (with"
        " 0.3 more centered on the root's score). A network without the score head searches on"
        " its value alone.",
    )
    score_scale: float = Field(
        default=2.0,
        gt=0,
        description="score_utility's scale, points per line of the board (KataGo's 2.0: 18"
        " points on 9x9).",
    )

    def alpha_for(self, N: int) -> float:
        """Dirichlet alpha on an N x N board: the set value, else 0.03 * 361 / N**2."""
        if self.dirichlet_alpha is not None:
            return self.dirichlet_alpha
        return 0.03 * (361 / (N * N))  # this order gives exactly 0.03 at N = 19


class SelfPlayConfig(_Section):
    """Self-play by the best player alpha_theta*, with automatic resignation."""

    games: int = Field(default=384, ge=1, description="Per iteration, all workers (paper 25,000).")
    workers: int = Field(
        default=2,
        ge=1,
        description="W: self-play tasks run in parallel; auto = one per core this process may"
        " use, read as that number (a run's frozen config holds it).",
    )
    processes: bool | Literal["auto"] = Field(
        default="auto",
        description="Each self-play worker in a process of its own, kept for the run"
        " (tasks/workers.py): the game loop's Python holds no lock the other workers wait for."
        " False: threads of the flow's process. auto: processes from 2 workers (one worker plays"
        " in the flow's process). Same games either way; on Dask the workers are Dask's.",
    )
    concurrent_games: int = Field(
        default=64, ge=1, description="G: games a worker plays at once, sharing network batches."
    )
    temperature_moves: int | None = Field(
        default=None,
        ge=0,
        description="Moves at tau = 1, then tau -> 0; None = round(30 N**2/361).",
    )
    resign_disabled_fraction: float = Field(
        default=0.1, ge=0, le=1, description="Share of games never resigning (paper 0.1)."
    )
    v_resign: float | None = Field(
        default=None, ge=-1, le=1, description="Initial resign threshold, then tuned; None = never."
    )
    resign_false_positive_target: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="Max share of resign-disabled games that a resignation at v_resign would"
        " have lost (paper 0.05).",
    )
    sgf_sample: int = Field(default=4, ge=0, description="Games per worker also written as SGF.")
    batch_size: int = Field(default=256, ge=1, description="Max positions per network call.")
    full_search_fraction: float = Field(
        default=0.25,
        gt=0,
        le=1,
        description="Playout-cap randomisation (Wu 2019, KataGo; 0.25 there): the share of moves"
        " searched with search.simulations and recorded as policy targets; the others get"
        " fast_simulations, are played, and train the value only. 1: every move (the paper).",
    )
    fast_simulations: int | None = Field(
        default=None,
        ge=1,
        description="Playout caps: simulations of a fast search; None = search.simulations // 4"
        " (KataGo: 100 against 600).",
    )

    quiet_fast_searches: bool = Field(
        default=True,
        description="Playout caps: fast searches draw no root noise and play their best move"
        " (tau 0; the Gumbel search's Sequential Halving winner), as KataGo's cheap searches"
        " (Wu 2019, section 3.1). False: like full searches (noise, and tau 1 early on).",
    )
    record_fast_rows: bool = Field(
        default=False,
        description="Playout caps: write a fast search's position to the shards (its value"
        " and auxiliary targets weighted by training.fast_row_weight). False: only full"
        " searches' positions are rows, as KataGo records them (Wu 2019, section 3.1), so"
        " training.samples_per_row counts full rows only.",
    )
    decided_threshold: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="KataGo's reduced visits (its selfplay configs: reduceVisitsThreshold 0.9):"
        " a move whose game's last decided_lookback searches all valued the position beyond"
        " this for the same side gets a fast search instead of a full one, so a decided game"
        " costs little and adds no policy rows. None: off.",
    )
    decided_lookback: int = Field(
        default=3,
        ge=1,
        description="Searches the value must stay beyond decided_threshold"
        " (KataGo's reduceVisitsThresholdLookback: 3).",
    )
    decided_row_weight: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="With decided_threshold: a decided game's positions are written as rows"
        " (whatever record_fast_rows says) with this training weight on every loss, their"
        " reduced search's pi a policy target (KataGo's reducedVisitsWeight 0.1). None: they"
        " are fast searches' positions like the playout caps' (dropped, or written at"
        " training.fast_row_weight with record_fast_rows).",
    )
    policy_surprise_weight: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="KataGo's policy surprise weighting (its g170 run and since: 0.5): this"
        " share of a game's full-search rows' total weight goes to them in proportion to"
        " KL(pi || prior), how much the search's policy target differs from the network's"
        " prior at the root, the rest evenly, so a game's rows weigh as much as before; with"
        " training.row_weights frequency (as KataGo uses it) a surprising row is drawn more"
        " often. 0: every row weighs 1.",
    )

    root_value: Literal["search", "improved", "visits"] = Field(
        default="search",
        description="The root value each row records (mixed into the value target by"
        " training.value_target_mix): search = the mean of the search's values (the network's"
        " and one per visit); improved = sum_a pi'(a) completed Q(a), the value of the"
        " improved policy (Danihelka et al. 2022; the Gumbel search only, PUCT records the mean"
        " either way); visits = sum_a N(a) Q(a) / sum_a N(a) over the root's visited moves,"
        " without the network's own value of the root (either search).",
    )
    move_choice: Literal["search", "opening", "decay"] = Field(
        default="search",
        description="The move played after a search (the policy target is the search's"
        " either way): search = PUCT samples at tau 1 for temperature_moves, then the most"
        " visited, and the Gumbel search plays Sequential Halving's survivor at every move;"
        " opening = the same for temperature_moves moves, then the policy target's mode (the"
        " paper's tau -> 0, also under Gumbel); decay = sampled from the policy target at"
        " KataGo's decaying temperature (move_temperature_*). Fast searches that"
        " quiet_fast_searches covers play their best move whatever this says.",
    )
    move_temperature_early: float = Field(
        default=0.75,
        gt=0,
        description="move_choice decay: the temperature of the first move (KataGo's self-play"
        " chosenMoveTemperatureEarly 0.75).",
    )
    move_temperature_late: float = Field(
        default=0.15,
        ge=0,
        description="move_choice decay: the temperature it decays to (KataGo's self-play"
        " chosenMoveTemperature 0.15; 0: the mode).",
    )
    move_temperature_halflife: float = Field(
        default=19.0,
        gt=0,
        description="move_choice decay: moves per halving of early - late on 19x19, scaled"
        " by 19 / N (KataGo's chosenMoveTemperatureHalflife 19).",
    )

    @field_validator("workers", mode="before")
    @classmethod
    def _workers_auto(cls, workers: object) -> object:
        return usable_cores() if workers == "auto" else workers

    def fast_simulations_for(self, simulations: int) -> int:
        """The fast search's simulations (playout caps) when the full search has ``simulations``."""
        return self.fast_simulations or max(1, simulations // 4)

    def temperature_moves_for(self, N: int) -> int:
        """Moves at tau = 1 on an N x N board: the set value, else round(30 * N**2 / 361)."""
        if self.temperature_moves is not None:
            return self.temperature_moves
        return round(30 * N * N / 361)


class TrainingConfig(_Section):
    """SGD on (s, pi, z) sampled uniformly from the recent self-play window (paper Methods)."""

    batch_size: int = Field(default=256, ge=1, description="Positions per step (paper 2048).")
    steps: int = Field(
        default=500,
        ge=1,
        description="Optimizer steps per iteration; with samples_per_row, the estimate of an"
        " iteration's steps that the rate schedule plans with until one has trained.",
    )
    samples_per_row: float | None = Field(
        default=4.0,
        gt=0,
        description="Steps sized to the data (KataGo, Wu 2019: each recorded row is trained on"
        " about 4 times on average): an iteration trains ceil(new rows x samples_per_row /"
        " batch_size) steps, at least 1, the new rows being those its own self-play recorded"
        " in the window (fast searches' too where selfplay.record_fast_rows writes them); None:"
        " `steps` every iteration (the paper).",
    )
    lr_schedule: Literal["steps", "run"] = Field(
        default="run",
        description="steps: lr drops at the global steps lr_boundaries (the paper's fixed"
        " 700k-step run). run (ours): at the fractions lr_fractions of the run's steps"
        " (max(pipeline.iterations, the --iterations asked for) x steps; with samples_per_row,"
        " the steps trained so far and the iterations left at the last one's count), so a run"
        " extended with --iterations stretches its schedule and keeps learning; each iteration"
        " records the boundaries it used.",
    )
    lr_boundaries: list[int] = Field(
        default=[2000, 2300],
        description="lr_schedule steps: global steps where lr drops (paper 400k, 600k).",
    )
    lr_fractions: list[float] = Field(
        default=[0.8, 0.92],
        description="lr_schedule run: fractions of the run's steps where lr drops, increasing.",
    )
    lr_values: list[float] = Field(
        default=[3e-2, 3e-3, 3e-4],
        description="lr per interval: one more than the drops of the schedule in use"
        " (paper 0.01, 0.001, 0.0001; three times that since bench.strength's lr3 at 1ch).",
    )
    momentum: float = Field(default=0.9, ge=0, lt=1, description="SGD momentum (paper 0.9).")
    weight_decay: float = Field(default=1e-4, ge=0, description="L2 weight c (paper 1e-4).")
    window_games: int = Field(
        default=768,
        ge=1,
        description="Sample the most recent this-many games (paper 500,000; 768, the last 2"
        " iterations, since the quick start measured it against 3, 3 against 5, 5 against 10).",
    )
    window_iterations: int | None = Field(
        default=None, ge=1, description="Also only the last K iterations' games; None = no cap."
    )
    holdout_games: int = Field(
        default=0,
        ge=0,
        description="The newest this-many games of the iteration's own self-play are left out"
        " of its training window, and its network's losses on them are recorded (val/loss) to"
        " show over- or under-fitting (minigo holds out 5% of its self-play games); 0: none,"
        " the paper.",
    )
    value_target_mix: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="lambda of the value target (1 - lambda) z + lambda v_root: the game result"
        " mixed with the search's root value (0: z alone, the paper).",
    )
    row_weights: Literal["loss", "frequency"] = Field(
        default="loss",
        description="What a row's weight in the shards (selfplay.decided_row_weight,"
        " selfplay.policy_surprise_weight) does:"
        " loss: it scales the row's losses, and the row is drawn as often as any; frequency:"
        " the row is drawn in proportion to it, at full weight in the losses, and"
        " samples_per_row counts the new rows' total weight (KataGo's frequency weights: a row"
        " written floor(w) times and once more with probability w - floor(w)).",
    )
    fast_row_weight: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Playout caps: weight of the value and auxiliary losses of rows from fast"
        " searches (their policy is never a target). KataGo (Wu 2019, section 3.1) records them"
        " with weight 0; 1: like a full search's row.",
    )
    ownership_weight: float = Field(
        default=1.5,
        ge=0,
        description="Weight of the ownership loss (mean cross-entropy over the points) with"
        " network.aux_heads; KataGo's 1.5 / N^2 on the sum over points (Wu 2019).",
    )
    score_weight: float = Field(
        default=1.0,
        ge=0,
        description="Weight of the score loss (squared error of margin / N^2, like the value's)"
        " with network.aux_heads; ours (KataGo predicts a score distribution).",
    )
    bf16: bool | Literal["auto"] = Field(
        default="auto",
        description="Mixed precision with bfloat16 autocast; auto: where bf16 is native (CUDA,"
        " or a CPU with AVX512-BF16 or AMX; elsewhere it is slower than fp32), as inference"
        " chooses. Each stage records what it used, and reproduction uses that.",
    )
    deterministic: bool = Field(
        default=True, description="Deterministic kernels (bitwise rebuild)."
    )
    num_workers: int = Field(default=0, ge=0, description="DataLoader worker processes.")
    checkpoint_every: int = Field(
        default=500, ge=1, description="Steps per checkpoint (paper 1000)."
    )

    @field_validator("lr_boundaries")
    @classmethod
    def _increasing(cls, boundaries: list[int]) -> list[int]:
        if any(b <= 0 for b in boundaries):
            raise ValueError(f"must be positive step counts (got {boundaries})")
        if any(a >= b for a, b in zip(boundaries, boundaries[1:], strict=False)):
            raise ValueError(f"must be strictly increasing (got {boundaries})")
        return boundaries

    @model_validator(mode="before")
    @classmethod
    def _frozen_before_lr_schedule(cls, data: Any) -> Any:
        return legacy.step_boundaries_given(data)

    @field_validator("lr_fractions")
    @classmethod
    def _fractions(cls, fractions: list[float]) -> list[float]:
        if any(not 0 < f < 1 for f in fractions):
            raise ValueError(f"must be fractions of the run, in (0, 1) (got {fractions})")
        if any(a >= b for a, b in zip(fractions, fractions[1:], strict=False)):
            raise ValueError(f"must be strictly increasing (got {fractions})")
        return fractions

    @field_validator("lr_values")
    @classmethod
    def _one_more_value(cls, values: list[float], info: ValidationInfo) -> list[float]:
        if any(v <= 0 for v in values):
            raise ValueError(f"must all be > 0 (got {values})")
        name = "lr_fractions" if info.data.get("lr_schedule") == "run" else "lr_boundaries"
        drops = info.data.get(name)  # absent when it failed its own check
        if drops is not None and len(values) != len(drops) + 1:
            raise ValueError(f"needs len({name}) + 1 = {len(drops) + 1} values (got {len(values)})")
        return values


class EvaluationConfig(_Section):
    """Gating against the best player (paper: 400 games, > 55%), and anchor games."""

    gating: bool = Field(
        default=False,
        description="True: the candidate must beat the best player to be promoted (the paper)."
        " False: no gate games; every candidate is promoted, so self-play always uses the latest"
        " network (AlphaZero, Silver et al. 2018; KataGo). Elo and anchors are still measured.",
    )
    gating_games: int = Field(default=20, ge=1, description="Games (the most if sprt; paper 400).")
    gating_threshold: float = Field(
        default=0.55, gt=0, lt=1, description="Promote above this win rate (paper 0.55)."
    )
    simulations: int = Field(default=64, ge=1, description="Per move in matches (paper 1600).")
    sprt: bool = Field(default=False, description="Stop gating early by SPRT (paper: never).")
    sprt_elo0: float = Field(default=0.0, description="SPRT H0: the Elo gain is elo0.")
    sprt_elo1: float = Field(default=35.0, description="SPRT H1: the Elo gain is elo1 > elo0.")
    sprt_alpha: float = Field(default=0.05, gt=0, lt=0.5, description="SPRT false accepts.")
    sprt_beta: float = Field(default=0.05, gt=0, lt=0.5, description="SPRT false rejects.")
    anchor_games: int = Field(
        default=20,
        ge=0,
        description="Games against each anchor: the uniform random player every `random_every`"
        " iterations, and each of `anchors` every `anchor_every` (less those skipped near the"
        " last: `anchor_skip_near_last`) and in the last (0: no anchor games).",
    )
    anchors: list[str] = Field(
        default=["gnugo-l1"],
        description="External players of fixed strength (tabula.ladder): gnugo-l1 .. gnugo-l10"
        " (GnuGo at that level, Elo held at the ladder's offsets on 9x9) or gtp:COMMAND. An anchor"
        " whose program is not installed is skipped with a notice.",
    )
    anchor_every: int = Field(
        default=6,
        ge=1,
        description="Play the anchors in iterations divisible by this (less those skipped near"
        " the last: `anchor_skip_near_last`), and in the last one the run is planned for.",
    )
    anchor_skip_near_last: bool = Field(
        default=True,
        description="An iteration divisible by `anchor_every` skips the anchors when the last"
        " iteration the run is planned for, which plays them anyway, is less than half of"
        " `anchor_every` ahead (false: it never skips them).",
    )
    random_every: int | None = Field(
        default=None,
        ge=1,
        description="Play the uniform random player in iterations divisible by this; None: with"
        " the anchors (every `anchor_every`).",
    )
    opening_plies: int = Field(
        default=2,
        ge=0,
        multiple_of=2,
        description="Anchor games start from seeded openings of this many moves (tabula.openings;"
        " 0: the empty board), so that near-deterministic players play games that differ.",
    )
    match_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds an external GTP engine gets to answer one command; past it, that"
        " game is recorded as a forfeit and the engine restarted.",
    )

    @model_validator(mode="before")
    @classmethod
    def _frozen_before_anchors(cls, data: Any) -> Any:
        return legacy.gnugo_as_anchor(data)

    @field_validator("anchors")
    @classmethod
    def _known_anchors(cls, anchors: list[str]) -> list[str]:
        labels = [anchor_label(check_anchor(name)) for name in anchors]
        twice = sorted({label for label in labels if labels.count(label) > 1})
        if twice:
            raise ValueError(f"two anchors would play as {twice[0]!r}: keep one")
        return anchors

    @field_validator("sprt_elo1")
    @classmethod
    def _elo1_above_elo0(cls, elo1: float, info: ValidationInfo) -> float:
        elo0 = info.data.get("sprt_elo0")
        if elo0 is not None and elo1 <= elo0:
            raise ValueError(f"must be > sprt_elo0 = {elo0}")
        return elo1


class PipelineConfig(_Section):
    """The run: name, length, seed, where data and records go, and where work runs."""

    name: str = Field(default="quickstart", pattern=_NAME, description="Run name (paths, MLflow).")
    iterations: int = Field(
        default=5,
        ge=1,
        description="Self-play/train/gate iterations (with a budget: the estimate before the"
        " first iteration finished).",
    )
    core_hours: float | None = Field(
        default=None,
        gt=0,
        description="The run's CPU budget in core-hours when `tabula run` gives none (neither"
        " --iterations, --core-hours nor --hours) on a run that has none yet; None: no budget.",
    )
    hours: float | None = Field(
        default=0.2,
        gt=0,
        description="The run's wall-clock budget in hours, likewise; None: no budget.",
    )
    budget_overshoot: float | None = Field(
        default=0.03,
        ge=0,
        description="A budgeted run (--core-hours, --hours) does not start an iteration that"
        " its predicted cost (the last iterations' costs and their trend) would end more than"
        " this fraction past the budget, so the run ends within it (0.03: 3%). None: every"
        " iteration that starts before the budget is spent runs (up to one iteration over).",
    )
    budget_shrink: float | None = Field(
        default=0.25,
        gt=0,
        le=1,
        description="With budget_overshoot, the iteration that it would stop plays the games"
        " that fit in what is left of the budget instead (its self-play and training shrink with"
        " them, its matches and bookkeeping cost what the last iteration's did), when they are"
        " at least this share of selfplay.games (0.25), and is the run's last: the run ends near"
        " its budget rather than up to an iteration short of it. None: it does not start.",
    )
    budget_stretch: float | None = Field(
        default=0.25,
        gt=0,
        le=1,
        description="With budget_overshoot, the iteration planned as the run's last plays the"
        " games that fit in what is left of the budget, up to this share more than"
        " selfplay.games (0.25), when what it would leave could not hold an iteration of its"
        " own (budget_shrink of one); when it could, that iteration is not the last, and a"
        " shrunk one after it plays the last's anchor matches: the run ends near its budget"
        " rather than up to a part of an iteration and its anchor matches short of it. None: the"
        " last plays selfplay.games.",
    )
    seed: int = Field(default=0, ge=0, lt=2**63, description="Root of every random generator.")
    data_dir: str = Field(default="data", min_length=1, description="DVC-tracked artifacts.")
    mlflow_tracking_uri: str = Field(
        default="sqlite:///mlflow/mlflow.db", min_length=1, description="MLflow tracking store."
    )
    mlflow_artifact_root: str = Field(
        default="mlflow/artifacts", min_length=1, description="MLflow artifact root."
    )
    registered_model: str | None = Field(
        default=None, pattern=_NAME, description="MLflow registered model; None = tabula-<name>."
    )
    dvc_remote: str = Field(
        default="data/.dvc-remote", min_length=1, description="DVC remote: local path or URL."
    )
    prefect_api_url: str | None = Field(
        default=None, min_length=1, description="Prefect server API; None = local default."
    )
    dask_address: str | None = Field(
        default=None, min_length=1, description="Dask scheduler for self-play; None = local."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="Torch device; auto = cuda when present, else cpu."
    )
    config_version: int = Field(
        default=legacy.CONFIG_VERSION,
        ge=1,
        description="The format the config was written in: a field it leaves out reads as that"
        " format's default (tabula.config.legacy; written by every dump).",
    )

    @field_validator("config_version")
    @classmethod
    def _known_format(cls, version: int) -> int:
        if version > legacy.CONFIG_VERSION:
            raise ValueError(
                f"written by a newer tabula: this one reads formats up to {legacy.CONFIG_VERSION}"
            )
        return version

    @field_validator("mlflow_tracking_uri")
    @classmethod
    def _tracking_store(cls, uri: str) -> str:
        # MLflow takes a database or a server; it refuses a plain path or a file: store
        # ("maintenance mode"), and only after the run's folders were made, so check here.
        if not _TRACKING_URI.match(uri):
            raise ValueError(
                "must be a database or server URI such as sqlite:///mlflow/mlflow.db or "
                "http://host:5000"
            )
        return uri

    @field_validator(*_PASSWORD_GOES)
    @classmethod
    def _no_password(cls, uri: str | None, info: ValidationInfo) -> str | None:
        if uri is not None and _USERINFO_PASSWORD.match(uri):
            raise ValueError(
                f"holds a password (got {without_password(uri)}): the URI is recorded as given"
                f" (params.yaml, MLflow, checkpoints), so give the password through "
                f"{_PASSWORD_GOES[str(info.field_name)]} instead"
            )
        return uri

    def registered_model_name(self) -> str:
        """MLflow registered model name: the set value, else one per run, f"tabula-{name}", so
        that two runs never move each other's ``champion`` alias."""
        return self.registered_model if self.registered_model is not None else f"tabula-{self.name}"


class Config(_Section):
    """One run's configuration; the field defaults are the quick-start run."""

    rules: RulesConfig = Field(default=RulesConfig(), description="The game.")
    network: NetworkConfig = Field(default=NetworkConfig(), description="The network.")
    search: SearchConfig = Field(default=SearchConfig(), description="MCTS.")
    selfplay: SelfPlayConfig = Field(default=SelfPlayConfig(), description="Self-play.")
    training: TrainingConfig = Field(default=TrainingConfig(), description="Training.")
    evaluation: EvaluationConfig = Field(default=EvaluationConfig(), description="Matches.")
    pipeline: PipelineConfig = Field(default=PipelineConfig(), description="The run.")

    @model_validator(mode="before")
    @classmethod
    def _frozen_before_switches(cls, data: Any) -> Any:
        return legacy.switches_as_they_ran(data)

    @model_validator(mode="after")
    def _holdout_leaves_games(self) -> Config:
        if self.training.holdout_games >= self.selfplay.games:
            raise ValueError(
                "training.holdout_games must be less than selfplay.games, so that an iteration"
                f" trains on some of its own games (got {self.training.holdout_games} of"
                f" {self.selfplay.games})"
            )
        return self

    @model_validator(mode="after")
    def _score_utility_has_a_score(self) -> Config:
        if self.search.score_utility > 0 and not self.network.aux_heads:
            raise ValueError(
                "search.score_utility needs the score head: set network.aux_heads=true or"
                f" search.score_utility=0 (got {self.search.score_utility})"
            )
        return self

    def resolve(self) -> Config:
        """A copy with the board-scaled None defaults filled in (idempotent)."""
        N = self.rules.board_size
        search = self.search.model_copy(update={"dirichlet_alpha": self.search.alpha_for(N)})
        tau_moves = self.selfplay.temperature_moves_for(N)
        selfplay = self.selfplay.model_copy(update={"temperature_moves": tau_moves})
        name = self.pipeline.registered_model_name()
        pipeline = self.pipeline.model_copy(update={"registered_model": name})
        return self.model_copy(
            update={"search": search, "selfplay": selfplay, "pipeline": pipeline}
        )
