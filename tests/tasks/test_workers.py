"""Self-play worker processes (`tasks.workers`): the same bytes as a thread, errors come back,
a dead worker is reported and replaced, no worker outlives the process that started it, and one
process of a pool compiles numba's kernels while the others load them."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from model.checkpoint import CheckpointError, save_checkpoint
from model.network import make_network
from tabula.config import load_config
from tabula.plan import WorkerSpec
from tasks.selfplay import WorkerProgress, compile_kernels, in_processes, play_spec
from tasks.workers import WorkerDiedError, WorkerProcesses
from tests.helpers.numba import (
    AHEAD_FILE,
    HANG_FLAG,
    check_the_ahead_compile_is_the_games_own,
    check_the_warm_up_covers_selfplay,
    compile_normal,
    compile_normal_or_hang,
    compile_normal_slowly,
    normal_cache_use,
    note_ahead,
)

OVERRIDES = [
    "rules.board_size=5",
    "network.blocks=1",
    "network.filters=8",
    "network.value_hidden=16",
    "search.simulations=8",
    "search.leaves_per_game=2",
    "selfplay.concurrent_games=3",
    "selfplay.sgf_sample=2",
    "pipeline.device=cpu",
]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, OVERRIDES)


@pytest.fixture(scope="module")
def pool():
    workers = WorkerProcesses(2, warm=compile_kernels)  # (as the pipeline's)
    yield workers
    workers.close()


@pytest.fixture(autouse=True)
def champion(cfg, tmp_path: Path) -> Path:
    """The network that plays, as a project-relative checkpoint (as a run's champion)."""
    net = make_network(5, 1, 8, seed=3, value_hidden=16)
    return save_checkpoint(tmp_path / "m.pt", net, {"model_id": "run/iter-0002"})


def _spec(folder: str, games: int = 4, worker: int = 0) -> WorkerSpec:
    return WorkerSpec(3, worker, "m.pt", games, 17, folder, None)


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_worker_process_writes_the_bytes_a_thread_writes(cfg, pool, tmp_path: Path) -> None:
    seen: list[WorkerProgress] = []
    in_process = pool.play(play_spec, cfg, tmp_path, _spec("p"), threads=1, progress=seen.append)
    in_thread = play_spec(cfg, tmp_path, _spec("t"))
    assert _digest(tmp_path / "p") == _digest(tmp_path / "t")
    assert len(_digest(tmp_path / "p")) >= 3  # shards and the SGF sample
    assert [p.games for p in seen] == [1, 2, 3, 4]  # each finished game, as a thread reports
    assert in_process.positions == in_thread.positions
    assert in_process.shards == [tmp_path / "p" / s.name for s in in_thread.shards]


def test_a_worker_process_is_kept_for_the_next_job(cfg, pool, tmp_path: Path) -> None:
    pool.play(play_spec, cfg, tmp_path, _spec("a", games=1), threads=1)
    pids = {w.process.pid for w in pool._idle}
    pool.play(play_spec, cfg, tmp_path, _spec("b", games=1), threads=1)
    assert {w.process.pid for w in pool._idle} == pids


def test_a_job_submitted_ahead_is_adopted_with_the_bytes_a_thread_writes(
    cfg, pool, tmp_path: Path
) -> None:
    seen: list[WorkerProgress] = []
    before = time.monotonic()
    pool.submit(play_spec, cfg, tmp_path, _spec("p", worker=1), 1, seen.append)
    began = pool.started(tmp_path, 3)
    assert began is not None and began.wall_s >= before
    assert pool.started(tmp_path, 4) is None  # another iteration: none
    assert pool.adopt(tmp_path, _spec("p", worker=0)) is None  # another worker: none
    running = pool.adopt(tmp_path, _spec("p", worker=1))
    assert running is not None and pool.adopt(tmp_path, _spec("p", worker=1)) is None
    assert pool.started(tmp_path, 3) is None  # adopted
    result = running.result()
    play_spec(cfg, tmp_path, _spec("t", worker=1))
    assert _digest(tmp_path / "p") == _digest(tmp_path / "t")
    assert [p.games for p in seen] == [1, 2, 3, 4] and result.games == 4


def test_a_job_submitted_for_another_spec_is_waited_for_and_dropped(
    cfg, pool, tmp_path: Path
) -> None:
    pool.submit(play_spec, cfg, tmp_path, _spec("old", games=2), 1)
    assert pool.adopt(tmp_path, _spec("new", games=2)) is None
    assert len(_digest(tmp_path / "old")) >= 1  # it ended before the adoption returned
    pool.play(play_spec, cfg, tmp_path, _spec("next", games=1), threads=1)  # its process is free


def test_an_error_of_a_job_submitted_ahead_is_raised_by_its_result(
    cfg, pool, tmp_path: Path
) -> None:
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    spec = WorkerSpec(1, 0, "bad.pt", 2, 5, "out", None)
    pool.submit(play_spec, cfg, tmp_path, spec, 1)
    running = pool.adopt(tmp_path, spec)
    assert running is not None
    with pytest.raises(CheckpointError):
        running.result()


def test_an_error_in_the_job_is_raised_in_the_caller(cfg, pool, tmp_path: Path) -> None:
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    spec = WorkerSpec(1, 0, "bad.pt", 2, 5, "out", None)
    with pytest.raises(CheckpointError):
        pool.play(play_spec, cfg, tmp_path, spec, threads=1)
    pool.play(play_spec, cfg, tmp_path, _spec("after", games=1), threads=1)  # the worker serves on


def test_a_killed_worker_is_reported_and_replaced(cfg, pool, tmp_path: Path) -> None:
    pool.play(play_spec, cfg, tmp_path, _spec("warm", games=1), threads=1)
    victim = pool._idle[-1].process.pid

    def kill_on_first_game(progress: WorkerProgress) -> None:
        os.kill(victim, signal.SIGKILL)

    with pytest.raises(WorkerDiedError, match="ended without its games"):
        pool.play(
            play_spec,
            cfg,
            tmp_path,
            _spec("killed", games=3),
            threads=1,
            progress=kill_on_first_game,
        )
    pool.play(play_spec, cfg, tmp_path, _spec("next", games=1), threads=1)
    assert victim not in {w.process.pid for w in pool._idle}


def test_no_worker_outlives_a_killed_parent(tmp_path: Path) -> None:
    """A run killed with SIGKILL leaves no worker playing on into the folder a resume resets."""
    script = textwrap.dedent(f"""
        import sys, time
        from tabula.config import load_config
        from tabula.plan import WorkerSpec
        from tasks.selfplay import play_spec
        from tasks.workers import WorkerProcesses
        cfg = load_config(None, {OVERRIDES!r})
        pool = WorkerProcesses(1)
        spec = WorkerSpec(0, 0, "m.pt", 10**6, 1, "out", None)
        def started(progress):
            import multiprocessing
            workers = multiprocessing.active_children()
            print([p.pid for p in workers if p.name == "tabula-selfplay"][0], flush=True)
            time.sleep(3600)
        pool.play(play_spec, cfg, __import__("pathlib").Path({str(tmp_path)!r}), spec, 1, started)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def test_processes_setting(cfg) -> None:
    assert in_processes(cfg)  # auto with two workers
    assert not in_processes(load_config(None, [*OVERRIDES, "selfplay.workers=1"]))
    assert in_processes(load_config(None, [*OVERRIDES, "selfplay.workers=3"]))
    assert not in_processes(load_config(None, [*OVERRIDES, "selfplay.workers=3",
                                                "selfplay.processes=false"]))  # fmt: skip
    assert in_processes(load_config(None, [*OVERRIDES, "selfplay.processes=true"]))


def _play_side_by_side(pool: WorkerProcesses, cfg, project: Path, n: int) -> list:
    """``n`` jobs of `normal_cache_use` at once, each on a process of its own."""
    results: list = [None] * n

    def play(w: int) -> None:
        results[w] = pool.play(normal_cache_use, cfg, project, _spec("x", worker=w), threads=1)

    threads = [threading.Thread(target=play, args=(w,)) for w in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_one_process_compiles_and_the_others_load(cfg, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cold"))  # (the processes' cache)
    pool = WorkerProcesses(3, warm=compile_normal)
    try:
        results = _play_side_by_side(pool, cfg, tmp_path, 3)
        lock_file = Path(pool._lock_file)
    finally:
        pool.close()
    assert len({pid for pid, _, _ in results}) == 3
    assert sorted((misses, hits) for _, misses, hits in results) == [(0, 1), (0, 1), (1, 0)]
    assert not lock_file.exists()  # (removed by close)


def test_a_process_killed_while_it_compiles_leaves_it_to_the_next(
    cfg, tmp_path: Path, monkeypatch
) -> None:
    """The lock dies with the process that holds it: the next process compiles, not waits."""
    flag = tmp_path / "hung"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cold"))
    monkeypatch.setenv(HANG_FLAG, str(flag))
    pool = WorkerProcesses(2, warm=compile_normal_or_hang)
    died: list[WorkerDiedError] = []

    def hang() -> None:
        try:
            pool.play(normal_cache_use, cfg, tmp_path, _spec("h"), threads=1)
        except WorkerDiedError as error:
            died.append(error)

    try:
        hung = threading.Thread(target=hang)
        hung.start()
        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        (victim,) = [w.process.pid for w in pool._all]
        os.kill(victim, signal.SIGKILL)
        hung.join(timeout=30)
        assert died
        (result,) = _play_side_by_side(pool, cfg, tmp_path, 1)
    finally:
        pool.close()
    assert result is not None and result[0] != victim
    assert result[1:] == (1, 0)  # it compiled: the killed process had not


def test_the_warm_up_covers_what_selfplay_compiles() -> None:
    check_the_warm_up_covers_selfplay([*OVERRIDES, "network.liberties=true"])


@pytest.mark.parametrize(
    "search, decide", [("gumbel", "gumbel_decisions"), ("puct", "choose_moves")]
)
def test_the_helper_compiles_what_the_warm_up_game_calls(search: str, decide: str) -> None:
    check_the_ahead_compile_is_the_games_own(
        [*OVERRIDES, f"search.algorithm={search}", "network.liberties=true"], decide
    )


def test_one_process_helps_while_another_compiles(cfg, tmp_path: Path, monkeypatch) -> None:
    """On a cold cache, while the first process compiles, one other process (of two waiting)
    runs the pool's ``ahead``; every process then takes its job."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cold"))
    monkeypatch.setenv(AHEAD_FILE, str(tmp_path / "ahead"))
    pool = WorkerProcesses(3, warm=compile_normal_slowly, ahead=note_ahead)
    try:
        results = _play_side_by_side(pool, cfg, tmp_path, 3)
    finally:
        pool.close()
    helpers = (tmp_path / "ahead").read_text().split()
    pids = {pid for pid, _, _ in results}
    assert len(pids) == 3 and len(helpers) == 1 and int(helpers[0]) in pids
    assert sorted((misses, hits) for _, misses, hits in results) == [(0, 1), (0, 1), (1, 0)]


def test_started_processes_warm_up_before_their_first_job(cfg, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cold"))
    pool = WorkerProcesses(2, warm=compile_normal)
    try:
        pool.start(cfg, threads=1)
        started = {w.process.pid for w in pool._all}
        lock_file = Path(pool._lock_file)
        deadline = time.monotonic() + 60
        while lock_file.read_bytes() != b"1" and time.monotonic() < deadline:
            time.sleep(0.1)
        warmed = lock_file.read_bytes() == b"1"  # with no job sent yet
        results = _play_side_by_side(pool, cfg, tmp_path, 2)
    finally:
        pool.close()
    assert warmed and len(started) == 2
    assert {pid for pid, _, _ in results} == started
    assert sorted((misses, hits) for _, misses, hits in results) == [(0, 1), (1, 0)]


def test_a_new_pool_sweeps_the_scratch_that_killed_processes_left(tmp_path: Path, monkeypatch):
    """A SIGKILL skips every cleanup: the next pool removes the lock files and warm-up folders
    whose process is gone, and leaves those of live processes (and names not its own)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphans = [
        tmp_path / f"tabula-compile-{gone.pid}-abc.lock",
        tmp_path / f"tabula-warmup-{gone.pid}-x",
    ]
    orphans[0].write_bytes(b"")
    (orphans[1] / "shards").mkdir(parents=True)
    live = [
        tmp_path / f"tabula-compile-{os.getpid()}-def.lock",
        tmp_path / "tabula-compile-odd.lock",
    ]
    for path in live:
        path.write_bytes(b"1")
    pool = WorkerProcesses(1)
    try:
        mine = Path(pool._compile_lock())
    finally:
        pool.close()
    assert not any(path.exists() for path in orphans)
    assert all(path.exists() for path in live)
    assert mine.parent == tmp_path and mine.name.startswith(f"tabula-compile-{os.getpid()}-")
