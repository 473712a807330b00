"""The `tabula` command: a thin Typer shell over the functions the tasks and flows call.

The package is everything a person sees: the commands here, the tables and progress bars in
`cli.report`, the MLflow UI server in `cli.ui`.

Every command takes `--config FILE` (default: the embedded quick-start config) and any number of
`--set section.key=value` overrides. Expected failures (a `tabula.errors.TabulaError`: bad
config, missing or corrupt files, illegal moves) print one line and exit with code 2; anything
else is a bug and shows its traceback. Nothing here holds logic of its own.

Wherever it is run (``make run``, ``.venv/bin/tabula``, a deployment), `tabula` sets its own
defaults for the tools underneath before importing them, unless the environment already sets
them: Prefect's analytics off and its log level WARNING (its run loggers at INFO, sent to the
Prefect API and shown on flow run pages but not in the terminal), 120 s for Prefect's temporary
server to start on a busy machine, MLflow's and DVC's usage telemetry off, no MLflow download
bars (``QUIET_DEFAULTS``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from cli import cluster, lineage
from cli.common import (
    QUIET_DEFAULTS,
    ConfigOpt,
    SetOpt,
    _config,
    _interrupt_on_sigterm,
    _one_line_console_errors,
    _project,
    expected_errors,
)
from tabula.errors import UsageError

app = typer.Typer(
    name="tabula",
    help="AlphaGo Zero as a reproducible pipeline: self-play, training, gating, lineage.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def quiet_defaults() -> None:
    """Set ``QUIET_DEFAULTS`` where the environment leaves them unset; runs before every
    command, hence before the command imports Prefect, MLflow or DVC."""
    for name, value in QUIET_DEFAULTS.items():
        os.environ.setdefault(name, value)


@app.command()
@expected_errors
def gtp(
    model: Annotated[
        str, typer.Option(help="'random', a checkpoint path or models:/NAME@ALIAS.")
    ] = "random",
    player: Annotated[
        str | None, typer.Option(help="Alias of --model (e.g. --player random).")
    ] = None,
    simulations: Annotated[int | None, typer.Option(help="MCTS simulations per move.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the player's randomness.")] = 0,
    threads: Annotated[
        int,
        typer.Option(
            min=0,
            help="torch threads for the network (0: torch's default, one per core). One"
            " thread is the cheapest per move at the batch sizes one game makes, and engines"
            " side by side do not compete for cores (python -m bench.genmove).",
        ),
    ] = 1,
    leaves: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Leaves of the game's search evaluated in one network batch (default: 16"
            " for the Gumbel search from 400 simulations up, else search.leaves_per_game)."
            " More is cheaper per simulation; at 400 simulations 16 also played stronger"
            " than 4, at 64 no better (python -m bench.genmove).",
        ),
    ] = None,
    precision: Annotated[
        str,
        typer.Option(
            help="The network's precision: fastest (bf16 or fp32, whichever this machine"
            " runs faster at the search's batch, measured at start), auto (bf16 where the CPU"
            " has it natively), fp32 or bf16.",
        ),
    ] = "fastest",
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Speak GTP version 2 on stdin/stdout (for GoGui, Sabaki, GnuGo matches)."""
    from tabula.gtp import serve
    from tasks.players import make_player

    cfg = _config(config, set_)
    if threads and (player or model) != "random":
        from model.evaluator import set_threads

        set_threads(threads)
    spec = player or model
    if precision not in ("fastest", "auto", "fp32", "bf16"):
        raise UsageError(f"--precision {precision!r}: use fastest, auto, fp32 or bf16")
    gtp_player = make_player(
        spec, cfg, simulations=simulations, seed=seed, resolver=_model_resolver(cfg),
        precision=precision, leaves_per_move=leaves,
    )  # fmt: skip
    serve(gtp_player, sys.stdin, sys.stdout, size=cfg.rules.board_size, komi=cfg.rules.komi)


@app.command()
@expected_errors
def selfplay(
    out: Annotated[Path, typer.Option(help="Folder for the shards and sample SGFs.")],
    model: Annotated[str, typer.Option(help="'random' or a checkpoint path.")] = "random",
    games: Annotated[int | None, typer.Option(help="Games (default: selfplay.games).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the games.")] = 0,
    iteration: Annotated[int, typer.Option(help="Iteration number stored in the shards.")] = 0,
    worker: Annotated[int, typer.Option(help="Worker number stored in the shards.")] = 0,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Play self-play games with one network and write Parquet shards (progress bar)."""
    from cli.report import selfplay_progress
    from tasks.selfplay import run_worker

    cfg = _config(config, set_)
    total = games or cfg.selfplay.games
    with selfplay_progress(total) as progress:
        result = run_worker(
            cfg,
            model,
            out,
            games=total,
            seed=seed,
            iteration=iteration,
            worker=worker,
            progress=progress,
        )
    typer.echo(
        f"wrote {len(result.shards)} shard(s), {result.positions} positions from {result.games} "
        f"games to {out} ({result.positions_per_s:.0f} positions/s, "
        f"{result.simulations_per_s:.0f} simulations/s)"
    )


@app.command()
@expected_errors
def train(
    data: Annotated[
        list[Path], typer.Option("--data", help="Shard files or folders (repeatable).")
    ],
    out: Annotated[Path, typer.Option(help="Exported model file to write (model.pt).")],
    init: Annotated[
        Path | None, typer.Option(help="Lightning .ckpt to resume, or an exported model.")
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option(
            help="SGD steps (default: training.steps, or as many as training.samples_per_row"
            " asks of the newest rows when it is set)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for sampling and initialisation.")] = 0,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run one training stage on a window of self-play shards, as the pipeline's: steps sized
    to the data and games held out when the config says so."""
    from tasks.train import train_stage

    cfg = _config(config, set_)
    t = cfg.training
    result = train_stage(
        cfg,
        data,
        out,
        init=init,
        steps=steps or t.steps,
        seed=seed,
        samples_per_row=t.samples_per_row if steps is None else None,
        holdout_games=t.holdout_games,
    )
    held = "" if result.val_loss is None else f", on held-out games {result.val_loss:.4f}"
    typer.echo(
        f"wrote {result.model} ({result.steps} steps to global step {result.global_step}, "
        f"loss {result.loss:.4f}{held}, sha256 {result.weights_sha256[:16]}…, "
        f"{result.samples_per_s:.0f} samples/s)"
    )


@app.command("init-model")
@expected_errors
def init_model(
    out: Annotated[Path, typer.Option(help="Checkpoint file to write.")],
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
    run: Annotated[
        str | None, typer.Option(help="The run it starts: its metadata as the pipeline's.")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Write a randomly initialised network (iteration 0 of a run)."""
    from model.checkpoint import CheckpointLineage, save_checkpoint
    from model.network import network_for
    from tasks.stage_files import init_metadata

    cfg = _config(config, set_)
    net = network_for(cfg, seed)
    lineage = init_metadata(run, seed) if run else CheckpointLineage(out.stem, seed, 0)
    save_checkpoint(out, net, lineage)
    typer.echo(f"wrote {out}")


@app.command()
@expected_errors
def match(
    black: Annotated[str, typer.Option(help="Player spec: random, PATH, raw:PATH, gtp:CMD ...")],
    white: Annotated[str, typer.Option(help="Player spec of the other side.")],
    games: Annotated[int, typer.Option(help="Games to play (colours alternate).")] = 2,
    sgf_dir: Annotated[Path | None, typer.Option(help="Write every game here as SGF.")] = None,
    store: Annotated[
        Path | None, typer.Option(help="Results store (default: data/<run>/results).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Match seed.")] = 0,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Play a match; print the result table and append the games to the results store."""
    from cli.report import match_table
    from tasks.match import MatchSpec, run_match

    cfg = _config(config, set_)
    store = store or _project() / cfg.pipeline.data_dir / cfg.pipeline.name / "results"
    spec = MatchSpec((black, white), games, seed=seed, sgf_dir=sgf_dir, store=store)
    result = run_match(spec, cfg)
    match_table(result)


@app.command()
@expected_errors
def gate(
    candidate: Annotated[str, typer.Option(help="Candidate player spec (a checkpoint).")],
    best: Annotated[str, typer.Option(help="Current best player spec.")],
    out: Annotated[Path, typer.Option(help="Folder for the evidence and SGFs.")],
    seed: Annotated[int, typer.Option(help="Match seed.")] = 0,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Gate a candidate against the best: promoted or not, with the evidence."""
    from tasks.match import MatchSpec, run_gate

    cfg = _config(config, set_)
    spec = MatchSpec((candidate, best), cfg.evaluation.gating_games, seed=seed, sgf_dir=out / "sgf")
    decision = run_gate(spec, cfg, out)
    verdict = "PROMOTED" if decision.promoted else "not promoted"
    typer.echo(
        f"{verdict} ({decision.reason}): {decision.wins}-{decision.losses} in {decision.games} "
        f"games, win rate {decision.win_rate:.1%} [{decision.low:.1%}, {decision.high:.1%}]"
    )


@app.command()
@expected_errors
def elo(
    store: Annotated[
        Path | None, typer.Option(help="Results store (default: data/<run>/results).")
    ] = None,
    anchor: Annotated[str, typer.Option(help="Player fixed at --anchor-elo.")] = "random",
    anchor_elo: Annotated[float, typer.Option(help="Rating of the anchor.")] = 0.0,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Print Elo ratings with 95% intervals over every recorded game."""
    from cli.report import elo_table
    from tasks.run.results import ratings_table

    cfg = _config(config, set_)
    store = store or _project() / cfg.pipeline.data_dir / cfg.pipeline.name / "results"
    if not Path(store).exists():
        raise UsageError(f"{store}: no results store yet (play a match first)")
    elo_table(ratings_table(store, anchor=anchor, anchor_elo=anchor_elo))


def _model_resolver(cfg: Any) -> Callable[[str], Path]:
    """models:/NAME@ALIAS → a local checkpoint, downloaded from the run's MLflow store."""

    def resolve(uri: str) -> Path:
        import tempfile

        from tasks.tracking import resolve_model

        dst = Path(tempfile.mkdtemp(prefix="tabula-model-"))
        return resolve_model(uri, cfg.pipeline.mlflow_tracking_uri, _project(), dst)[0]

    return resolve


@app.command()
@expected_errors
def run(
    config: ConfigOpt = None,
    iterations: Annotated[
        int | None, typer.Option(help="Iterations to reach (default: config).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: pipeline.name).")] = None,
    dask_address: Annotated[
        str | None, typer.Option(help="Fan self-play out to this Dask scheduler (tcp://host:8786).")
    ] = None,
    core_hours: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="CPU budget in core-hours: the rate schedule fits it, and no iteration starts"
            " once it is spent (resume or extend with a larger one).",
        ),
    ] = None,
    hours: Annotated[
        float | None, typer.Option(min=0.0, help="Wall-clock budget in hours, likewise.")
    ] = None,
    set_: SetOpt = None,
) -> None:
    """Run the pipeline (or resume it at the first unfinished stage)."""
    overrides = list(set_ or []) + ([f"pipeline.name={name}"] if name else [])
    cfg = _config(config, overrides)  # before importing Prefect: a bad config fails at once
    from cli.report import print_summary, stage_progress
    from flows.pipeline import run_pipeline
    from tasks.watch import showing

    _one_line_console_errors()
    _interrupt_on_sigterm()
    with stage_progress() as display, showing(display):
        rows = run_pipeline(
            cfg, _project(), iterations, dask_address, core_hours, hours, cpu_start=0.0
        )
    print_summary(cfg, _project(), rows)


@app.command()
@expected_errors
def status(
    run_name: Annotated[str | None, typer.Argument(metavar="RUN", help="Run name.")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Iterations done, the champion and the last Elo of a run."""
    from cli.report import print_status

    cfg = _config(config, set_)
    print_status(cfg, _project(), run_name or cfg.pipeline.name)


@app.command()
@expected_errors
def ui(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 5000,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Open the MLflow UI on the run store (bound to 127.0.0.1)."""
    from cli.ui import serve_ui

    cfg = _config(config, set_)
    raise typer.Exit(
        serve_ui(
            cfg.pipeline.mlflow_tracking_uri,
            port=port,
            artifact_root=cfg.pipeline.mlflow_artifact_root,
            project=_project(),
        )
    )


app.add_typer(lineage.stage_app, name="stage")
app.command()(lineage.reproduce)
app.command()(lineage.push)
app.add_typer(cluster.app, name="cluster")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
