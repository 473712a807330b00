"""The training data path: a window of recent self-play positions, sampled uniformly, augmented.

Window (Silver et al. 2017, Methods, "Optimization": mini-batches are "sampled uniformly at random
from all positions of the most recent 500,000 games"): over a list of shard files and folders
(folders are searched recursively for ``*.parquet``), keep

1. the games of the most recent ``window_iterations`` iterations present (None: all), then
2. the most recent ``window_games`` of those (None: all),
3. trimmed further, oldest games first, so that the kept positions fit in ``max_bytes``
   (a warning says so);

and with ``holdout_games`` the newest that-many games of the newest iteration are left out
before all three, as a window of their own to measure the trained network on.

Games are ordered by (iteration, the shard's place in the expanded list, first row in the shard):
within an iteration a later shard counts as more recent. A game is (shard, game_id).

Every listed shard is fully validated (``model.shards.validate_shard``) by ``load_window``,
before the first step: a corrupt, truncated or foreign file raises ``ShardError`` naming it.

Memory: positions stay as they are on disk, planes bit-packed (ceil(17*M/8) bytes, 173 on 9x9)
plus pi (4*(M+1) bytes) and z; only the rows of a batch are unpacked.

Sampling: each batch is ``batch_size`` positions drawn uniformly with replacement, each under a
random one of the 8 dihedral transforms (paper, Methods, "data augmentation"), planes and pi
transformed together (``tabula.features`` index contract). All randomness is drawn in the main
process by ``WindowSampler`` from the seed, so batches do not depend on ``num_workers``; one pass
over the sampler is ``steps`` batches, one Lightning epoch (one training stage).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytorch_lightning as pl
import torch
from numba import njit
from torch.utils.data import DataLoader, Dataset, Sampler

from model.shards import (
    ShardError,
    ShardRecords,
    packed_width,
    read_shard_packed,
    unpack_planes,
    validate_shard,
)
from tabula.errors import TabulaError
from tabula.features import NUM_PLANES, NUM_SYMMETRIES, Inputs, symmetry_permutations
from tabula.inputs import with_inputs

log = logging.getLogger(__name__)

#: Default bound on the in-memory window (packed planes + pi + z).
DEFAULT_MAX_BYTES = 4 << 30


class DataWindowError(TabulaError, ValueError):
    """The data window cannot be built (no shards, a missing path, no positions); one line."""


def find_shards(paths: Sequence[str | Path]) -> list[Path]:
    """Files as given, folders expanded to their ``*.parquet`` files in sorted order."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*.parquet") if f.is_file()))
        elif p.exists():
            out.append(p)
        else:
            raise DataWindowError(f"{p}: no such shard file or folder")
    if not out:
        raise DataWindowError(f"no *.parquet shards in {', '.join(map(str, paths)) or '[]'}")
    return out


def bytes_per_position(board_size: int, aux: bool = False) -> int:
    """In-memory cost of one position in the window: packed planes, pi (float32), z, and with
    ``aux`` the ownership (int8 per point), score and scored flag."""
    M = board_size * board_size
    return packed_width(board_size) + 4 * (M + 1) + 4 + (M + 5 if aux else 0)


@dataclass(frozen=True)
class PositionWindow:
    """The positions of the window, planes still bit-packed.

    ``packed: uint8[P, ceil(17*M/8)]``, ``pi: float32[P, M+1]``, ``z: float32[P]``, the value
    target from the side to move (the result +1/-1/0, or with ``value_target_mix`` lambda,
    (1 - lambda) z + lambda root_value), ``full: bool[P]`` (pi is a policy target: the move had
    the full search; `model.shards`). With auxiliary targets: ``ownership: int8[P, M]``,
    ``score: float32[P]`` (both from the side to move) and ``scored: bool[P]`` (they are
    targets). ``weight: float32[P]``, each row's training weight on every loss (shards of schema
    v4, `model.shards`), None when every row weighs 1. ``shards`` lists every validated shard,
    ``used`` those with rows in it.
    ``latest``: how many of the positions are from the newest iteration's games, and
    ``latest_weight`` their total weight (``latest`` when every row weighs 1);
    ``held_out``: the held-out games' positions (``holdout_games``), None when none are.
    """

    board_size: int
    packed: np.ndarray
    pi: np.ndarray
    z: np.ndarray
    shards: tuple[Path, ...]
    used: tuple[Path, ...]
    games: int
    iterations: tuple[int, ...]
    dropped_games: int = 0
    full: np.ndarray | None = None  # None: every row (the batch then carries no mask)
    ownership: np.ndarray | None = None  # None: no auxiliary targets in the batches
    score: np.ndarray | None = None
    scored: np.ndarray | None = None
    latest: int = 0
    latest_weight: float = 0.0
    held_out: PositionWindow | None = None
    weight: np.ndarray | None = None  # None: every row weighs 1 (the batch then carries none)
    inputs: Inputs = Inputs()  # the derived planes the batches carry after the 17

    def __len__(self) -> int:
        return int(self.z.shape[0])

    def with_inputs(self, inputs: Inputs) -> PositionWindow:
        """This window with the derived planes ``inputs`` names in every batch (`Inputs`), its
        held-out games' too."""
        held = None if self.held_out is None else self.held_out.with_inputs(inputs)
        return replace(self, inputs=inputs, held_out=held)

    def in_order(self, size: int) -> Iterator[tuple[torch.Tensor, ...]]:
        """Every position once, in order, ``size`` at a time, untransformed (`batch`)."""
        for start in range(0, len(self), size):
            yield self.batch(np.arange(start, min(start + size, len(self))))

    def batch(self, rows: np.ndarray, syms: np.ndarray | None = None) -> tuple[torch.Tensor, ...]:
        """``(planes uint8[B,17,N,N], pi float32[B,M+1], z float32[B])`` for ``rows`` (with the
        planes ``inputs`` names after them: derived after the transform, `tabula.inputs`), and
        ``full bool[B]`` after them when some rows of the window are not policy targets or the
        window has auxiliary targets, which follow: ``ownership int8[B, M]``, ``score
        float32[B]``, ``scored bool[B]``. With row weights (``weight``), ``weight float32[B]``
        comes last, after ``full`` (all True when every row is a policy target).

        With ``syms`` (int[B] in 0..7) row b is returned under transform ``syms[b]``: planes, pi
        and ownership are gathered with ``symmetry_permutations(N)[syms[b]]`` (pass entry
        unchanged).
        """
        N, B = self.board_size, len(rows)
        M = N * N
        bits = unpack_planes(self.packed[rows], N).reshape(B, NUM_PLANES * M)
        if syms is None:
            planes, pi = bits, self.pi[rows]
        else:
            planes = np.empty_like(bits)
            pi = np.empty((B, M + 1), dtype=np.float32)
            _gather_symmetries(bits, self.pi, rows, syms, symmetry_permutations(N), planes, pi)
        planes = planes.reshape(B, NUM_PLANES, N, N)
        out = (
            torch.from_numpy(with_inputs(planes, self.inputs)),
            torch.from_numpy(pi),
            torch.from_numpy(self.z[rows]),
        )
        weight = () if self.weight is None else (torch.from_numpy(self.weight[rows]),)
        full = np.ones(B, dtype=bool) if self.full is None else self.full[rows]
        if self.ownership is None or self.score is None or self.scored is None:
            if self.full is None and not weight:
                return out
            return (*out, torch.from_numpy(full), *weight)
        if syms is None:
            owner = self.ownership[rows]
        else:
            owner = np.empty((B, M), dtype=np.int8)
            _gather_points(self.ownership, rows, syms, symmetry_permutations(N), owner)
        aux = (owner, self.score[rows], self.scored[rows])
        return (*out, torch.from_numpy(full), *(torch.from_numpy(a) for a in aux), *weight)


@njit(cache=True, nogil=True)
def _gather_symmetries(
    bits: np.ndarray,
    pi: np.ndarray,
    rows: np.ndarray,
    syms: np.ndarray,
    perm: np.ndarray,
    planes_out: np.ndarray,
    pi_out: np.ndarray,
) -> None:
    """planes_out[b, c*M + j] = bits[b, c*M + perm[syms[b], j]] and pi_out[b] = pi[rows[b]]
    gathered the same way: one pass instead of numpy's slow per-element fancy indexing."""
    M = perm.shape[1] - 1
    C = planes_out.shape[1] // M
    for b in range(bits.shape[0]):
        p = perm[syms[b]]
        for c in range(C):
            base = c * M
            for j in range(M):
                planes_out[b, base + j] = bits[b, base + p[j]]
        r = rows[b]
        for j in range(M + 1):
            pi_out[b, j] = pi[r, p[j]]


@njit(cache=True, nogil=True)
def _gather_points(
    values: np.ndarray, rows: np.ndarray, syms: np.ndarray, perm: np.ndarray, out: np.ndarray
) -> None:
    """out[b, j] = values[rows[b], perm[syms[b], j]] for the board points j (as pi's)."""
    M = out.shape[1]
    for b in range(out.shape[0]):
        p = perm[syms[b]]
        r = rows[b]
        for j in range(M):
            out[b, j] = values[r, p[j]]


def _game_table(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per game of one shard, by first appearance: (iteration, first row, row -> game index)."""
    table = pq.read_table(path, columns=["iteration", "game_id"])
    iteration = table.column("iteration").to_numpy()
    game_id = table.column("game_id").to_numpy(zero_copy_only=False).astype(np.str_)
    _, first, inverse = np.unique(game_id, return_index=True, return_inverse=True)
    # np.unique sorts by id; renumber games by first appearance so row order defines recency.
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return iteration[first[order]], first[order], rank[inverse]


def _game_keys(games: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
    """(iteration, shard index, first row) of every game, shard after shard: int64[G, 3]."""
    return np.concatenate(
        [np.stack([it, np.full_like(it, s), first], 1) for s, (it, first, _) in enumerate(games)]
    ).astype(np.int64)


def _split(
    games: list[tuple[np.ndarray, np.ndarray, np.ndarray]], mask: np.ndarray
) -> list[np.ndarray]:
    """A mask over every game (`_game_keys`' order) as one mask per shard."""
    return np.split(mask, np.cumsum([len(g[0]) for g in games])[:-1])


def _held_out(games: list[tuple[np.ndarray, np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """A bool mask over every game (`_game_keys`' order): the ``n`` newest games of the newest
    iteration, newest by the window's order (module docstring)."""
    keys = _game_keys(games)
    held = np.zeros(len(keys), dtype=bool)
    if n > 0:
        newest = np.flatnonzero(keys[:, 0] == keys[:, 0].max())
        order = newest[np.lexsort((keys[newest, 2], keys[newest, 1]))]  # oldest first
        held[order[-n:]] = True
    return held


def _select_games(
    games: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    window_games: int | None,
    window_iterations: int | None,
    held: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Per shard, a bool mask over its games: inside the window (before the memory bound),
    the ``held`` ones (`_held_out`) left out."""
    keys = _game_keys(games)
    keep = np.ones(len(keys), dtype=bool) if held is None else ~held
    if window_iterations is not None:
        recent = np.unique(keys[:, 0])[-window_iterations:]
        keep &= np.isin(keys[:, 0], recent)
    order = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))  # oldest first
    if window_games is not None:
        kept = order[keep[order]]
        keep[kept[: max(len(kept) - window_games, 0)]] = False
    return _split(games, keep)


def _bound_memory(
    games: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    masks: list[np.ndarray],
    max_positions: int,
) -> int:
    """Drop the oldest kept games (in place in ``masks``) until at most ``max_positions`` rows
    remain; returns how many games were dropped."""
    sizes = [np.bincount(inv, minlength=len(it)) for it, _, inv in games]
    keys, size, where = [], [], []
    for s, ((it, first, _), n, m) in enumerate(zip(games, sizes, masks, strict=True)):
        idx = np.flatnonzero(m)
        keys.append(np.stack([it[idx], np.full(len(idx), s), first[idx]], 1))
        size.append(n[idx])
        where.append(np.stack([np.full(len(idx), s), idx], 1))
    k, n, w = np.concatenate(keys), np.concatenate(size), np.concatenate(where)
    order = np.lexsort((k[:, 2], k[:, 1], k[:, 0]))[::-1]  # newest first
    fits = np.cumsum(n[order]) <= max_positions
    drop = w[order[~fits]]
    for s, g in drop:
        masks[s][g] = False
    return len(drop)


def _read_rows(
    files: list[Path], rows: list[np.ndarray], board_size: int, aux: bool = False
) -> tuple[np.ndarray, ...]:
    """(packed, pi, z, full, root_value, ownership, score, scored, weight) of the selected
    ``rows`` (a bool mask per file), in file order; ownership, score and scored empty unless
    ``aux``."""
    total = int(sum(r.sum() for r in rows))
    M = board_size * board_size
    packed = np.empty((total, packed_width(board_size)), dtype=np.uint8)
    pi = np.empty((total, M + 1), dtype=np.float32)
    z = np.empty(total, dtype=np.float32)
    full = np.empty(total, dtype=bool)
    root_value = np.empty(total, dtype=np.float32)
    weight = np.empty(total, dtype=np.float32)
    kept = total if aux else 0
    ownership = np.empty((kept, M), dtype=np.int8)
    score = np.empty(kept, dtype=np.float32)
    scored = np.empty(kept, dtype=bool)
    at = 0
    for f, r in zip(files, rows, strict=True):
        if not r.any():
            continue
        shard = read_shard_packed(f, expect_board_size=board_size)
        if len(shard) != len(r):
            raise ShardError(f"{f}: changed while the data window was being read")
        n = int(r.sum())
        packed[at : at + n] = shard.packed_planes[r]
        pi[at : at + n] = shard.pi[r]
        z[at : at + n] = shard.z[r]
        full[at : at + n] = shard.full_search[r]
        root_value[at : at + n] = shard.root_value[r]
        weight[at : at + n] = shard.weight[r]
        if aux:
            ownership[at : at + n] = shard.ownership[r]
            score[at : at + n] = shard.score[r]
            scored[at : at + n] = shard.scored[r]
        at += n
    return packed, pi, z, full, root_value, ownership, score, scored, weight


def load_window(
    paths: Sequence[str | Path],
    board_size: int,
    *,
    window_games: int | None = None,
    window_iterations: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    value_target_mix: float = 0.0,
    aux: bool = False,
    holdout_games: int = 0,
) -> PositionWindow:
    """Validate every shard under ``paths``, then load the window (module docstring) packed.
    value_target_mix: lambda of the value target (1 - lambda) z + lambda root_value; aux: load
    the ownership and score targets too; holdout_games: leave the newest that-many games of the
    newest iteration out, loaded as the window's ``held_out``.

    Raises ``ShardError`` naming the first bad shard (nothing is loaded before all pass) and
    ``DataWindowError`` when there is nothing to train on.
    """
    files = find_shards(paths)
    for f in files:
        validate_shard(f, expect_board_size=board_size)
    games = [_game_table(f) for f in files]
    held = _held_out(games, holdout_games)
    masks = _select_games(games, window_games, window_iterations, held)
    dropped = _bound_memory(games, masks, max_bytes // bytes_per_position(board_size, aux))
    if dropped:
        log.warning(
            "data window trimmed: %d oldest games dropped to stay within %d bytes",
            dropped,
            max_bytes,
        )
    if not any(m.any() for m in masks):
        raise DataWindowError(f"the data window holds no positions ({len(files)} shards)")
    read = (files, games, board_size, value_target_mix, aux)
    window = _positions(*read, masks, dropped)
    if held.any():
        window = replace(window, held_out=_positions(*read, _split(games, held)))
    return window


def _positions(
    files: list[Path],
    games: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    board_size: int,
    value_target_mix: float,
    aux: bool,
    masks: list[np.ndarray],
    dropped: int = 0,
) -> PositionWindow:
    """The positions of the games ``masks`` selects (one bool mask per shard's games)."""
    rows = [m[inv] for (_, _, inv), m in zip(games, masks, strict=True)]
    packed, pi, z, full, root_value, ownership, score, scored, weight = _read_rows(
        files, rows, board_size, aux
    )
    if value_target_mix > 0:
        z = ((1.0 - value_target_mix) * z + value_target_mix * root_value).astype(np.float32)
    kept = [(f, g[0][m]) for f, g, m in zip(files, games, masks, strict=True) if m.any()]
    newest = max(int(it.max(initial=0)) for it, _, _ in games)
    latest = np.concatenate(  # the rows read that are of the newest iteration's games
        [(it == newest)[inv][m[inv]] for (it, _, inv), m in zip(games, masks, strict=True)]
    )
    return PositionWindow(
        board_size=board_size,
        packed=packed,
        pi=pi,
        z=z,
        shards=tuple(files),
        used=tuple(f for f, _ in kept),
        games=int(sum(m.sum() for m in masks)),
        iterations=tuple(sorted({int(i) for _, its in kept for i in its})),
        dropped_games=dropped,
        full=None if full.all() else full,
        ownership=ownership if aux else None,
        score=score if aux else None,
        scored=scored if aux else None,
        latest=int(latest.sum()),
        latest_weight=float(weight[latest].sum(dtype=np.float64)),
        weight=None if (weight == 1.0).all() else weight,
    )


def synthetic_records(
    board_size: int, games: int, moves: int, seed: int, iteration: int = 0, prefix: str = "g"
) -> ShardRecords:
    """Random but schema-valid positions (for tests and benchmarks): ``games`` games of
    ``moves`` positions, random stone planes, a colour plane matching ``to_play``, pi from a
    Dirichlet(0.3), z = +-1 per game flipping with the side to move."""
    rng = np.random.default_rng(seed)
    R, M = games * moves, board_size * board_size
    move_number = np.tile(np.arange(moves, dtype=np.int32), games)
    to_play = np.where(move_number % 2 == 0, 1, -1).astype(np.int8)
    planes = (rng.random((R, NUM_PLANES, board_size, board_size)) < 0.3).astype(np.uint8)
    planes[:, NUM_PLANES - 1] = (to_play == 1)[:, None, None]
    winner = np.repeat(rng.choice([-1, 1], games), moves)
    return ShardRecords(
        planes=planes,
        pi=rng.dirichlet(np.full(M + 1, 0.3), R).astype(np.float32),
        z=(winner * to_play).astype(np.float32),
        to_play=to_play,
        game_id=np.repeat([f"{prefix}{i}" for i in range(games)], moves).astype(np.str_),
        move_number=move_number,
        iteration=np.full(R, iteration, dtype=np.int32),
        model_id=np.full(R, "synthetic").astype(np.str_),
        resign_disabled=np.zeros(R, dtype=bool),
    )


class WindowSampler(Sampler[tuple[np.ndarray, np.ndarray | None]]):
    """Yields ``steps`` items ``(rows int64[B], syms int64[B] | None)`` per pass.

    Rows are uniform with replacement over ``num_positions``, or, with ``frequency`` (one
    weight per position, not all 0), drawn with replacement in proportion to it; syms uniform
    over the 8 transforms (None when ``augment`` is off). Every pass restarts from ``seed``.
    """

    def __init__(
        self,
        num_positions: int,
        batch_size: int,
        steps: int,
        seed: int,
        augment: bool = True,
        frequency: np.ndarray | None = None,
    ) -> None:
        self.num_positions, self.batch_size, self.steps = num_positions, batch_size, steps
        self.seed, self.augment = seed, augment
        self.cdf = None if frequency is None else np.cumsum(frequency, dtype=np.float64)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        rng = np.random.default_rng(self.seed)
        for _ in range(self.steps):
            if self.cdf is None:
                rows = rng.integers(0, self.num_positions, self.batch_size)
            else:  # row r is drawn when u falls in [cdf[r - 1], cdf[r]): never at weight 0
                u = rng.random(self.batch_size) * self.cdf[-1]
                rows = np.searchsorted(self.cdf, u, side="right").clip(max=len(self.cdf) - 1)
            syms = rng.integers(0, NUM_SYMMETRIES, self.batch_size) if self.augment else None
            yield rows, syms


class WindowDataset(Dataset):
    """Map-style dataset whose items are whole batches: ``ds[(rows, syms)]`` -> a batch."""

    def __init__(self, window: PositionWindow) -> None:
        self.window = window

    def __len__(self) -> int:
        return len(self.window)

    def __getitem__(self, item: tuple[np.ndarray, np.ndarray | None]):  # noqa: ANN204
        rows, syms = item
        return self.window.batch(rows, syms)


class ShardDataModule(pl.LightningDataModule):
    """A loaded window (`load_window`) as ``steps`` batches of ``batch_size``, one epoch.

    The window is chosen, and the steps sized to it, before the DataModule exists, so that
    every shard is validated and the stage's length known before anything else happens.
    Batches: ``(planes uint8[B,17,N,N], pi float32[B,M+1], z float32[B])`` and, when some
    positions are not policy targets, ``full bool[B]`` (`PositionWindow.batch`); the window's
    ``held_out`` games are never in a batch. With ``frequency_weights`` the rows' weights set
    how often each is drawn (`WindowSampler`), and every row weighs 1 in the losses.
    """

    def __init__(
        self,
        window: PositionWindow,
        batch_size: int,
        steps: int,
        seed: int,
        *,
        augment: bool = True,
        num_workers: int = 0,
        frequency_weights: bool = False,
    ) -> None:
        super().__init__()
        self.window = window
        self.batch_size, self.steps, self.seed = batch_size, steps, seed
        self.augment, self.num_workers = augment, num_workers
        self.frequency_weights = frequency_weights

    def train_dataloader(self) -> DataLoader:
        window, frequency = self.window, None
        if self.frequency_weights and window.weight is not None:
            window, frequency = replace(window, weight=None), window.weight
        sampler = WindowSampler(
            len(window), self.batch_size, self.steps, self.seed, self.augment, frequency
        )
        # batch_size=None: each sampler item is a whole batch, built vectorised by the dataset.
        return DataLoader(
            WindowDataset(window),
            batch_size=None,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=False,
        )
