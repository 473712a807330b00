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
