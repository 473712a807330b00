"""The pipeline: iterations chained by Prefect, resumable, one run at a time.

``run_pipeline`` is what ``tabula run`` calls: it takes the run's lock, freezes the config in
``data/<run>/params.yaml`` on the first start (a resumed run must use the same config, only
``pipeline.iterations`` may grow), and runs the ``pipeline`` flow, which starts the run from a
randomly initialised network (iteration 0) and then runs each unfinished iteration.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from flows.iteration import iteration
from flows.summary import with_final_ratings
from model.files import write_json, write_text
from tabula.config import Config, ConfigError, config_to_flat_dict, dump_config, parse_config
from tasks import record, stages
from tasks.layout import RunLayout, RunLock, read_json, stage_done
from tasks.lineage import write_init_stage
from tasks.versioning import code_commit, ensure_repo

SOURCE_DIR = Path(__file__).resolve().parents[1]


def _task_runner(workers: int, dask_address: str | None):
    if dask_address:
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=dask_address)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=max(1, workers))


@flow(name="tabula-pipeline", flow_run_name="{run}")
def pipeline(
    config_yaml: str, project: str, run: str, iterations: int, dask_address: str | None = None
) -> list[dict[str, Any]]:
    """Run iterations 1..``iterations`` of ``run`` (finished ones are found, not redone)."""
    cfg = parse_config(config_yaml, source=f"data/{run}/params.yaml")
    layout = RunLayout(Path(project), cfg.pipeline.data_dir, run)
    ensure_repo(layout.project, cfg.pipeline.dvc_remote)
    tags = {
        "git_commit": code_commit(SOURCE_DIR),
        "prefect.pipeline_flow_run_id": str(flow_run.id or ""),
    }
    parent = record.open_pipeline_run(cfg, layout, tags)
    init_seed = stages.derive_seed(cfg.pipeline.seed, 0)
    write_init_stage(layout, init_seed)
    started = stages.init_model(cfg, layout, init_seed)
    if read_json(layout.champion) is None:
        stages.dvc_commit(layout, 0, "init")
        write_json(layout.champion, {"iteration": 0, "model": started["model"], "version": None})
    runner = _task_runner(cfg.selfplay.workers, dask_address)
    one = iteration.with_options(task_runner=runner)
    rows = [one(config_yaml, project, run, i, parent, tags) for i in range(1, iterations + 1)]
    record.finish(cfg, layout, parent)
    final = stage_done(layout, iterations, "evaluate") or {}
    return with_final_ratings(rows, final.get("ratings", []), layout)


#: What a resume may change: how far the run goes and where its work runs, never what it
#: computes (the Dask scheduler and the Prefect API may move between restarts of a run).
RESUME_MAY_CHANGE = ("iterations", "dask_address", "prefect_api_url")


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


def run_pipeline(
    cfg: Config, project: Path, iterations: int | None = None, dask_address: str | None = None
) -> list[dict[str, Any]]:
    """Lock the run, freeze its config and run the pipeline flow; returns the summary rows."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if cfg.pipeline.prefect_api_url:
        os.environ["PREFECT_API_URL"] = cfg.pipeline.prefect_api_url
    layout = RunLayout(project.resolve(), cfg.pipeline.data_dir, cfg.pipeline.name)
    with RunLock(layout):
        text = freeze_config(cfg, layout)
        n = iterations if iterations is not None else cfg.pipeline.iterations
        return pipeline(
            text, str(layout.project), layout.run, n, dask_address or cfg.pipeline.dask_address
        )
