"""tasks: the pipeline's side effects, one room per stage over the pure core.

At the bottom, ``tasks.run``: the run on disk (layout, records, markers, budget), Prefect-free.
Above it, one module per stage with its work and its Prefect task (``plan``, ``selfplay``,
``train``, ``evaluate``, ``promote``); the adapters named for what they talk to (the package
``tracking``: MLflow; ``versioning`` and ``lineage``: DVC and git; ``engines``: GTP
processes); ``watch``: what a person watching a run sees; ``reproduce``: rebuilding a stage.
"""
