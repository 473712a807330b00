"""A weight average as the champion: a run's last iterations averaged, against the plain iterate.

Usage: ``python -m bench.average --project DIR --run NAME [--last 2,4] [--games 100]
[--simulations 64] [--workdir DIR] [--json PATH]``

KataGo's training exports a moving average of its recent weights rather than the last iterate
(its training scripts, not its 2019 paper); stochastic weight averaging (Izmailov et al. 2018)
averages snapshots along the trajectory and then recomputes the batch-norm statistics, which an
average of weights does not carry over. This benchmark asks whether that would make a better
champion for a finished tabula run, without retraining anything: for each ``K`` of ``--last``,
the exported networks of the run's last ``K`` iterations (``data/RUN/iter-NNNN/model/model.pt``)
are averaged parameter by parameter, the batch-norm statistics are recomputed over positions of
the last iteration's self-play (``BN_BATCHES`` batches of ``BN_BATCH``, with the data module's
random symmetries), and the average plays ``--games`` games against the last iterate: the same
search (the run's own config at ``--simulations``), seeded openings, colours swapped in pairs,
the games kept in ``--workdir`` so that a killed benchmark resumes
(`bench.strength_games.play_match`). The screening protocol of `bench/strength.py`: a switch is
kept where it wins outside the interval.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from bench.ladder import elo_gap, side_summary
from bench.runs import add_run_arguments, champion_iteration, run_layout
from bench.strength_games import play_match
from model.checkpoint import load_checkpoint, save_checkpoint
from model.datamodule import ShardDataModule, load_window
from model.files import write_json
from model.network import PolicyValueNet
from tabula.config import load_config
from tabula.features import Inputs
from tasks.match import MatchSpec
from tasks.run.layout import RunLayout

#: Positions the batch-norm statistics of an average are recomputed over: 40 x 256 = 10,240.
BN_BATCHES, BN_BATCH = 40, 256


def average_weights(nets: list[PolicyValueNet]) -> PolicyValueNet:
    """A copy of ``nets[-1]`` holding the mean of every floating-point parameter and buffer of
    ``nets`` (batch-norm statistics too, until `refresh_batchnorm` recomputes them); integer
    buffers (batch norm's batch counts) are the last net's."""
    states = [net.state_dict() for net in nets]
    mean = {}
    for name, value in states[-1].items():
        if value.is_floating_point():
            mean[name] = torch.stack([s[name].float() for s in states]).mean(0).to(value.dtype)
        else:
            mean[name] = value.clone()
    out = PolicyValueNet(nets[-1].shape)
    out.load_state_dict(mean)
    return out.eval()


def refresh_batchnorm(net: PolicyValueNet, batches: list[torch.Tensor]) -> PolicyValueNet:
    """Recompute every batch norm's running mean and variance as the plain average over
    ``batches`` (planes), the weights untouched (SWA's last step); returns ``net`` in eval
    mode."""
    norms = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over every batch seen
    net.train()
    with torch.no_grad():
        for planes in batches:
            net(planes.float())
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    return net.eval()


def bn_batches(
    layout: RunLayout, iteration: int, board_size: int, inputs: Inputs
) -> list[torch.Tensor]:
    """``BN_BATCHES`` batches of planes from iteration ``iteration``'s self-play shards (with
    the derived planes ``inputs`` names, those of the network)."""
    window = load_window([layout.selfplay(iteration)], board_size).with_inputs(inputs)
    dm = ShardDataModule(window, BN_BATCH, BN_BATCHES, seed=0)
    return [batch[0] for batch in dm.train_dataloader()]


def averaged_checkpoint(layout: RunLayout, last: int, k: int, out: Path) -> Path:
    """The average of iterations ``last - k + 1 .. last``, with fresh batch-norm statistics,
    written to ``out`` (model_id ``RUN/avg-K-iter-NNNN``; kept when it is already there)."""
    if out.exists():
        return out
    nets: list[PolicyValueNet] = []
    metadata: dict[str, Any] = {}
    for i in range(last - k + 1, last + 1):
        net, metadata = load_checkpoint(layout.model(i))
        nets.append(net)
    net = average_weights(nets)
    refresh_batchnorm(net, bn_batches(layout, last, net.board_size, net.shape.inputs))
    model_id = f"{layout.run}/avg-{k}-iter-{last:04d}"
    lineage = {
        "model_id": model_id,
        "seed": 0,
        "global_step": int(metadata.get("global_step", 0)),
        "parent": None,
        "averaged": [layout.model_id(i) for i in range(last - k + 1, last + 1)],
    }
    return save_checkpoint(out, net, lineage)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.average", description=__doc__.splitlines()[0]
    )
    add_run_arguments(parser)
    parser.add_argument("--last", default="2,4", help="iterations averaged, comma-separated")
    parser.add_argument("--games", type=int, default=100, help="games against the last iterate")
    parser.add_argument("--simulations", type=int, default=64)
    parser.add_argument("--workdir", type=Path, help="default PROJECT/../average")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    layout = run_layout(args)
    last = champion_iteration(parser, layout)
    try:
        ks = sorted({int(k) for k in args.last.split(",")})
    except ValueError:
        parser.error(f"--last {args.last!r}: give iteration counts, e.g. 2,4")
    if not ks or ks[0] < 2 or ks[-1] > last:
        parser.error(f"--last {args.last!r}: each between 2 and the champion's iteration {last}")
    work = (args.workdir or args.project / ".." / "average").resolve()
    work.mkdir(parents=True, exist_ok=True)
    cfg = load_config(layout.params, [f"evaluation.simulations={args.simulations}"])
    plain_spec = f"mcts:{layout.model(last)}@{args.simulations}"
    console = Console(width=120)
    rows: list[dict[str, Any]] = []
    for k in ks:
        path = averaged_checkpoint(layout, last, k, work / f"avg-{k}-iter-{last:04d}.pt")
        player = f"{layout.run}/avg-{k}-iter-{last:04d}"
        console.print(f"the last {k} iterations averaged: {args.games} games against the last")
        match = MatchSpec(
            (f"mcts:{path}@{args.simulations}", plain_spec),
            args.games,
            seed=k,
            match_id=f"avg-{k}-vs-iter-{last:04d}",
            store=work / "games",
        )
        games = play_match(match, cfg)
        summary = side_summary(games, player)
        rows.append({"last": k, "player": player, "against": layout.model_id(last), **summary,
                     "elo_gap": elo_gap(summary["win_rate"])})  # fmt: skip
    table = Table(title=f"{layout.run}: weight averages against iteration {last} "
                        f"({args.simulations} simulations each side)")  # fmt: skip
    for column in ("iterations averaged", "games", "average's score (95%)", "mean margin", "Elo"):
        table.add_column(column, justify="right")
    for r in rows:
        score = "—" if r["win_rate"] is None else f"{r['win_rate']:.0%}"
        elo = "—" if r["elo_gap"] is None else f"{r['elo_gap']:+.0f}"
        table.add_row(f"{last - r['last'] + 1}-{last}", str(r["games"]),
                      f"{score} [{r['low']:.0%}, {r['high']:.0%}]", f"{r['mean_margin']:+.1f}",
                      elo)  # fmt: skip
    console.print(table)
    if args.json:
        write_json(args.json, {"run": layout.run, "iteration": last,
                               "simulations": args.simulations, "results": rows})  # fmt: skip


if __name__ == "__main__":
    main()
