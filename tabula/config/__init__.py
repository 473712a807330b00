"""The typed run configuration: pydantic models, YAML presets, command-line overrides.

A run is described by one `Config` with seven sections (rules, network, search, selfplay,
training, evaluation, pipeline). It is loaded from `params.yaml` (the DVC params file) or a
preset under `configs/`, then the CLI's ``KEY=VALUE`` overrides are applied, then the result is
validated once and passed down. ``Config()`` / ``load_config(None)`` is the quick-start run.

Three modules, imports pointing one way:

- `tabula.config.legacy`: how configs frozen by older versions read (what those runs ran with).
- `tabula.config.models`: the sections and `Config` (defaults, bounds, board-scaled ``None``
  defaults filled in by `Config.resolve()`).
- `tabula.config.io`: YAML in and out, ``KEY=VALUE`` overrides, and the one-line `ConfigError`
  messages (e.g. ``params.yaml: search.simulations: must be >= 1 (got 0)``).

Callers import from `tabula.config` only. Nothing happens at import time.
"""

from tabula.config.io import (
    ConfigError,
    Scalar,
    apply_overrides,
    config_to_flat_dict,
    dump_config,
    load_config,
    parse_config,
    run_name,
)
from tabula.config.models import (
    Config,
    EvaluationConfig,
    NetworkConfig,
    PipelineConfig,
    RulesConfig,
    SearchConfig,
    SelfPlayConfig,
    TrainingConfig,
    without_password,
    without_userinfo,
)

__all__ = [
    "Config",
    "ConfigError",
    "EvaluationConfig",
    "NetworkConfig",
    "PipelineConfig",
    "RulesConfig",
    "Scalar",
    "SearchConfig",
    "SelfPlayConfig",
    "TrainingConfig",
    "apply_overrides",
    "config_to_flat_dict",
    "dump_config",
    "load_config",
    "parse_config",
    "run_name",
    "without_password",
    "without_userinfo",
]
