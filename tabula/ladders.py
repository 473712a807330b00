"""Ladders: which chains a ladder captures, and which moves start one (numba kernels).

A ladder is the chase in which the attacker keeps the defender's chain in atari until it runs
into the edge or the attacker's stones. Reading one takes many moves in a straight diagonal
line, which a small network sees only as far as its convolutions reach: KataGo feeds the
result of a ladder search to its network (Wu 2019, "Accelerating Self-Play Learning in Go",
section 4.1, its "ladder" input features). These kernels give the same kind of answer for the
optional ladder planes of `tabula.features`.

The search (``_captured``) is a depth-first AND-OR search over flat boards (`tabula.go`):

- the defender, to move with its chain in atari, may extend at the chain's liberty or capture
  an attacker's chain in atari next to it; a move that leaves the chain 3 or more liberties
  escapes, one that leaves it 1 or none is captured;
- the attacker, to move with the chain at 2 liberties, may play at either of them; only a
  move that leaves the chain in atari keeps the ladder going.

The chain is captured when every defender move is (AND), and the attacker succeeds when one of
its moves does (OR). A move that repeats a position of the line read so far is not tried
(positional superko along the line; the game's earlier positions are not known here). A
line that reaches ``LADDER_DEPTH`` moves counts as escaped, and so does the whole search once
it has visited ``LADDER_NODES`` positions: an answer of "captured" is always one the search
read to the end.

``fill_ladder_planes`` writes, from the side to move's view and for the position now:

- plane 0: the side to move's stones in a chain a ladder captures;
- plane 1: the opponent's, likewise;
- plane 2: the side to move's moves that start a ladder capturing an opponent's chain of 2
  liberties.

A chain in atari is read with its owner to move (it is captured if it cannot run even moving
first); a chain of 2 liberties with the attacker to move.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tabula.go.board import board_hash, play_move, rules_context

#: Positions one search may visit before it counts the chain as escaped.
LADDER_NODES = 300
#: Moves one line of a search may read before it counts as escaped.
LADDER_DEPTH = 48


@njit(cache=True, nogil=True)
def _chain(board, start, nbr, mark, stamp, stack, libs) -> tuple[int, int]:
    """Flood the chain at ``start``: ``(stones, liberties)``, the stones in
    ``stack[:stones]`` and up to 3 distinct liberties in ``libs`` (the count is exact up to 3
    and capped there). ``mark == stamp`` flags visited points and counted liberties; a stamp
    is used once (``_stamp``)."""
    color = board[start]
    stack[0] = start
    mark[start] = stamp
    n, top, nlibs = 1, 0, 0
    while top < n:
        p = stack[top]
        top += 1
        for k in range(4):
            q = nbr[p, k]
            if q < 0 or mark[q] == stamp:
                continue
            v = board[q]
            if v == color:
                mark[q] = stamp
                stack[n] = q
                n += 1
            elif v == 0:
                mark[q] = stamp
                if nlibs < 3:
                    libs[nlibs] = q
                nlibs += 1
    return n, min(nlibs, 3)


@njit(cache=True, nogil=True, inline="always")
def _stamp(stamps) -> int:
    """A fresh stamp for ``_chain`` (the marks are never cleared, so stamps only grow)."""
    stamps[0] += 1
    return stamps[0]


@njit(cache=True, nogil=True)
def _empty_around(board, p, nbr, taken=-1) -> int:
    """How many points around ``p`` are empty, ``taken`` (a point the attacker has just
    played, or -1) left out."""
    n = 0
    for k in range(4):
        q = nbr[p, k]
        if q >= 0 and q != taken and board[q] == 0:
            n += 1
    return n


@njit(cache=True, nogil=True)
def _defender_moves(board, target, nbr, scratch, moves) -> int:
    """The defender's tries with its chain at ``target`` in atari: the liberties of the
    attacker's chains in atari next to it (captures), then the chain's own liberty."""
    mark, stamps, stones, stack, libs = scratch[0], scratch[1], scratch[2], scratch[3], scratch[4]
    base = _stamp(stamps)
    n, nlibs = _chain(board, target, nbr, mark, base, stones, libs)
    own = libs[0]
    color = board[target]
    count = 0
    for j in range(n):
        for k in range(4):
            q = nbr[stones[j], k]
            if q < 0 or board[q] != -color or mark[q] > base:
                continue  # not the attacker's, or a chain of it read already
            if _chain(board, q, nbr, mark, _stamp(stamps), stack, libs)[1] != 1:
                continue
            move = libs[0]
            for i in range(count):
                if moves[i] == move:
                    move = -1
            if move >= 0 and count < moves.shape[0] - 1:
                moves[count] = move
                count += 1
    if nlibs == 1:
        moves[count] = own
        count += 1
    return count


@njit(cache=True, nogil=True)
def _attacker_moves(board, target, nbr, mark, stamps, stack, libs, moves) -> int:
    """The attacker's tries with the chain at ``target`` at 2 liberties: both, first the one
    that leaves the defender's other liberty the fewer empty points around it (the ladder's
    usual atari). 0 when the chain does not have exactly 2 liberties."""
    if _chain(board, target, nbr, mark, _stamp(stamps), stack, libs)[1] != 2:
        return 0
    a, b = libs[0], libs[1]
    if _empty_around(board, b, nbr) > _empty_around(board, a, nbr):
        a, b = b, a  # an atari at a leaves the defender b
    moves[0], moves[1] = a, b
    return 2


@njit(cache=True, nogil=True)
def _tries(board, target, defends, nbr, scratch, moves) -> int:
    """The moves to try from ``board``: the defender's (``defends``) or the attacker's."""
    if defends:
        return _defender_moves(board, target, nbr, scratch, moves)
    mark, stamps, stack, libs = scratch[0], scratch[1], scratch[3], scratch[4]
    return _attacker_moves(board, target, nbr, mark, stamps, stack, libs, moves)


@njit(cache=True, nogil=True)
def _repeats(hashes, d, h) -> bool:
    """Whether ``h`` is one of the read line's positions so far (``hashes[: d + 1]``)."""
    for i in range(d + 1):
        if hashes[i] == h:
            return True
    return False


@njit(cache=True, nogil=True)
def _scratch(M: int):
    """The buffers of ``_captured`` and ``_fill_one``, made once for a batch of positions."""
    D = LADDER_DEPTH
    return (
        np.zeros(M, np.int64),  # mark (stamped by _chain)
        np.zeros(1, np.int64),  # the last stamp
        np.empty(M, np.int32),  # the read chain's stones
        np.empty(M, np.int32),  # a flood's stack
        np.empty(3, np.int64),  # a chain's first liberties
        np.empty((D + 1, M), np.int8),  # the read line's boards
        np.empty((D + 1, 6), np.int64),  # each depth's tries
        np.zeros(D + 1, np.int64),  # how many tries
        np.zeros(D + 1, np.int64),  # how many tried
        np.zeros(D + 1, np.bool_),  # the defender is to move
        np.empty(D + 1, np.uint64),  # the read line's hashes
    )


@njit(cache=True, nogil=True)
def _captured(board, target, defender_to_move, nbr, zob, scratch) -> bool:
    """Whether the chain at ``target`` is captured from ``board``, with the defender to move
    (its chain in atari) or the attacker to move (its chain at 2 liberties): the module
    docstring's search, depth first on a stack of its own (numba cannot cache a function that
    calls itself)."""
    mark, stamps, _, stack, libs, boards, moves, tries, tried, defends, hashes = scratch
    D = LADDER_DEPTH
    color = board[target]
    boards[0] = board
    hashes[0] = board_hash(board, zob)
    defends[0] = defender_to_move
    tried[0] = 0
    tries[0] = _tries(boards[0], target, defender_to_move, nbr, scratch, moves[0])
    d, nodes = 0, 1
    while True:
        verdict = -1  # of the node at depth d: 1 captured, 0 escaped, -1 not known yet
        if tried[d] == tries[d]:
            verdict = 1 if defends[d] else 0  # every defence failed, or no atari held
        else:
            move = moves[d, tried[d]]
            tried[d] += 1
            after = boards[d + 1]
            mover = color if defends[d] else -color
            ok, h = play_move(boards[d], move, mover, nbr, zob, hashes[d], after)
            if not ok or after[target] != color or _repeats(hashes, d, h):
                continue
            n = _chain(after, target, nbr, mark, _stamp(stamps), stack, libs)[1]
            if defends[d]:
                if n >= 3:
                    verdict = 0
                elif n <= 1:
                    continue  # captured after this try: the defender tries its next
            elif n != 1:
                continue  # not an atari: the ladder does not go on this way
            if verdict < 0 and d + 1 == D:  # read too deep: this line counts as escaped
                if not defends[d]:
                    continue
                verdict = 0
            if verdict < 0:
                nodes += 1
                if nodes > LADDER_NODES:
                    return False  # read too long: counted as escaped
                d += 1
                hashes[d] = h
                defends[d] = not defends[d - 1]
                tried[d] = 0
                tries[d] = _tries(after, target, defends[d], nbr, scratch, moves[d])
                continue
        while verdict >= 0:  # hand the node's verdict to its parent
            if d == 0:
                return verdict == 1
            d -= 1
            if defends[d] == (verdict == 1):
                verdict = -1  # not decided by this child: the parent tries its next move


@njit(cache=True, nogil=True)
def _escapes_at(board, p, taken, nbr) -> bool:
    """Whether a chain whose one liberty is ``p`` (once the attacker has played at ``taken``,
    or -1) is sure to have 3 or more liberties after it extends there: 3 points around ``p``
    other than ``taken`` are empty (a read would stop at once)."""
    return _empty_around(board, p, nbr, taken) >= 3


@njit(cache=True, nogil=True)
def _fill_one(board, nbr, zob, scratch, seen, chain, after, out) -> None:
    """The ladder planes of one position (``board``: +1 the side to move's stones, -1 the
    opponent's) into ``out`` (uint8[3, N, N], zeroed)."""
    mark, stamps, _, stack, libs = scratch[0], scratch[1], scratch[2], scratch[3], scratch[4]
    M, N = board.shape[0], out.shape[1]
    seen[:] = False
    for start in range(M):
        if board[start] == 0 or seen[start]:
            continue
        n, nlibs = _chain(board, start, nbr, mark, _stamp(stamps), chain, libs)
        for j in range(n):
            seen[chain[j]] = True  # a chain is read once
        if nlibs == 0 or nlibs >= 3:
            continue
        first, second = libs[0], libs[1]
        color = board[start]
        laddered = False
        if nlibs == 1:
            if not _escapes_at(board, first, -1, nbr):
                laddered = _captured(board, start, True, nbr, zob, scratch)
        elif _escapes_at(board, first, second, nbr) and _escapes_at(board, second, first, nbr):
            pass  # an atari at either liberty leaves the other one 3 empty points around it
        elif color > 0:
            laddered = _captured(board, start, False, nbr, zob, scratch)
        else:  # the opponent's chain of 2 liberties: which of our ataris capture it
            for move, other in ((first, second), (second, first)):
                if _escapes_at(board, other, move, nbr):
                    continue
                ok, _ = play_move(board, move, 1, nbr, zob, np.uint64(0), after)
                if not ok or after[start] != color:
                    continue
                if _chain(after, start, nbr, mark, _stamp(stamps), stack, libs)[1] != 1:
                    continue
                if _captured(after, start, True, nbr, zob, scratch):
                    laddered = True
                    out[2, move // N, move % N] = 1
        if laddered:
            level = 0 if color > 0 else 1
            for j in range(n):
                out[level, chain[j] // N, chain[j] % N] = 1


@njit(cache=True, nogil=True)
def _fill(planes, nbr, zob, out) -> None:
    B, N = planes.shape[0], planes.shape[2]
    M = N * N
    board = np.empty(M, np.int8)
    scratch = _scratch(M)
    seen = np.zeros(M, np.bool_)
    chain = np.empty(M, np.int32)
    after = np.empty(M, np.int8)
    out[:] = 0
    for b in range(B):
        for r in range(N):
            for c in range(N):
                ours, theirs = planes[b, 0, r, c], planes[b, 8, r, c]
                board[r * N + c] = 1 if ours else (-1 if theirs else 0)
        _fill_one(board, nbr, zob, scratch, seen, chain, after, out[b])


def fill_ladder_planes(planes: np.ndarray, out: np.ndarray) -> None:
    """Write the 3 ladder planes of each position of ``planes`` (uint8[B, >= 9, N, N], planes 0
    and 8 its stones now, from the side to move's view) into ``out`` (uint8[B, 3, N, N]): the
    module docstring's planes."""
    ctx = rules_context(planes.shape[2])
    _fill(planes, ctx.neighbors, ctx.zobrist, out)
