"""The `tabula` command: a thin Typer shell over the functions the tasks and flows call.

The commands live by subject (`cli.games`, `cli.networks`, `cli.pipeline`, `cli.reproducing`,
`cli.cluster`); this module puts them on one Typer app, in the order ``tabula --help`` lists
them.

Every command takes `--config FILE` (default: the embedded quick-start config) and any number of
`--set section.key=value` overrides. Expected failures (a `tabula.errors.TabulaError`: bad
config, missing or corrupt files, illegal moves) print one line and exit with code 2; anything
else is a bug and shows its traceback (`cli.common.expected_errors`). Nothing here holds logic
of its own.

Wherever it is run (``make run``, ``.venv/bin/tabula``, a deployment), `tabula` sets its own
defaults for the tools underneath before importing them, unless the environment already sets
them: Prefect's analytics off and its log level WARNING (its run loggers at INFO, sent to the
Prefect API and shown on flow run pages but not in the terminal), 120 s for Prefect's temporary
server to start on a busy machine, MLflow's and DVC's usage telemetry off, no MLflow download
bars (``QUIET_DEFAULTS``).
"""

from __future__ import annotations

import os

import typer

from cli import cluster, games, networks, pipeline, reproducing
from cli.common import EXIT_GRACE_S, INTERRUPTED, QUIET_DEFAULTS, exit_within

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


for command in (games.gtp, games.analysis, games.selfplay, networks.train):
    app.command()(command)
app.command("init-model")(networks.init_model)
app.command("compile")(games.compile_kernels)
for command in (games.match, games.gate, games.elo, pipeline.run, pipeline.status, pipeline.ui):
    app.command()(command)
app.add_typer(reproducing.stage_app, name="stage")
app.command()(reproducing.reproduce)
app.command()(reproducing.push)
app.add_typer(cluster.app, name="cluster")


def main() -> None:
    """The `tabula` command (``tabula = "cli:main"``): the app, in a process that ends once an
    interrupt (Ctrl-C, SIGTERM) has stopped the command, within ``EXIT_GRACE_S`` whatever its
    threads are doing (`cli.common.exit_within`)."""
    try:
        app()
    except SystemExit as done:
        if done.code == INTERRUPTED:
            exit_within(EXIT_GRACE_S, INTERRUPTED)
        raise
