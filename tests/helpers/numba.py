"""Numba's compile contract, checked in fresh Python processes (in-process, earlier tests may
have compiled the kernels already): the numba dispatchers of some modules, how many of them
importing compiles (none), and what a second process takes from numba's on-disk cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_COUNT_USED = """
used = [d for d in ds if d.signatures]
print(len(used), sum(len(d.stats.cache_misses) for d in used),
      sum(len(d.stats.cache_hits) for d in used))
"""


def _python(code: str, cache_dir: Path | None = None) -> str:
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _dispatchers(modules: list[str]) -> str:
    """Code that imports ``modules`` and binds ``ds`` to the numba dispatchers they hold."""
    return (
        "import importlib\n"
        "import numba.core.registry as reg\n"
        f"mods = [importlib.import_module(m) for m in {modules!r}]\n"
        "ds = [v for m in mods for v in vars(m).values() if isinstance(v, reg.CPUDispatcher)]\n"
    )


def compiled_at_import(modules: list[str]) -> tuple[int, int]:
    """In a fresh process that imports ``modules``: (their dispatchers, signatures compiled)."""
    out = _python(_dispatchers(modules) + "print(len(ds), sum(len(d.signatures) for d in ds))")
    kernels, compiled = map(int, out.split())
    return kernels, compiled


def _cache_use(modules: list[str], workload: str, cache_dir: Path) -> tuple[int, int, int]:
    """Run ``workload`` (Python code) in a fresh process that imports ``modules`` and keeps
    numba's cache in ``cache_dir``: (dispatchers of ``modules`` it compiled or loaded, cache
    misses, cache hits)."""
    out = _python(_dispatchers(modules) + workload + _COUNT_USED, cache_dir)
    used, misses, hits = map(int, out.split())
    return used, misses, hits


def selfplay_warm_up_cache_use(cache_dir: Path) -> tuple[int, int, int]:
    """In a fresh process that keeps numba's cache in ``cache_dir``, self-play's warm-up
    (`tasks.selfplay.compile_kernels`) for the default config: (the ``tabula`` dispatchers it
    compiled or loaded, cache misses, cache hits)."""
    warm_up = (
        "from bench.coldstart import tabula_kernels\n"
        "from tabula.config import load_config\n"
        "from tasks.selfplay import compile_kernels\n"
        "compile_kernels(load_config(None))\n"
        "ds = tabula_kernels()\n"
    )
    used, misses, hits = map(int, _python(warm_up + _COUNT_USED, cache_dir).split())
    return used, misses, hits


def check_the_cache_serves_a_second_process(
    modules: list[str], workload: str, cache_dir: Path, kernels: int
) -> None:
    """``workload`` in a process with an empty cache compiles (cache misses) at least
    ``kernels`` dispatchers of ``modules``; a second process compiles nothing: the kernels it
    calls, at least ``kernels`` of them, come from the cache (their callees are linked into
    them, so fewer dispatchers are touched at all)."""
    used, misses, _ = _cache_use(modules, workload, cache_dir)
    assert used >= kernels and misses > 0
    used2, misses2, hits2 = _cache_use(modules, workload, cache_dir)
    assert kernels <= used2 <= used and misses2 == 0 and hits2 >= used2


# Self-play worker processes (`tasks.workers`) in tests: a warm-up and a job, picklable by name.

#: While this file does not exist, `compile_normal_or_hang` makes it and hangs.
HANG_FLAG = "TABULA_TEST_HANG_FLAG"


def compile_normal(cfg: object) -> None:
    """A warm-up that compiles one small kernel (`tabula.mcts.random.normal`), or loads it."""
    import numpy as np

    from tabula.mcts.random import normal

    normal(np.ones(1, np.uint64), 0)


def compile_normal_or_hang(cfg: object) -> None:
    """`compile_normal`, but first, once (the file `HANG_FLAG` names), hang before it."""
    import time

    flag = Path(os.environ[HANG_FLAG])
    if not flag.exists():
        flag.touch()
        time.sleep(3600)
    compile_normal(cfg)


#: The file `note_ahead` appends its process's pid to.
AHEAD_FILE = "TABULA_TEST_AHEAD_FILE"


def compile_normal_slowly(cfg: object) -> None:
    """`compile_normal` after two seconds: the lock stays held while the others get there."""
    import time

    time.sleep(2)
    compile_normal(cfg)


def note_ahead(cfg: object) -> None:
    """A pool's ``ahead``: append this process's pid to the file `AHEAD_FILE` names."""
    with open(os.environ[AHEAD_FILE], "a") as f:
        f.write(f"{os.getpid()}\n")


def normal_cache_use(cfg: object, project: Path, spec: object, progress: object = None) -> tuple:
    """A worker job: (this process's pid, how many signatures of `tabula.mcts.random.normal`
    it compiled, how many it loaded from numba's cache). It takes half a second, so that jobs
    sent side by side run on processes of their own."""
    import time

    from tabula.mcts.random import normal

    time.sleep(0.5)
    stats = normal.stats
    return os.getpid(), len(stats.cache_misses), len(stats.cache_hits)


def check_the_warm_up_covers_selfplay(overrides: list[str]) -> None:
    """In a fresh process: after `tasks.selfplay.compile_kernels`, self-play of two games with
    a network of that config (its input planes too) compiles no kernel signature more."""
    out = _python(
        "import numpy as np\n"
        "from bench.coldstart import tabula_kernels\n"
        "from tabula.config import load_config\n"
        "from model.evaluator import Evaluator\n"
        "from model.network import network_for\n"
        "from tabula.selfplay import SelfPlayParams, play_games\n"
        "from tasks.selfplay import compile_kernels\n"
        f"cfg = load_config(None, {overrides!r})\n"
        "def signatures():\n"
        "    return sum(len(kernel.signatures) for kernel in tabula_kernels())\n"
        "compile_kernels(cfg)\n"
        "warm = signatures()\n"
        "evaluate = Evaluator(network_for(cfg, 1), device='cpu')\n"
        "for _ in play_games(evaluate, SelfPlayParams.from_config(cfg), 2,\n"
        "                    np.random.default_rng(0)):\n"
        "    pass\n"
        "print(warm, signatures())\n"
    )
    warm, after = map(int, out.split())
    assert warm > 20 and after == warm


def check_the_ahead_compile_is_the_games_own(overrides: list[str], decide: str) -> None:
    """In a fresh process: `tasks.selfplay.compile_kernels_ahead` for that config gives each of
    the search's kernels after its gather (``decide``: how it picks the move) a signature, and
    the warm-up game after it (`tasks.selfplay.compile_kernels`) adds none to them: the game
    finds what the helper compiled."""
    out = _python(
        "from tabula.config import load_config\n"
        "from tabula.mcts import gumbel, kernels, moves\n"
        "from tasks.selfplay import compile_kernels, compile_kernels_ahead\n"
        f"cfg = load_config(None, {overrides!r})\n"
        "ks = [kernels.expand_and_backup, kernels.undo_collisions, moves.root_stats,\n"
        f"      moves.play_moves, getattr(gumbel, {decide!r}, None) or moves.{decide}]\n"
        "compile_kernels_ahead(cfg)\n"
        "ahead = [set(k.signatures) for k in ks]\n"
        "compile_kernels(cfg)\n"
        "print(sum(1 for a in ahead if a), sum(len(set(k.signatures) - a)\n"
        "                                     for k, a in zip(ks, ahead)))\n"
    )
    covered, added = map(int, out.split())
    assert covered == 5 and added == 0
