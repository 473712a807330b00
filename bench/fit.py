"""Over- or under-fitting along a finished run: each network on its window and on unseen games.

Usage: ``python -m bench.fit --project DIR --run NAME [--points 8] [--positions 8192]
[--json PATH]``

A network that fits its training window much better than fresh games of the same kind is
over-fitting (its window too small, or its rows trained on too often); one that fits both
alike has room to learn more from the same data (a bigger network, or more steps). This
benchmark asks that of a finished tabula run without retraining anything. For ``--points``
iterations ``i`` spread over the run, iteration ``i``'s network (``iter-NNNN/model/model.pt``)
is scored, in eval mode and with training's loss definitions
(`model.system.AlphaZeroSystem.held_out_losses`), the value against the game's result z alone
(training may mix the root value into it, `training.value_target_mix`, but the root value comes
from the network's own search, and so would flatter it on its own games), on

- **its window**: ``--positions`` positions drawn (seeded) from the data window it was trained
  on, chosen as training chooses it (the run's ``training.window_games`` and
  ``window_iterations`` over the self-play of iterations ``1..i``);
- **the next games**: ``--positions`` positions of iteration ``i + 1``'s self-play, which that
  network played and never trained on.

The next games come from a slightly stronger player than most of the window, and their policy
targets from the very network scored (its search's improved policy), so the policy gap leans
towards the next games for that reason alone. The value against z is the cleaner test: z is
the game's result, and the value is the term that over-fits first in Go (Silver et al. 2016
drew one position a game for that reason). ``training.holdout_games`` measures the same
inside a run, on games of the newest iteration left out of its training, and logs it to
MLflow.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.runs import add_run_arguments, champion_iteration, run_layout
from model.checkpoint import load_checkpoint
from model.datamodule import PositionWindow, load_window
from model.files import write_json
from model.system import AlphaZeroSystem, Objective
from tabula.config import load_config
from tabula.config.models import Config
from tasks.run.layout import RunLayout

#: Positions a loss is measured on at once (`AlphaZeroSystem.held_out_losses` batches).
BATCH = 1024


def sample(window: PositionWindow, n: int, seed: int) -> PositionWindow:
    """``n`` of the window's positions drawn without replacement (all of them when it has no
    more), in their order, as a window of their own."""
    rows = np.arange(len(window))
    if len(window) > n:
        rows = np.sort(np.random.default_rng(seed).choice(len(window), n, replace=False))

    def pick(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[rows]

    return replace(window, packed=window.packed[rows], pi=window.pi[rows], z=window.z[rows],
                   full=pick(window.full), ownership=pick(window.ownership),
                   score=pick(window.score), scored=pick(window.scored))  # fmt: skip


def fit_at(layout: RunLayout, cfg: Config, i: int, positions: int) -> dict[str, Any]:
    """Iteration ``i``'s network on ``positions`` of its window and of iteration ``i + 1``'s
    self-play: each loss term, and the number of positions and games each was measured on."""
    net, metadata = load_checkpoint(layout.model(i), expect_board_size=cfg.rules.board_size)
    t = cfg.training
    objective = Objective(
        ownership_weight=t.ownership_weight,
        score_weight=t.score_weight,
        fast_row_weight=t.fast_row_weight,
        weight_decay=t.weight_decay,
    )
    system = AlphaZeroSystem(net.shape, objective)
    system.net.load_state_dict(net.state_dict())
    size, aux = cfg.rules.board_size, cfg.network.aux_heads
    # value_target_mix 0: the value scored against z alone
    seen = load_window([layout.selfplay(j) for j in range(1, i + 1)], size,
                       window_games=t.window_games, window_iterations=t.window_iterations,
                       value_target_mix=0.0, aux=aux)  # fmt: skip
    fresh = load_window([layout.selfplay(i + 1)], size, value_target_mix=0.0, aux=aux)
    # (the network's inputs, as training gave them)
    seen, fresh = seen.with_inputs(net.shape.inputs), fresh.with_inputs(net.shape.inputs)
    out: dict[str, Any] = {"iteration": i, "global_step": int(metadata.get("global_step", 0))}
    for name, window in (("window", seen), ("next", fresh)):
        drawn = sample(window, positions, seed=i)
        terms = system.held_out_losses(drawn.in_order(BATCH))
        out[name] = {"positions": len(drawn), "games": window.games, **terms}
    return out


def points(last: int, n: int) -> list[int]:
    """``n`` iterations spread evenly over ``1..last - 1`` (each needs a next), the last kept."""
    if last < 2:
        return []
    return sorted({int(round(x)) for x in np.linspace(1, last - 1, min(n, last - 1))})


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fit", description=__doc__.splitlines()[0]
    )
    add_run_arguments(parser)
    parser.add_argument("--points", type=int, default=8, help="iterations measured")
    parser.add_argument("--positions", type=int, default=8192, help="positions per loss")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    layout = run_layout(args)
    best = champion_iteration(parser, layout)  # the last iteration that trained
    if args.points < 1 or args.positions < 1:
        parser.error("--points and --positions must be at least 1")
    last = max(i for i in range(1, best + 1) if layout.selfplay(i).exists())
    chosen = points(last, args.points)
    if not chosen:
        parser.error(f"--run {args.run}: needs two iterations of self-play, has {last}")
    cfg = load_config(layout.params)
    rows = []
    for i in chosen:
        rows.append(fit_at(layout, cfg, i, args.positions))
    table = Table(title=f"{layout.run}: each network on its window and on the next iteration's "
                        f"games ({args.positions} positions each)")  # fmt: skip
    for column in ("iteration", "step", "value: window", "next", "gap",
                   "policy: window", "next", "gap"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in rows:
        w, n = r["window"], r["next"]
        table.add_row(str(r["iteration"]), str(r["global_step"]),
                      f"{w['value']:.3f}", f"{n['value']:.3f}", f"{n['value'] - w['value']:+.3f}",
                      f"{w['policy']:.3f}", f"{n['policy']:.3f}",
                      f"{n['policy'] - w['policy']:+.3f}")  # fmt: skip
    Console(width=120).print(table)
    if args.json:
        payload = {"run": layout.run, "positions": args.positions,
                   "window_games": cfg.training.window_games, "results": rows}  # fmt: skip
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
