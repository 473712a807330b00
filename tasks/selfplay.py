"""The self-play stage: the worker (a network, the game loop, the shards and SGFs it writes),
its Prefect task, and the iteration's totals with the next resignation threshold.

``run_worker`` loads the model (a checkpoint, or "random": a freshly initialised network from
the seed), plays ``games`` games with `tabula.selfplay.play_games`, and writes

- shards (`model.shards`, Parquet): every position of every game (with
  ``selfplay.record_fast_rows`` off, the full searches' only) with its 17 planes, pi (the
  visit distribution, or the Gumbel search's pi': the metadata's ``policy_target`` says), z,
  side to move, game id, move number, iteration, model id and the resign-disabled flag; a
  shard is closed after ``rows_per_shard`` positions (at a game boundary) and at the end;
  named ``i{iteration}-w{worker}-{k}.parquet``, each written to a temporary name and renamed;
- a sample of ``selfplay.sgf_sample`` games (the first game indices) as SGF under ``sgf/``,
  also atomically, with the root value of each move as its comment.

Seeds: the games' generator is ``SeedSequence(seed, spawn_key=(iteration, worker))``, and game
i gets its i-th spawned child, so the same seed, weights and config give byte-identical
shards (``overlap`` must then be the same too: it changes the network batches).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from prefect import task

from model.checkpoint import load_checkpoint
from model.evaluator import Evaluator, set_threads
from model.files import write_bytes
from model.network import PolicyValueNet, network_for, weights_sha256
from model.shards import ShardRecords, write_shard
from tabula.config import Config
from tabula.errors import UsageError
from tabula.features import NUM_PLANES
from tabula.mcts import BatchedMCTS, SearchParams
from tabula.plan import IterationPlan, WorkerSpec, torch_threads, with_v_resign
from tabula.resign import ResignTrace, calibrate_samples
from tabula.selfplay import GameRecord, SelfPlayParams, SelfPlayStats, play_games
from tabula.sgf import SgfGame, game_to_sgf, result_string
from tasks.retry import IO_RETRIES
from tasks.run.cputime import Mark
from tasks.run.layout import RunLayout, reset_dir
from tasks.run.markers import finished, resumable
from tasks.run.records import SelfplayRecord, Stage, WorkerRecord, WorkerResult
from tasks.scratch import scratch_prefix
from tasks.watch import reporting
from tasks.workers import WorkerProcesses, close_worker_processes, worker_processes

#: What a shard's ``pi`` column holds, by search algorithm (its metadata's "policy_target").
POLICY_TARGETS = {"puct": "visits", "gumbel": "gumbel-improved-policy"}
SHARD_PLANE_BYTES = 2**27  # close a shard at ~128 MiB of unpacked planes (~97k rows on 9x9)


@dataclass(frozen=True)
class WorkerProgress:
    """Sent to the progress callback after each finished game."""

    games: int
    games_total: int
    positions: int
    simulations: int
    evaluations: int
    seconds: float


def load_model(cfg: Config, model: str | os.PathLike[str] | None, seed: int) -> tuple[
    PolicyValueNet, str
]:  # fmt: skip
    """(network, model id) for a checkpoint path, or for "random"/None (initialised from seed)."""
    if model is None or str(model) == "random":
        net = network_for(cfg, seed)
        return net, f"random-{weights_sha256(net)[:12]}"
    net, metadata = load_checkpoint(model, expect_board_size=cfg.rules.board_size)
    return net, str(metadata.get("model_id") or weights_sha256(net)[:16])


def game_rng(seed: int, iteration: int, worker: int) -> np.random.Generator:
    """The generator whose spawned children play the worker's games."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(iteration, worker)))


def run_worker(
    cfg: Config,
    spec: WorkerSpec,
    out: Path,
    progress: Callable[[WorkerProgress], None] | None = None,
    *,
    overlap: bool = False,
    rows_per_shard: int | None = None,
) -> WorkerResult:
    """Play ``spec``'s games and write them under ``out`` (module docstring): its champion (a
    checkpoint path, or "random"), games, seed, iteration, worker and resignation threshold;
    ``progress`` after every game.

    overlap: evaluate half the games while the search works on the other half (see
    `tabula.selfplay`; off by default: tree, rules and loop cost ~5% of the network time here,
    and halves make smaller network batches). rows_per_shard: default ~128 MiB of unpacked planes
    per shard.

    Raises CheckpointError for a bad model file; UsageError (a ValueError) for games < 1.
    """
    games, seed, iteration, worker = spec.games, spec.seed, spec.iteration, spec.worker
    if games < 1:
        raise UsageError(f"games must be >= 1 (got {games})")
    out = Path(out)
    cfg = with_v_resign(cfg, spec.v_resign)
    net, model_id = load_model(cfg, spec.champion, seed)
    evaluate = Evaluator.for_search(net, cfg.search, device=cfg.pipeline.device)
    params = SelfPlayParams.from_config(cfg)
    if rows_per_shard is None:
        rows_per_shard = max(1000, SHARD_PLANE_BYTES // (NUM_PLANES * cfg.rules.board_size**2))
    writer = _Writer(cfg, out, model_id, iteration, worker, rows_per_shard)
    stats = SelfPlayStats()
    traces: list[ResignTrace] = []
    started = time.perf_counter()
    rng = game_rng(seed, iteration, worker)
    for record in play_games(evaluate, params, games, rng, overlap=overlap, stats=stats):
        writer.add(record)
        if record.resign_disabled:
            traces.append(record.resign_trace())
        if progress is not None:
            progress(WorkerProgress(stats.games, games, stats.positions, stats.simulations,
                                    stats.evaluations, time.perf_counter() - started))  # fmt: skip
    writer.flush()
    v = params.v_resign
    return WorkerResult(
        shards=writer.shards,
        sgfs=writer.sgfs,
        model_id=model_id,
        games=stats.games,
        positions=stats.positions,
        simulations=stats.simulations,
        evaluations=stats.evaluations,
        seconds=time.perf_counter() - started,
        resigned_games=stats.resigned,
        resign_disabled_games=stats.resign_disabled,
        false_positives=sum(v is not None and t.false_positive(v) for t in traces),
        v_resign=v,
        resign_samples=[t.to_dict() for t in traces],
    )


class _Writer:
    """Collects finished games into shards and writes the SGF sample."""

    def __init__(self, cfg: Config, out: Path, model_id: str, iteration: int, worker: int,
                 rows_per_shard: int) -> None:  # fmt: skip
        self.cfg, self.out, self.model_id = cfg, out, model_id
        self.iteration, self.worker, self.rows_per_shard = iteration, worker, rows_per_shard
        self.pending: list[ShardRecords] = []
        self.rows = 0
        self.shards: list[Path] = []
        self.sgfs: list[Path] = []

    def game_id(self, record: GameRecord) -> str:
        return f"i{self.iteration:04d}-w{self.worker:02d}-g{record.index:06d}"

    def add(self, record: GameRecord) -> None:
        rows = self.rows_of(record)
        if len(rows.z):
            self.pending.append(rows)
            self.rows += len(rows.z)
        if record.index < self.cfg.selfplay.sgf_sample:
            self.write_sgf(record)
        if self.rows >= self.rows_per_shard:
            self.flush()

    def rows_of(self, r: GameRecord) -> ShardRecords:
        """The game's rows: every position, or with ``selfplay.record_fast_rows`` off only the
        full searches' (KataGo), and a decided game's at their weight (`GameRecord.rows`), each
        keeping its move number in the game."""
        keep = r.rows(self.cfg.selfplay.record_fast_rows)
        T = int(keep.sum())
        planes, owner = r.replay()
        side = r.to_play.astype(np.int8)[keep, None]  # the targets from the side to move
        return ShardRecords(
            planes=planes[keep],
            pi=r.pi[keep],
            z=r.z[keep],
            to_play=r.to_play[keep],
            game_id=np.full(T, self.game_id(r)),
            move_number=np.flatnonzero(keep).astype(np.int32),
            iteration=np.full(T, self.iteration, dtype=np.int32),
            model_id=np.full(T, self.model_id),
            resign_disabled=np.full(T, r.resign_disabled),
            full_search=r.policy_targets()[keep],
            root_value=r.root_values[keep],
            ownership=(owner[None, :] * side).astype(np.int8),
            score=(np.float32(r.score or 0.0) * r.to_play[keep]).astype(np.float32),
            scored=np.full(T, r.scored),
            weight=r.weights()[keep],
        )

    def flush(self) -> None:
        if not self.pending:
            return
        k = len(self.shards)
        path = self.out / f"i{self.iteration:04d}-w{self.worker:02d}-{k:04d}.parquet"
        metadata = {
            "iteration": self.iteration,
            "worker": self.worker,
            "model_id": self.model_id,
            "policy_target": POLICY_TARGETS[self.cfg.search.algorithm],
        }
        write_shard(path, ShardRecords.concatenate(self.pending), metadata)
        self.shards.append(path)
        self.pending, self.rows = [], 0

    def write_sgf(self, r: GameRecord) -> None:
        result = result_string(r.score, r.winner, resigned=r.resigned != 0)
        comments = {t + 1: f"root value {v:+.3f}" for t, v in enumerate(r.root_values)}
        record = SgfGame(r.board_size, r.komi, tuple(r.history()), self.model_id,
                         self.model_id, result, comments)  # fmt: skip
        data = game_to_sgf(record)
        path = self.out / "sgf" / f"{self.game_id(r)}.sgf"
        write_bytes(path, data)
        self.sgfs.append(path)


def play_spec(
    cfg: Config,
    project: Path,
    spec: WorkerSpec,
    out: Path | None = None,
    progress: Callable[[WorkerProgress], None] | None = None,
) -> WorkerResult:
    """Play a worker spec's games (`run_worker`, its champion and folder project-relative)
    into ``out`` (default: its own folder): what the pipeline runs and what reproduction
    replays into a scratch folder."""
    champion = dataclasses.replace(spec, champion=str(project / spec.champion))
    return run_worker(cfg, champion, out or project / spec.folder, progress)


@task(
    name="selfplay-worker",
    task_run_name="selfplay-i{spec.iteration}-w{spec.worker}",
    **IO_RETRIES,
)
@resumable(Stage.SELFPLAY, WorkerRecord)
def selfplay_worker(cfg: Config, layout: RunLayout, spec: WorkerSpec) -> WorkerRecord:
    """Play one worker's games into its folder (or find them played): `play_spec`."""
    out = layout.project / spec.folder
    started = time.monotonic()
    threads = worker_threads(cfg)
    if in_processes(cfg):
        pool = _pool(cfg)
        ahead = pool.adopt(layout.project, spec)  # (`play_ahead`)
        if ahead is not None:
            started, result = ahead.began.wall_s, ahead.result()
        else:
            reset_dir(out)  # a killed worker's shards are replaced, never appended to
            result = pool.play(play_spec, cfg, layout.project, spec, threads, _progress(spec))
    else:
        reset_dir(out)
        set_threads(threads)
        result = play_spec(cfg, layout.project, spec, progress=_progress(spec))
    relative = dataclasses.replace(
        result,
        shards=[Path(layout.rel(p)) for p in result.shards],
        sgfs=[Path(layout.rel(p)) for p in result.sgfs],
    )
    # Where it ran: a Dask worker's process on a cluster, the flow's own process locally.
    return WorkerRecord(
        worker=relative,
        seconds=time.monotonic() - started,
        host=socket.gethostname(),
        pid=os.getpid(),
    )


def worker_threads(cfg: Config) -> int:
    """torch's threads for one self-play worker in this process: inside a Dask worker, the
    threads that worker was started with (``dask worker --nthreads``: its share of its own
    machine, which the flow's machine cannot know; a single-threaded worker per core, as
    docs/scaling-out.md starts them, gets one); elsewhere, this machine's cores over the run's
    workers (`tabula.plan.torch_threads`). A process that never imported Dask is no Dask
    worker, so a local run does not import it here."""
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        try:
            return max(1, distributed.get_worker().state.nthreads)
        except ValueError:  # (not in a Dask worker)
            pass
    return torch_threads(cfg.selfplay.workers)


def _progress(spec: WorkerSpec) -> Callable[[WorkerProgress], None]:
    """A worker's progress callback: its bar (`tasks.watch.reporting`), one game at a time."""
    show = reporting(Stage.SELFPLAY, f"iter {spec.iteration} self-play w{spec.worker} (games)")

    def progress(p: WorkerProgress) -> None:
        show(p.games, p.games_total)

    return progress


def play_ahead(cfg: Config, layout: RunLayout, plan: IterationPlan) -> None:
    """Start iteration ``plan.iteration``'s self-play games now, before its flow run starts:
    each worker whose games are not played yet (no marker) begins them on its process
    (`tasks.workers.WorkerProcesses.submit`), its folder reset first, and the flow's task for
    that worker (`selfplay_worker`) takes the job over instead of starting one. So the work
    between two iterations' games (the flow runs' end and start, the plan, the MLflow run)
    runs beside the games, not before them. Only where the workers are processes of this
    run's own (`in_processes`): threads would take turns with that work at the interpreter's
    lock. The games are those the task would play, byte for byte; a kill while they run is
    one during self-play (`flows.pipeline`)."""
    if not in_processes(cfg):
        return
    pool = _pool(cfg)
    threads = torch_threads(cfg.selfplay.workers)
    for spec in plan.workers:
        if finished(layout, spec.iteration, Stage.SELFPLAY, WorkerRecord, spec.worker):
            continue
        reset_dir(layout.project / spec.folder)
        pool.submit(play_spec, cfg, layout.project, spec, threads, _progress(spec))


def games_began(cfg: Config, layout: RunLayout, iteration: int) -> Mark | None:
    """When `play_ahead` started ``iteration``'s games, while a worker's are still to be taken
    over; None when it did not (`tasks.run.cputime.Laps.lap`'s ``since``)."""
    if not in_processes(cfg):
        return None
    pool = _pool(cfg)
    return pool.started(layout.project, iteration)


def _pool(cfg: Config) -> WorkerProcesses:
    """This process's self-play worker processes for ``cfg`` (`tasks.workers.worker_processes`),
    warming up with `compile_kernels` and `compile_kernels_ahead`."""
    return worker_processes(cfg.selfplay.workers, compile_kernels, compile_kernels_ahead)


def compile_kernels(cfg: Config) -> None:
    """Compile numba's self-play kernels for ``cfg`` in this process, or load them from numba's
    cache: `run_worker` (the game loop, the input planes, the shards and SGF) for one game of 8
    simulations with a network of ``cfg``'s inputs, one block of 8 filters, into a scratch
    folder. What a worker process runs before its first job (`tasks.workers`)."""
    small = {"blocks": 1, "filters": 8, "value_hidden": 8, "grow": []}
    quick = cfg.model_copy(update={
        "search": cfg.search.model_copy(update={"simulations": 8}),
        "network": cfg.network.model_copy(update=small),
    })  # fmt: skip
    with tempfile.TemporaryDirectory(prefix=scratch_prefix("warmup")) as scratch:
        run_worker(quick, WorkerSpec(0, 0, "random", 1, 0, "warm-up", None), Path(scratch))


def compile_kernels_ahead(cfg: Config) -> None:
    """The other half of a warm-up on a cold cache, beside `compile_kernels` in another
    process: compile the search kernels its game reaches after its first gather
    (`tabula.mcts.BatchedMCTS.compile_ahead`) while the game compiles the ones before, so that
    it loads them from numba's cache when it gets there (`tasks.workers`)."""
    params = SearchParams.from_config(cfg)
    BatchedMCTS(1, cfg.rules.board_size, cfg.rules.komi, params).compile_ahead()


def start_workers(cfg: Config) -> None:
    """Start the self-play worker processes of ``cfg`` now, if it plays in processes
    (`in_processes`): their numba compile then overlaps the run's start (`tasks.workers`)."""
    if in_processes(cfg):
        pool = _pool(cfg)
        pool.start(cfg, torch_threads(cfg.selfplay.workers))


def play_workers(cfg: Config, layout: RunLayout, specs: Sequence[WorkerSpec]) -> list[WorkerRecord]:
    """Run every worker's task side by side (`selfplay_worker`) and wait for their records.
    A stop while they play (an error, a Ctrl-C) stops the worker processes at once, so that
    the task runner's shutdown, which waits for its threads, does not wait for their games."""
    futures = [selfplay_worker.submit(cfg, layout, spec) for spec in specs]
    try:
        return [future.result() for future in futures]
    except BaseException:
        close_worker_processes()
        raise


def in_processes(cfg: Config) -> bool:
    """Whether this process runs its self-play workers in processes of their own
    (``selfplay.processes``, `tasks.workers`; auto: from two workers, since on two cores
    processes played 7% more positions a second than threads in the pipeline, where the
    games' last moves, in small batches, are mostly the loop's Python: docs/benchmarks.md):
    never inside a daemonic process (a Dask worker's), which may not start any."""
    wanted = cfg.selfplay.processes
    if wanted == "auto":
        wanted = cfg.selfplay.workers >= 2
    return bool(wanted) and not multiprocessing.current_process().daemon


_SUMMED = (
    "games",
    "positions",
    "simulations",
    "evaluations",
    "resigned_games",
    "resign_disabled_games",
    "false_positives",
)


@task(name="calibrate-resign", task_run_name="calibrate-resign-i{iteration}")
def calibrate(
    workers: list[WorkerRecord],
    iteration: int,
    v_resign_used: float | None,
    fp_target: float,
    hashes: dict[str, str],
) -> SelfplayRecord:
    """The self-play totals over an iteration's workers, and the v_resign for the next one
    (`tabula.resign.calibrate_samples` over the workers' resign-disabled games)."""
    totals = {k: sum(getattr(w.worker, k) for w in workers) for k in _SUMMED}
    seconds = max((w.seconds for w in workers), default=0.0) or 1e-9
    games = max(totals["games"], 1)
    samples = [s for w in workers for s in w.worker.resign_samples]
    threshold = workers[0].worker.v_resign if workers else None
    v_next, fp_rate = calibrate_samples(samples, threshold, target=fp_target)
    return SelfplayRecord(
        **totals,
        mean_game_length=totals["positions"] / games,
        resign_rate=totals["resigned_games"] / games,
        positions_per_s=totals["positions"] / seconds,
        simulations_per_s=totals["simulations"] / seconds,
        evaluations_per_s=totals["evaluations"] / seconds,
        v_resign_next=v_next,
        false_positive_rate=fp_rate,
        v_resign_used=v_resign_used,
        hashes=hashes,
        seconds=max(w.seconds for w in workers),
    )
