"""The `tabula` command and everything a person sees.

- `cli.app`: the Typer app and its commands, in order, and `main`, the `tabula` command
  (``tabula = "cli:main"``);
- `cli.games`: ``gtp``, ``selfplay``, ``match``, ``gate``, ``elo``: playing games and rating them;
- `cli.networks`: ``init-model`` and ``train``: making a network;
- `cli.pipeline`: ``run``, ``status``, ``ui``: a run of the pipeline, and watching it;
- `cli.reproducing`: ``reproduce``, ``stage``, ``push``: checking and publishing a run;
- `cli.cluster`: ``tabula cluster``, the local cluster of docs/scaling-out.md;
- `cli.common`: what every command shares (options, the config, one-line errors);
- `cli.report`: tables and progress bars; `cli.ui`: the MLflow UI server; `cli.clone`: an
  empty project (tests, benchmarks).
"""

from cli.app import app, main

__all__ = ["app", "main"]
