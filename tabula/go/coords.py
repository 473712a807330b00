"""Every coordinate system tabula uses, and the conversions between them.

A board has size ``N`` (5..19) and ``M = N*N`` points. The engine, the network and the
search all use the **flat index** ``i = row*N + col``; the other systems exist only at the
edges (GTP for people and engines, SGF for files). Pass is the flat index ``M``, so a policy
over moves has length ``M + 1``.

- **flat**: ``0 .. M-1`` for points, ``M`` for pass; a player that gives up answers
  ``RESIGN`` (-1), which names no point and is never played on a board.
- **(row, col)**: row 0 is the TOP row, col 0 the LEFT column (numpy ``board[row, col]``).
- **GTP**: column letter ``A..T`` skipping ``I``, then the row number counted from the
  BOTTOM (``N - row``); ``"pass"`` for pass. Case-insensitive on input, upper case on output.
- **SGF**: two lower-case letters, column then row, ``'a'`` at the TOP-left; pass is ``""``
  (``"tt"`` is also accepted as pass on boards up to 19x19, the old FF[3] form).

The four corners and pass in each system, for a general ``N`` and for ``N = 9`` / ``N = 19``:

============  ===========  =================  ===========  =========  =======================
point         flat         (row, col)         GTP          SGF        9x9 / 19x19 GTP
============  ===========  =================  ===========  =========  =======================
top-left      0            (0, 0)             A{N}         aa         A9 / A19 (flat 0)
top-right     N-1          (0, N-1)           {last}{N}    {z}a       J9 / T19 (flat 8 / 18)
bottom-left   M-N          (N-1, 0)           A1           a{z}       A1 (flat 72 / 342)
bottom-right  M-1          (N-1, N-1)         {last}1      {z}{z}     J1 / T1 (flat 80 / 360)
pass          M            (none)             pass         "" or tt   pass (flat 81 / 361)
============  ===========  =================  ===========  =========  =======================

where ``{last}`` is the N-th letter of ``ABCDEFGHJKLMNOPQRST`` and ``{z}`` is the N-th letter
of ``abcdefghijklmnopqrs``.
"""

from __future__ import annotations

from tabula.errors import TabulaError

GTP_COLUMNS = "ABCDEFGHJKLMNOPQRST"  # no 'I', by GTP convention (readability on boards)
SGF_LETTERS = "abcdefghijklmnopqrs"
MIN_SIZE = 5
MAX_SIZE = 19
RESIGN = -1  # a player's answer that resigns the game: not a move (pass is M)


class CoordinateError(TabulaError, ValueError):
    """A coordinate that does not name a point (or pass) on the board."""


def check_size(N: int) -> None:
    """Raise ``ValueError`` unless ``N`` is a supported board size (5..19)."""
    if not isinstance(N, int) or isinstance(N, bool) or not MIN_SIZE <= N <= MAX_SIZE:
        raise ValueError(f"board size must be an integer in {MIN_SIZE}..{MAX_SIZE}, got {N!r}")


def to_flat(row: int, col: int, N: int) -> int:
    """(row, col) -> flat index ``row*N + col``. Raises ``CoordinateError`` off the board."""
    if not (0 <= row < N and 0 <= col < N):
        raise CoordinateError(f"(row={row}, col={col}) is off the {N}x{N} board")
    return row * N + col


def from_flat(i: int, N: int) -> tuple[int, int]:
    """Flat index (0..M-1) -> (row, col). Pass (``M``) has no (row, col): ``CoordinateError``."""
    if not 0 <= i < N * N:
        raise CoordinateError(f"flat index {i} is not a point of the {N}x{N} board")
    return divmod(i, N)


def to_gtp(i: int, N: int) -> str:
    """Flat index -> GTP vertex such as ``"D4"``; ``"pass"`` for ``M``."""
    if i == N * N:
        return "pass"
    row, col = from_flat(i, N)
    return f"{GTP_COLUMNS[col]}{N - row}"


def from_gtp(s: str, N: int) -> int:
    """GTP vertex (case-insensitive, or ``"pass"``) -> flat index; ``CoordinateError`` if bad."""
    text = s.strip().upper() if isinstance(s, str) else ""
    if text == "PASS":
        return N * N
    col = GTP_COLUMNS.find(text[:1]) if text else -1
    digits = text[1:]
    if col < 0 or col >= N or not digits.isdigit() or not 1 <= int(digits) <= N:
        raise CoordinateError(
            f"{s!r} is not a vertex of the {N}x{N} board "
            f"(expected A1..{GTP_COLUMNS[N - 1]}{N} without I, or 'pass')"
        )
    return (N - int(digits)) * N + col


def to_sgf(i: int, N: int) -> str:
    """Flat index -> SGF point such as ``"dc"`` (column, row from top-left); ``""`` for pass."""
    if i == N * N:
        return ""
    row, col = from_flat(i, N)
    return SGF_LETTERS[col] + SGF_LETTERS[row]


def from_sgf(s: str, N: int) -> int:
    """SGF point -> flat index; ``""`` (and ``"tt"`` when N <= 19) is pass."""
    if not isinstance(s, str):
        raise CoordinateError(f"{s!r} is not an SGF point")
    if s == "" or (s == "tt" and N <= 19):
        return N * N
    if len(s) != 2:
        raise CoordinateError(f"{s!r} is not an SGF point (two letters, e.g. 'dd')")
    col, row = SGF_LETTERS.find(s[0]), SGF_LETTERS.find(s[1])
    if not (0 <= col < N and 0 <= row < N):
        raise CoordinateError(f"SGF point {s!r} is off the {N}x{N} board")
    return row * N + col
