"""Compilation contract: nothing compiles at import, numba's on-disk cache serves a second
process, and the Zobrist keys (hence every stored hash) never change."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tabula.go.board import rules_context
from tests.helpers.numba import check_the_cache_serves_a_second_process, compiled_at_import

MODULES = ["tabula.features", "tabula.go.board", "tabula.go.hashset"]
_WORKLOAD = textwrap.dedent("""
    from tabula.go import Game
    g = Game(9)
    g.play(40); g.legal_mask(); g.score(); g.features(); g.undo()
""")


def test_importing_compiles_nothing() -> None:
    n_kernels, n_compiled = compiled_at_import(MODULES)
    assert n_kernels >= 15 and n_compiled == 0


@pytest.mark.slow
def test_a_second_process_loads_the_kernels_from_the_cache(tmp_path: Path) -> None:
    check_the_cache_serves_a_second_process(MODULES, _WORKLOAD, tmp_path, kernels=5)


def test_zobrist_keys_are_pinned() -> None:
    # Hashes identify positions across processes and runs (superko sets, stored data), so
    # the keys are golden values: changing the seed or generator breaks this on purpose.
    z9, z19 = rules_context(9).zobrist, rules_context(19).zobrist
    assert int(z9[0, 0]) == 0x18E60EA3ED7E1241 and int(z9[1, 80]) == 0x1E1C86001935E39A
    assert int(z19[0, 0]) == 0x1D9A7DAF3B196343 and int(z19[1, 360]) == 0xC93FE6D092A034DE
    assert not z9.flags.writeable and not rules_context(9).neighbors.flags.writeable
    assert rules_context(9) is rules_context(9)
