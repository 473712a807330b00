"""A run's config, frozen in ``data/<run>/params.yaml`` at its first start and checked on
every resume: a resumed run computes what it started computing."""

from __future__ import annotations

from model.files import write_text
from tabula.config import Config, ConfigError, config_to_flat_dict, dump_config, parse_config
from tasks.run.layout import RunLayout

#: What a resume may change: how far the run goes and where its work runs, never what it
#: computes (the Dask scheduler and the Prefect API may move between restarts of a run), and the
#: format its config was written in (which only says how the fields a file leaves out read; the
#: values read are compared).
RESUME_MAY_CHANGE = (
    "iterations", "core_hours", "hours", "dask_address", "prefect_api_url", "config_version"
)  # fmt: skip


def freeze_config(cfg: Config, layout: RunLayout) -> str:
    """The run's config text: written on the first start, checked on every resume (only the
    ``pipeline`` fields of ``RESUME_MAY_CHANGE`` may differ; the new Dask and Prefect addresses
    are used, while the iterations to run are the caller's business)."""
    text = dump_config(cfg)
    frozen = layout.params.read_text() if layout.params.exists() else None
    if frozen is None:
        write_text(layout.params, text)
        return text
    frozen_cfg = parse_config(frozen, source=str(layout.params))
    before, now = config_to_flat_dict(frozen_cfg), config_to_flat_dict(cfg)
    free = {f"pipeline.{name}" for name in RESUME_MAY_CHANGE}
    changed = sorted(k for k in now if now[k] != before.get(k) and k not in free)
    if changed:
        raise ConfigError(
            f"run {layout.run!r} was started with a different config ({', '.join(changed[:4])}"
            f"{' …' if len(changed) > 4 else ''} differ from {layout.params}); "
            "resume it with the same settings or start a new run with --name"
        )
    moved = {name: getattr(cfg.pipeline, name) for name in ("dask_address", "prefect_api_url")}
    if all(getattr(frozen_cfg.pipeline, k) == v for k, v in moved.items()):
        return frozen
    pipeline = frozen_cfg.pipeline.model_copy(update=moved)
    return dump_config(frozen_cfg.model_copy(update={"pipeline": pipeline}))
