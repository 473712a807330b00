"""Compilation contract: nothing compiles at import, numba's on-disk cache serves a second
process, and the Zobrist keys (hence every stored hash) never change."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tabula.go.board import rules_context

ROOT = Path(__file__).resolve().parents[2]

_DISPATCHERS = textwrap.dedent("""
    import numba.core.registry as reg
    import bench.playout, tabula.features, tabula.go, tabula.go.board, tabula.go.hashset
    mods = [tabula.features, tabula.go.board, tabula.go.hashset, bench.playout]
    ds = [v for m in mods for v in vars(m).values() if isinstance(v, reg.CPUDispatcher)]
""")

_WORKLOAD = textwrap.dedent("""
    import numpy as np
    from tabula.go import Game, rules_context
    from bench.playout import new_state, random_games, random_games_stateless
    g = Game(9)
    g.play(40); g.legal_mask(); g.score(); g.features(); g.undo()
    ctx = rules_context(9)
    random_games(new_state(9), ctx.neighbors, ctx.zobrist, 1, 2)
    random_games_stateless(ctx.neighbors, ctx.zobrist, 1, 2)
    used = [d for d in ds if d.signatures]
    print(len(used), sum(len(d.stats.cache_misses) for d in used),
          sum(len(d.stats.cache_hits) for d in used))
""")


def _python(code: str, cache_dir: Path | None = None) -> str:
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_compiles_nothing() -> None:
    out = _python(_DISPATCHERS + "print(len(ds), sum(len(d.signatures) for d in ds))")
    n_kernels, n_compiled = map(int, out.split())
    assert n_kernels >= 15 and n_compiled == 0


@pytest.mark.slow
def test_a_second_process_loads_the_kernels_from_the_cache(tmp_path: Path) -> None:
    used, misses, hits = map(int, _python(_DISPATCHERS + _WORKLOAD, tmp_path).split())
    assert used >= 5 and misses > 0
    used2, misses2, hits2 = map(int, _python(_DISPATCHERS + _WORKLOAD, tmp_path).split())
    # The second process compiles nothing: the kernels it calls come from the cache (their
    # callees are linked into them, so fewer dispatchers are touched at all).
    assert 5 <= used2 <= used and misses2 == 0 and hits2 >= used2


def test_zobrist_keys_are_pinned() -> None:
    # Hashes identify positions across processes and runs (superko sets, stored data), so
    # the keys are golden values: changing the seed or generator breaks this on purpose.
    z9, z19 = rules_context(9).zobrist, rules_context(19).zobrist
    assert int(z9[0, 0]) == 0x18E60EA3ED7E1241 and int(z9[1, 80]) == 0x1E1C86001935E39A
    assert int(z19[0, 0]) == 0x1D9A7DAF3B196343 and int(z19[1, 360]) == 0xC93FE6D092A034DE
    assert not z9.flags.writeable and not rules_context(9).neighbors.flags.writeable
    assert rules_context(9) is rules_context(9)
