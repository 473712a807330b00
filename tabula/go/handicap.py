"""Handicap stones where GTP 2 puts them (``fixed_handicap``, section 4.1.1 of the spec, as its
reference implementation GNU Go 3.8 places them), and the strings of a board (what
``final_status_list`` lists, one string a line).

The fixed pattern uses the star points on the third line (boards up to 11x11) or the fourth
(12x12 and larger): up to 9 stones on odd boards from 9x9, up to 4 on 7x7 and even boards from
8x8, none below 7x7. The stones in the order they are added (GTP coordinates, 19x19)::

    2  D4 Q16                  6  the four corners, D10 Q10 (left and right sides)
    3  D4 Q16 D16              7  the six of 6, K10
    4  D4 Q16 D16 Q4           8  the four corners, D10 Q10 K4 K16 (all four sides)
    5  the four corners, K10   9  the eight of 8, K10 (the centre)
"""

from __future__ import annotations

import numpy as np

from tabula.go.coords import to_flat

#: The pattern of n = 2..9 stones: (row, col) as low/middle/high lines, 0/1/2; row 0 the
#: bottom line's side (GTP row numbers grow upwards).
_PATTERN = (
    ("00", "22"),
    ("00", "22", "20"),
    ("00", "22", "20", "02"),
    ("00", "22", "20", "02", "11"),
    ("00", "22", "20", "02", "10", "12"),
    ("00", "22", "20", "02", "10", "12", "11"),
    ("00", "22", "20", "02", "10", "12", "01", "21"),
    ("00", "22", "20", "02", "10", "12", "01", "21", "11"),
)


def max_fixed_handicap(size: int) -> int:
    """The most stones ``fixed_handicap`` places on a ``size`` x ``size`` board."""
    if size < 7:
        return 0
    return 9 if size % 2 == 1 and size >= 9 else 4


def fixed_handicap(stones: int, size: int) -> list[int]:
    """The flat points of ``stones`` fixed handicap stones (spec order, see the module);
    ValueError when the board has no such pattern (fewer than 2, more than
    `max_fixed_handicap`)."""
    if not 2 <= stones <= max_fixed_handicap(size):
        raise ValueError(f"no fixed handicap of {stones} stones on {size}x{size}")
    edge = 2 if size < 12 else 3
    line = {"0": edge, "1": (size - 1) // 2, "2": size - 1 - edge}
    # A GTP row counted from the bottom is board row size-1-r (row 0 is the top).
    return [to_flat(size - 1 - line[rc[0]], line[rc[1]], size) for rc in _PATTERN[stones - 2]]


def strings(board: np.ndarray) -> list[list[int]]:
    """The strings (maximal connected same-colour stones) of an N x N board, each as its flat
    points in increasing order, ordered by their first point."""
    N = board.shape[0]
    flat = board.reshape(-1)
    seen = np.zeros(N * N, dtype=bool)
    found = []
    for start in np.flatnonzero(flat):
        if seen[start]:
            continue
        colour, stack, members = flat[start], [int(start)], []
        seen[start] = True
        while stack:
            p = stack.pop()
            members.append(p)
            r, c = divmod(p, N)
            for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
                q = rr * N + cc
                if 0 <= rr < N and 0 <= cc < N and not seen[q] and flat[q] == colour:
                    seen[q] = True
                    stack.append(q)
        found.append(sorted(members))
    return found
