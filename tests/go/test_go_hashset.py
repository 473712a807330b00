"""The uint64 open-addressing hash set, against Python's set."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tabula.go.hashset import (
    hashset_contains,
    hashset_count,
    hashset_insert,
    hashset_new,
    hashset_remove,
)

# Small values collide a lot in a 16-slot table, which exercises probing and deletion.
values = st.integers(min_value=1, max_value=40) | st.integers(min_value=1, max_value=2**64 - 1)
ops = st.lists(st.tuples(st.booleans(), values), max_size=200)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_behaves_like_a_python_set(operations: list[tuple[bool, int]]) -> None:
    table = hashset_new(8)  # 16 slots; the model keeps at most 8 entries
    model: set[int] = set()
    for insert, v in operations:
        h = np.uint64(v)
        if insert and len(model) < 8:
            assert hashset_insert(table, h) == (v not in model)
            model.add(v)
        elif not insert:
            assert hashset_remove(table, h) == (v in model)
            model.discard(v)
        assert hashset_count(table) == len(model)
    for v in range(1, 41):
        assert hashset_contains(table, np.uint64(v)) == (v in model)
    assert all(hashset_contains(table, np.uint64(v)) for v in model)


def test_sizes_are_powers_of_two_at_half_load() -> None:
    for n in [1, 8, 9, 163, 723]:
        t = hashset_new(n)
        assert t.dtype == np.uint64 and t.shape[0] >= 2 * n and t.shape[0] & (t.shape[0] - 1) == 0


def test_zero_and_a_full_table_are_refused() -> None:
    table = hashset_new(1)
    with pytest.raises(ValueError):
        hashset_insert(table, np.uint64(0))
    for v in range(1, table.shape[0] + 1):
        hashset_insert(table, np.uint64(v))
    with pytest.raises(ValueError, match="full"):
        hashset_insert(table, np.uint64(10_000))
