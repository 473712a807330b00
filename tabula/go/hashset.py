"""An open-addressing set of uint64 position hashes, stored in a plain numpy array.

Used for positional superko: the real game's positions live in one such set, and the
search checks candidate positions against it in O(1). The set is just ``uint64[capacity]``
(capacity a power of two) with ``0`` marking an empty slot, so it can be passed to and
from ``@njit`` code, copied with ``.copy()``, and shared read-only between threads.

Contract:
- A stored hash must be nonzero. Board hashes start from a nonzero constant
  (``board.EMPTY_HASH``), so a zero hash has probability 2**-64; inserting 0 raises.
- Linear probing; keep the load under 1/2 (``hashset_new(n)`` sizes for ``n`` entries at
  load <= 1/2). ``hashset_insert`` raises if the table is completely full.
- ``hashset_remove`` uses backward-shift deletion, so no tombstones are ever needed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Fibonacci hashing multiplier (2**64 / golden ratio): spreads the Zobrist bits, which are
# already random, and keeps nearby integers apart in tests that insert small values.
_MIX = np.uint64(0x9E3779B97F4A7C15)


def hashset_new(n_entries: int) -> np.ndarray:
    """An empty set able to hold ``n_entries`` hashes at load <= 1/2: zeros uint64[2**k]."""
    capacity = 16
    while capacity < 2 * max(int(n_entries), 1):
        capacity *= 2
    return np.zeros(capacity, dtype=np.uint64)


@njit(cache=True, nogil=True)
def hashset_new_njit(n_entries: int) -> np.ndarray:
    """``hashset_new`` for use inside ``@njit`` code."""
    capacity = 16
    while capacity < 2 * max(n_entries, 1):
        capacity *= 2
    return np.zeros(capacity, dtype=np.uint64)


@njit(cache=True, nogil=True, inline="always")
def _slot(table: np.ndarray, h: np.uint64) -> int:
    return int((h * _MIX) >> np.uint64(32)) & (table.shape[0] - 1)


@njit(cache=True, nogil=True)
def hashset_contains(table: np.ndarray, h: np.uint64) -> bool:
    """True if ``h`` is in the set. ``table``: uint64[capacity] from ``hashset_new``."""
    h = np.uint64(h)
    mask = table.shape[0] - 1
    i = _slot(table, h)
    for _ in range(table.shape[0]):
        v = table[i]
        if v == h:
            return True
        if v == 0:
            return False
        i = (i + 1) & mask
    return False


@njit(cache=True, nogil=True)
def hashset_insert(table: np.ndarray, h: np.uint64) -> bool:
    """Add ``h``; True if it was new, False if already present. Raises if full or h == 0."""
    h = np.uint64(h)
    if h == 0:
        raise ValueError("hashset_insert: 0 marks an empty slot and cannot be stored")
    mask = table.shape[0] - 1
    i = _slot(table, h)
    for _ in range(table.shape[0]):
        v = table[i]
        if v == h:
            return False
        if v == 0:
            table[i] = h
            return True
        i = (i + 1) & mask
    raise ValueError("hashset_insert: the table is full (size it with hashset_new)")


@njit(cache=True, nogil=True)
def hashset_remove(table: np.ndarray, h: np.uint64) -> bool:
    """Remove ``h``; True if it was present. Backward-shift deletion keeps probes exact."""
    h = np.uint64(h)
    mask = table.shape[0] - 1
    i = _slot(table, h)
    for _ in range(table.shape[0]):
        v = table[i]
        if v == 0:
            return False
        if v == h:
            break
        i = (i + 1) & mask
    else:
        return False
    # Shift later members of the probe run back into the hole when their home slot allows.
    j = i
    while True:
        j = (j + 1) & mask
        v = table[j]
        if v == 0:
            break
        home = _slot(table, v)
        # v may move to the hole i unless its home lies cyclically in (i, j].
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            table[i] = v
            i = j
    table[i] = 0
    return True


@njit(cache=True, nogil=True)
def hashset_count(table: np.ndarray) -> int:
    """Number of stored hashes (O(capacity))."""
    n = 0
    for v in table:
        if v != 0:
            n += 1
    return n
