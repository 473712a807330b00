"""The commands that play games and rate them: ``tabula gtp`` (an engine for GUIs and other
engines), ``analysis`` (KataGo's JSON analysis engine), ``selfplay``, ``compile`` (its
kernels ahead of a run), ``match``, ``gate`` and ``elo``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import ConfigOpt, SetOpt, config_from, expected_errors, project_dir
from tabula.errors import UsageError
from tasks.run.layout import RunLayout

if TYPE_CHECKING:
    from tasks.gtp_setup import GtpSetup

#: The network options of ``tabula gtp``.
ThreadsOpt = Annotated[
    int,
    typer.Option(
        min=0,
        help="torch threads for the network (0: torch's default, one per core). One"
        " thread is the cheapest per move at the batch sizes one game makes, and engines"
        " side by side do not compete for cores (python -m bench.genmove).",
    ),
]
LeavesOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Leaves of the game's search evaluated in one network batch (default: 16"
        " for the Gumbel search from 400 simulations up, else search.leaves_per_game)."
        " More is cheaper per simulation; at 400 simulations 16 also played stronger"
        " than 4, at 64 no better (python -m bench.genmove).",
    ),
]
PrecisionOpt = Annotated[
    str,
    typer.Option(
        help="The network's precision: fastest (bf16 or fp32, whichever this machine"
        " runs faster at the search's batch, measured at start), auto (bf16 where the CPU"
        " has it natively), fp32 or bf16.",
    ),
]

#: Where ``tabula gtp`` and ``tabula analysis`` find the project and the run's config.
ProjectOpt = Annotated[
    Path | None,
    typer.Option(
        help="The project whose MLflow store and runs models:/ and --run name (default:"
        " the working directory when it holds runs, else the checkout this tabula is"
        " installed from)."
    ),
]
RunOpt = Annotated[
    str | None,
    typer.Option(
        help="The run whose frozen config (data/RUN/params.yaml) sets the rules and search"
        " (default: the run of a models:/ version or of the checkpoint's folder)."
    ),
]

#: The results store a match appends to and Elo reads (`_run_results` when not given).
StoreOpt = Annotated[Path | None, typer.Option(help="Results store (default: data/<run>/results).")]


@expected_errors
def gtp(
    model: Annotated[
        str,
        typer.Option(
            "--model", "--player", help="'random', a checkpoint path or models:/NAME@ALIAS."
        ),
    ] = "random",
    simulations: Annotated[int | None, typer.Option(help="MCTS simulations per move.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the player's randomness.")] = 0,
    threads: ThreadsOpt = 1,
    leaves: LeavesOpt = None,
    precision: PrecisionOpt = "fastest",
    project: ProjectOpt = None,
    run: RunOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Speak GTP version 2 on stdin/stdout (for GoGui, Sabaki, Lizzie, GnuGo matches)."""
    from tabula.gtp import serve

    setup = _engine_setup(model, threads, precision, project, run, config, set_)
    cfg = setup.cfg
    gtp_player = _engine_player(setup, model, seed, precision, simulations=simulations,
                                leaves_per_move=leaves)  # fmt: skip
    visits = simulations or cfg.evaluation.simulations
    serve(gtp_player, sys.stdin, sys.stdout, size=cfg.rules.board_size, komi=cfg.rules.komi,
          sizes=setup.sizes, visits=visits)  # fmt: skip


@expected_errors
def analysis(
    model: Annotated[str, typer.Option(help="A checkpoint path or models:/NAME@ALIAS.")],
    sgf: Annotated[
        Path | None,
        typer.Option(
            help="Review this SGF game: one answer a turn, then exit (default:"
            " answer JSON queries from stdin)."
        ),
    ] = None,
    visits: Annotated[
        int | None, typer.Option(min=1, help="maxVisits of a query that gives none.")
    ] = None,
    report_as: Annotated[
        str, typer.Option(help="reportAnalysisWinratesAs: BLACK, WHITE or SIDETOMOVE.")
    ] = "BLACK",
    seed: Annotated[int, typer.Option(help="Seed of the search's randomness.")] = 0,
    threads: ThreadsOpt = 1,
    precision: PrecisionOpt = "fastest",
    project: ProjectOpt = None,
    run: RunOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """KataGo's JSON analysis engine (for KaTrain and review scripts): one query a line on
    stdin, one JSON answer a line per analysed turn; or --sgf to review a whole game."""
    from tabula.katago import REPORT_AS, Defaults
    from tasks.analysis import analyst_of, run_analysis

    if report_as.upper() not in REPORT_AS:
        raise UsageError(f"--report-as {report_as!r}: use BLACK, WHITE or SIDETOMOVE")
    setup = _engine_setup(model, threads, precision, project, run, config, set_)
    cfg = setup.cfg
    player = _engine_player(setup, model, seed, precision)
    analyst = analyst_of(player, model)
    aux = bool(getattr(getattr(player, "evaluate", None), "has_aux", False))
    defaults = Defaults(cfg.rules.board_size, cfg.rules.komi,
                        visits or cfg.evaluation.simulations, report_as.upper(), aux)  # fmt: skip
    run_analysis(analyst, defaults, sys.stdin, sys.stdout, sgf)


def _engine_setup(
    model: str,
    threads: int,
    precision: str,
    project: Path | None,
    run: str | None,
    config: Path | None,
    set_: list[str] | None,
) -> GtpSetup:
    """What `gtp` and `analysis` play with (`tasks.gtp_setup.gtp_setup`), once ``--precision``
    is checked, with ``--threads`` torch threads for a network."""
    from tasks.gtp_setup import gtp_setup

    if precision not in ("fastest", "auto", "fp32", "bf16"):
        raise UsageError(f"--precision {precision!r}: use fastest, auto, fp32 or bf16")
    setup = gtp_setup(model, project, run, config, set_ or [], project_dir())
    if threads and setup.checkpoint is not None:
        from model.evaluator import set_threads

        set_threads(threads)
    return setup


def _engine_player(setup: GtpSetup, model: str, seed: int, precision: str,
                   **options: Any) -> Any:  # fmt: skip
    """The player of `gtp` and `analysis`: ``model`` as ``setup`` resolved it."""
    from tasks.players import make_player

    return make_player(model, setup.cfg, seed=seed, resolver=lambda _: setup.checkpoint,
                       precision=precision, **options)  # fmt: skip


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
    from tabula.plan import WorkerSpec
    from tasks.selfplay import run_worker

    cfg = config_from(config, set_)
    total = games or cfg.selfplay.games
    spec = WorkerSpec(iteration, worker, model, total, seed, str(out), cfg.selfplay.v_resign)
    with selfplay_progress(total) as progress:
        result = run_worker(cfg, spec, out, progress)
    typer.echo(
        f"wrote {len(result.shards)} shard(s), {result.positions} positions from {result.games} "
        f"games to {out} ({result.positions_per_s:.0f} positions/s, "
        f"{result.simulations_per_s:.0f} simulations/s)"
    )


@expected_errors
def compile_kernels(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Compile self-play's numba kernels into numba's cache now (make run does it once).

    The cache is NUMBA_CACHE_DIR's (make sets it), so that a run's first iteration loads the
    kernels instead of spending its budget compiling them (about 40 CPU-s). A second process
    compiles the search's later kernels meanwhile (`tasks.selfplay.compile_kernels_ahead`, as
    the worker processes do), which on two cores takes a third off the wait."""
    import multiprocessing
    import resource
    import time

    from tasks.selfplay import compile_kernels as compile_for
    from tasks.selfplay import compile_kernels_ahead

    cfg = config_from(config, set_)
    began = time.process_time()
    helper = multiprocessing.get_context("spawn").Process(target=compile_kernels_ahead, args=(cfg,))
    helper.start()
    try:
        compile_for(cfg)
    finally:
        helper.join()
    cpu = time.process_time() - began
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu += children.ru_utime + children.ru_stime
    typer.echo(f"numba's kernels compiled or found in its cache ({cpu:.0f} CPU-s)")


@expected_errors
def match(
    black: Annotated[str, typer.Option(help="Player spec: random, PATH, raw:PATH, gtp:CMD ...")],
    white: Annotated[str, typer.Option(help="Player spec of the other side.")],
    games: Annotated[int, typer.Option(help="Games to play (colours alternate).")] = 2,
    sgf_dir: Annotated[Path | None, typer.Option(help="Write every game here as SGF.")] = None,
    store: StoreOpt = None,
    seed: Annotated[int, typer.Option(help="Match seed.")] = 0,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Play a match; print the result table and append the games to the results store."""
    from cli.report import match_table
    from tasks.match import MatchSpec, run_match

    cfg = config_from(config, set_)
    store = store or _run_results(cfg)
    spec = MatchSpec((black, white), games, seed=seed, sgf_dir=sgf_dir, store=store)
    result = run_match(spec, cfg)
    match_table(result)


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

    cfg = config_from(config, set_)
    spec = MatchSpec((candidate, best), cfg.evaluation.gating_games, seed=seed, sgf_dir=out / "sgf")
    decision = run_gate(spec, cfg, out)
    verdict = "PROMOTED" if decision.promoted else "not promoted"
    typer.echo(
        f"{verdict} ({decision.reason}): {decision.wins}-{decision.losses} in {decision.games} "
        f"games, win rate {decision.win_rate:.1%} [{decision.low:.1%}, {decision.high:.1%}]"
    )


@expected_errors
def elo(
    store: StoreOpt = None,
    anchor: Annotated[
        str | None,
        typer.Option(
            help="Player fixed at --anchor-elo (default: the run's scale: GnuGo level 1 = 0"
            " once it has played, else random = 0)."
        ),
    ] = None,
    anchor_elo: Annotated[float, typer.Option(help="Rating of the anchor.")] = 0.0,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Print Elo ratings with 95% intervals over every recorded game, on the run's scale."""
    from cli.report import elo_table
    from tabula.ladder import elo_scale
    from tasks.run.results import ratings_table

    cfg = config_from(config, set_)
    store = store or _run_results(cfg)
    if not Path(store).exists():
        raise UsageError(f"{store}: no results store yet (play a match first)")
    if anchor is not None:
        elo_table(ratings_table(store, anchor=anchor, anchor_elo=anchor_elo))
        typer.echo(f"Elo scale: {anchor} = {anchor_elo:g}")
        return
    fixed = _run_anchors(cfg)
    rows = ratings_table(store, anchors=fixed)
    elo_table(rows)
    typer.echo(f"Elo scale: {elo_scale(fixed, (row['player'] for row in rows))}")


def _run_anchors(cfg: Any) -> dict[str, float]:
    """The players the run's Elo fit holds fixed (`tabula.ladder.fixed_elos`), from its frozen
    config when it has one, so that ``tabula elo`` shows the pipeline's scale."""
    from tabula.config import parse_config
    from tabula.ladder import fixed_elos

    layout = RunLayout(project_dir(), cfg.pipeline.data_dir, cfg.pipeline.name)
    if layout.params.exists():
        cfg = parse_config(layout.params.read_text(), source=str(layout.params))
    return fixed_elos(cfg.evaluation.anchors, cfg.rules.board_size)


def _run_results(cfg: Any) -> Path:
    """The results store of the configured run (`RunLayout.results`)."""
    return RunLayout(project_dir(), cfg.pipeline.data_dir, cfg.pipeline.name).results
