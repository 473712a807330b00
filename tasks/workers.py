"""Self-play worker processes: each worker's games in a process of its own, kept for the run.

Self-play workers used to be threads of the flow's process. Their network calls and the numba
tree kernels release the GIL, but the game loop's Python (the per-move bookkeeping of
`tabula.selfplay`) does not, so on a machine with many cores the threads queue for one lock:
measured on a 16-core GPU machine, 8 worker threads kept 2.3 cores busy. A process per worker
has its own interpreter and lock.

`WorkerProcesses` starts up to ``workers`` processes with the ``spawn`` method (a fresh
interpreter: no torch, CUDA or thread state copied from the parent) the first time they are
needed, and keeps them for the life of the run's process, so the import of torch and the load
of numba's cached kernels (seconds of CPU each) are paid once per run, not once per iteration.
A job is one worker spec and the function that plays it (`tasks.selfplay.play_spec`, what a
thread would call), with the same torch threads, so the games, shards and SGFs are byte for
byte those of a thread (`tests/tasks/test_workers.py`). A job can also be started before its
caller is there (`WorkerProcesses.submit`: an iteration's games, begun before its flow run), a
thread of this process waiting for it, and taken over later (`adopt`).

Before its first job a process compiles numba's self-play kernels (the pool's ``warm``,
`tasks.selfplay.compile_kernels`: about a minute of CPU on a cold cache, the same in every
process), and only one process of the pool compiles: the first to take the pool's lock file
compiles, filling numba's on-disk cache, and marks the file; the others wait for the lock, see
the mark and load the kernels from the cache side by side (a couple of seconds). A budgeted run
counts CPU-seconds: the compile costs it one process's instead of one per worker
(`python -m bench.coldstart`). The lock is the system's (``flock``), which lets go of it when
its process dies: a worker killed while it compiles leaves the compiling to the next. A run
killed with SIGKILL leaves its lock file (and a warm-up's scratch folder) in the temp folder;
the next pool removes those of processes that are gone (`sweep_orphans`).
`WorkerProcesses.start` starts the processes and their warm-up at once, so that a run's compile
overlaps its start (the Prefect flow, the repository, the first network) instead of delaying
its first self-play stage.

On a cold cache the warm-up's game compiles the kernels one after another, in the order its
first move calls them: about 40 CPU-seconds in one process, while the pool's other processes
wait, and once the run's start is done, a core of two idle. So the first process to find the
lock held helps first (the pool's ``ahead``, `tasks.selfplay.compile_kernels_ahead`): it
compiles the kernels that game reaches after its first gather while the game compiles those
before, and numba's cache hands them to the game when it gets there (`python -m
bench.coldstart`: the first jobs end after 28 s instead of 45, for about the same CPU; a cold
two-iteration run, 8 CPU-seconds more, since some callees are compiled by both). Only one
process helps (a record lock on the lock file's second byte): the others wait as before, so
the help costs its CPU once per pool, not per process.

A worker process never outlives the run: it ignores SIGINT (the run's process handles a
Ctrl-C and stops the workers), and exits at once when its parent is gone (a SIGKILL of the
run), so that a resume never races an orphan writing into the folder it resets. A job that
raises re-raises in the caller; a worker that dies is replaced by the next job.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

from tabula.config import Config
from tabula.plan import WorkerSpec
from tasks.run.cputime import Mark
from tasks.run.records import WorkerResult
from tasks.scratch import scratch_prefix, sweep_orphans

#: How often a worker checks that the process that started it is still there.
ORPHAN_CHECK_S = 0.5


class WorkerDiedError(RuntimeError):
    """A self-play worker process ended without answering (killed, or out of memory)."""


#: What a worker process runs: `tasks.selfplay.play_spec`'s signature.
Play = Callable[..., WorkerResult]
#: What a worker process runs once, before its first job (`tasks.selfplay.compile_kernels`).
Warm = Callable[[Config], None]


@dataclass(frozen=True)
class _Job:
    play: Play  # a module-level function: pickled by name
    cfg: Config
    project: Path
    spec: WorkerSpec
    threads: int


def _exit_when_orphaned(parent: int) -> None:
    while True:
        threading.Event().wait(ORPHAN_CHECK_S)
        if os.getppid() != parent:
            os._exit(1)


def _warm_once(lock: str, warm: Warm, cfg: Config, ahead: Warm | None = None) -> None:
    """``warm(cfg)``, holding the lock on the file ``lock`` unless another process has already
    warmed up (its mark in the file): then the kernels are in numba's cache. While another
    process holds the lock, the first process to find it held runs ``ahead(cfg)`` before it
    waits (`_help`)."""
    fd = os.open(lock, os.O_RDWR)
    try:
        if ahead is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        elif not _try_flock(fd):
            _help(fd, ahead, cfg)
            fcntl.flock(fd, fcntl.LOCK_EX)
        if os.pread(fd, 1, 0) == b"1":
            fcntl.flock(fd, fcntl.LOCK_UN)
            warm(cfg)
            return
        warm(cfg)
        os.pwrite(fd, b"1", 0)
    finally:
        os.close(fd)  # (lets go of the lock)


def _try_flock(fd: int) -> bool:
    """Take the lock on ``fd``'s file if no other process holds it; whether it was taken."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _help(fd: int, ahead: Warm, cfg: Config) -> None:
    """``ahead(cfg)`` in the first process to get here while another compiles, and in no other:
    the helper is the holder of a record lock on the file's second byte (``lockf``, which on
    Linux is apart from the ``flock`` on the whole file), kept until the file is closed, or its
    process dies. An error of ``ahead`` is dropped: whatever it did not compile, the warm-up
    compiles itself."""
    if os.pread(fd, 1, 0) == b"1":
        return  # (warmed up already: everything is in the cache)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 1)
    except OSError:
        return  # another process helps
    try:
        ahead(cfg)
    except Exception:
        pass


def _serve(conn: Connection, parent: int, lock: str, warm: Warm | None, ahead: Warm | None,
           early: Config | None, threads: int) -> None:  # fmt: skip
    """A worker process's loop: play each job sent, report progress and the result. Before
    the first, ``warm(cfg)``, one process at a time until one has done it, and ``ahead(cfg)``
    in one process beside it (`_warm_once`): at once for ``early`` if given, with ``threads``
    torch threads (an error then waits for the first job to retry it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    from model.evaluator import set_threads

    if warm is not None and early is not None:
        set_threads(threads)
        try:
            _warm_once(lock, warm, early, ahead)
            warm = None
        except Exception:
            pass  # (the first job warms up again, and reports the error)

    while True:
        try:
            job: _Job | None = conn.recv()
        except EOFError:
            return
        if job is None:  # stopped (`WorkerProcesses.close`): nothing of the jobs is left to
            _exit_now()  # write, so the interpreter's teardown (about a second) is skipped
        set_threads(job.threads)
        try:
            if warm is not None:
                _warm_once(lock, warm, job.cfg, ahead)
                warm = None
            result = job.play(
                job.cfg, job.project, job.spec, progress=lambda p: conn.send(("progress", p))
            )
        except BaseException as error:  # (the caller re-raises it)
            conn.send(("error", _picklable(error)))
        else:
            conn.send(("done", result))


def _exit_now() -> NoReturn:
    """End this worker process at once, its output flushed: every job's files were closed and
    its result sent, and a spawned interpreter's teardown (torch's and numba's modules) costs
    about a second of wall time the run's close would wait for."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(0)


def _picklable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling, else a RuntimeError with its type and message."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


class _Worker:
    def __init__(self, context: Any, lock: str, warm: Warm | None, ahead: Warm | None,
                 early: Config | None = None, threads: int = 1) -> None:  # fmt: skip
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child, os.getpid(), lock, warm, ahead, early, threads),
            name="tabula-selfplay",
            daemon=True,
        )
        self.process.start()
        child.close()

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


class WorkerProcesses:
    """Up to ``size`` self-play worker processes, started when first needed (module docstring).
    Thread-safe: each of the flow's worker threads runs its job on a process of its own.
    ``warm``: what each process runs before its first job, one at a time until one has
    (module docstring; None: nothing, every process compiles what its jobs need itself);
    ``ahead``: what one other process runs meanwhile, before it waits (module docstring)."""

    def __init__(self, size: int, warm: Warm | None = None, ahead: Warm | None = None) -> None:
        self.size = size
        self.warm, self.ahead = warm, ahead
        self._context = multiprocessing.get_context("spawn")
        self._lock_file = ""  # made with the first process, removed by `close`
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._busy = 0
        self._lock = threading.Lock()
        self._ahead: dict[tuple[Path, int, int], Running] = {}  # (`submit`)

    def _take(self) -> _Worker:
        with self._lock:
            if self._busy >= self.size:
                raise RuntimeError(f"more than {self.size} self-play jobs at once")
            self._busy += 1
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                self._all.discard(worker)
                worker.stop()
        try:
            worker = _Worker(self._context, self._compile_lock(), self.warm, self.ahead)
        except BaseException:
            with self._lock:
                self._busy -= 1
            raise
        with self._lock:
            self._all.add(worker)
        return worker

    def start(self, cfg: Config, threads: int) -> None:
        """Start the pool's processes now, each warming up for ``cfg`` at once with ``threads``
        torch threads (module docstring), rather than with its first job."""
        with self._lock:
            missing = self.size - len(self._all)
        for _ in range(missing):
            worker = _Worker(
                self._context, self._compile_lock(), self.warm, self.ahead, cfg, threads
            )
            with self._lock:
                self._all.add(worker)
                self._idle.append(worker)

    def _compile_lock(self) -> str:
        with self._lock:
            if not self._lock_file:
                sweep_orphans("compile")
                sweep_orphans("warmup")
                prefix = scratch_prefix("compile")
                fd, self._lock_file = tempfile.mkstemp(prefix=prefix, suffix=".lock")
                os.close(fd)
            return self._lock_file

    def _give_back(self, worker: _Worker, keep: bool) -> None:
        with self._lock:
            self._busy -= 1
            if keep:
                self._idle.append(worker)
            else:
                self._all.discard(worker)

    def play(
        self,
        play: Play,
        cfg: Config,
        project: Path,
        spec: WorkerSpec,
        threads: int,
        progress: Callable[[Any], None] | None = None,
    ) -> WorkerResult:
        """``play(cfg, project, spec, progress=...)`` (`tasks.selfplay.play_spec`) in a worker
        process with ``threads`` torch threads."""
        worker = self._take()
        kept: _Worker | None = None
        try:
            worker.conn.send(_Job(play, cfg, project, spec, threads))
            while True:
                try:
                    kind, payload = worker.conn.recv()
                except (EOFError, OSError) as error:
                    code = worker.process.exitcode
                    raise WorkerDiedError(
                        f"self-play worker {spec.worker} of iteration {spec.iteration} ended"
                        f" without its games (exit code {code})"
                    ) from error
                if kind == "progress":
                    if progress is not None:
                        progress(payload)
                    continue
                kept = worker
                if kind == "error":
                    raise payload
                return payload
        finally:
            if kept is None:  # interrupted, or the process died: it may be mid-game
                worker.stop()
            self._give_back(worker, keep=kept is not None)

    def submit(
        self,
        play: Play,
        cfg: Config,
        project: Path,
        spec: WorkerSpec,
        threads: int,
        progress: Callable[[Any], None] | None = None,
    ) -> None:
        """Start `play`'s job now and return: a thread of this process waits for it, and
        `adopt` hands it to whoever then needs its result (the games of an iteration started
        before its flow run: `tasks.selfplay.play_ahead`)."""
        running = Running(self, _Job(play, cfg, project, spec, threads), progress)
        with self._lock:
            self._ahead[(Path(project), spec.iteration, spec.worker)] = running

    def adopt(self, project: Path, spec: WorkerSpec) -> Running | None:
        """The job `submit` started for ``spec`` of ``project``, taken from the pool, or None.
        A job started for another spec of the same worker is waited for and dropped."""
        with self._lock:
            running = self._ahead.pop((Path(project), spec.iteration, spec.worker), None)
        if running is not None and running.spec != spec:
            running.wait()
            return None
        return running

    def started(self, project: Path, iteration: int) -> Mark | None:
        """When the first job `submit` started for ``iteration`` of ``project`` and not yet
        adopted began; None when there is none."""
        key = (Path(project), iteration)
        with self._lock:
            marks = [r.began for (p, i, _), r in self._ahead.items() if (p, i) == key]
        return min(marks, key=lambda m: m.wall_s, default=None)

    def close(self) -> None:
        """Stop every worker: an idle one when it has read its last job, a busy one at once
        (its caller raises `WorkerDiedError`): a run that stops leaves no game playing."""
        with self._lock:
            idle, self._idle = self._idle, []
            busy = self._all.difference(idle)
            self._all = set()
        for worker in idle:  # all told first, so that they end side by side
            try:
                worker.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        for worker in idle:
            worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
            worker.stop()
        for worker in busy:
            worker.process.kill()
        with self._lock:
            lock_file, self._lock_file = self._lock_file, ""
        if lock_file:
            Path(lock_file).unlink(missing_ok=True)


class Running:
    """A job started by `WorkerProcesses.submit`: a thread of this process plays it on a worker
    process (`WorkerProcesses.play`) and keeps its result or error for `result`."""

    def __init__(
        self, pool: WorkerProcesses, job: _Job, progress: Callable[[Any], None] | None
    ) -> None:
        self.spec = job.spec
        self.began = Mark.now()
        self._done = threading.Event()
        self._result: WorkerResult | None = None
        self._error: BaseException | None = None
        name = f"selfplay-i{job.spec.iteration}-w{job.spec.worker}"
        args = (pool, job, progress)
        threading.Thread(target=self._run, args=args, name=name, daemon=True).start()

    def _run(
        self, pool: WorkerProcesses, job: _Job, progress: Callable[[Any], None] | None
    ) -> None:
        try:
            self._result = pool.play(
                job.play, job.cfg, job.project, job.spec, job.threads, progress
            )
        except BaseException as error:  # (raised by `result`)
            self._error = error
        finally:
            self._done.set()

    def wait(self) -> None:
        self._done.wait()

    def result(self) -> WorkerResult:
        """The job's result once it has ended, or its error raised here."""
        self.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


_pool: WorkerProcesses | None = None
_pool_lock = threading.Lock()


def worker_processes(
    size: int, warm: Warm | None = None, ahead: Warm | None = None
) -> WorkerProcesses:
    """This process's pool of self-play worker processes, of at least ``size``; ``warm`` and
    ``ahead``: what a new pool's processes run before their first job (`WorkerProcesses`)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = WorkerProcesses(size, warm, ahead)
        _pool.size = max(_pool.size, size)
        return _pool


def close_worker_processes() -> None:
    """Stop this process's self-play worker processes (a new pool starts when next needed)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


@contextmanager
def stopping_worker_processes() -> Iterator[None]:
    """Stop this process's self-play worker processes when the block ends, however it ends."""
    try:
        yield
    finally:
        close_worker_processes()
