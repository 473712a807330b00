"""The pipeline: iterations chained by Prefect, resumable, one run at a time.

``run_pipeline`` is what ``tabula run`` calls: it takes the run's lock, marks KILLED the MLflow
runs a dead process left RUNNING (a stage that raises ends its runs FAILED, or KILLED on an
interrupt, itself), freezes the config in
``data/<run>/params.yaml`` on the first start (`tasks.lineage.freeze_config`: a resumed run
must use the same config, only ``pipeline.iterations`` may grow), and runs the ``pipeline``
flow, which starts the run from a randomly initialised network (iteration 0) and then runs
each unfinished iteration.
"""

from __future__ import annotations

import os
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

from flows.iteration import iteration
from tabula.config import Config, parse_config
from tabula.plan import derive_seed
from tasks import runs as mlflow_runs
from tasks import tracking, versioning
from tasks.lineage import dvc_commit, freeze_config, write_init_stage
from tasks.plan import init_model
from tasks.promote import set_champion
from tasks.run.layout import RunLayout, RunLock
from tasks.run.markers import champion, finished
from tasks.run.records import EvaluationRecord, PromotionRecord, SelfplayRecord, Stage, TrainRecord
from tasks.run.summary import SummaryRow, summary_row, with_final_ratings
from tasks.versioning import code_commit, ensure_repo


def _task_runner(workers: int, dask_address: str | None):
    if dask_address:
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=dask_address)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=max(1, workers))


@flow(name="tabula-pipeline", flow_run_name="{run}")
def pipeline(
    config_yaml: str, project: str, run: str, iterations: int, dask_address: str | None = None
) -> list[SummaryRow]:
    """Run iterations 1..``iterations`` of ``run`` (finished ones are found, not redone)."""
    cfg = parse_config(config_yaml, source=f"data/{run}/params.yaml")
    layout = RunLayout(Path(project), cfg.pipeline.data_dir, run)
    ensure_repo(layout.project, cfg.pipeline.dvc_remote)
    commit = code_commit()
    tags = {
        "git_commit": commit,
        "prefect.pipeline_flow_run_id": str(flow_run.id or ""),
        **tracking.source_tags(commit),
    }
    parent = mlflow_runs.open_pipeline_run(cfg, layout, tags)
    init_seed = derive_seed(cfg.pipeline.seed, 0)
    write_init_stage(layout, init_seed)
    init_model(cfg, layout, init_seed)
    if champion(layout) is None:
        dvc_commit(layout, 0, Stage.INIT.value)
        set_champion(layout, 0, None)
    runner = _task_runner(cfg.selfplay.workers, dask_address)
    one = iteration.with_options(task_runner=runner)
    try:
        rows = [
            closed_row(layout, i) or one(config_yaml, project, run, i, parent, tags, iterations)
            for i in range(1, iterations + 1)
        ]
    except BaseException as error:  # the parent run ends FAILED, or KILLED on an interrupt
        mlflow_runs.fail(cfg, layout, [parent], error)
        raise
    mlflow_runs.finish(cfg, layout, parent)
    final = finished(layout, iterations, Stage.EVALUATE, EvaluationRecord)
    return with_final_ratings(rows, () if final is None else final.ratings, layout)


def closed_row(layout: RunLayout, i: int) -> SummaryRow | None:
    """Iteration i's summary row from its records if its flow ran to the end before, else None.

    Iterations run one after another, and the next one's flow writes its stage file first: so
    when iteration i + 1 has one, iteration i's flow returned (its lineage commit, summary and
    MLflow run closed), and a resume need not run it again. Running it again would find every
    stage finished, but its flow run, MLflow run, reports and git commit cost about a CPU-second
    each time, for every finished iteration of every resume (`bench/strength.py` resumes once
    an iteration). The last finished iteration still runs, so a kill between its stages' ends
    and its flow's end is mended by the resume.
    """
    if not layout.stage_file(i + 1).exists():
        return None
    selfplay = finished(layout, i, Stage.SELFPLAY, SelfplayRecord)
    train = finished(layout, i, Stage.TRAIN, TrainRecord)
    evaluation = finished(layout, i, Stage.EVALUATE, EvaluationRecord)
    promotion = finished(layout, i, Stage.PROMOTE, PromotionRecord)
    if selfplay is None or train is None or evaluation is None or promotion is None:
        return None
    return summary_row(i, selfplay, train, evaluation, promotion)


def run_pipeline(
    cfg: Config, project: Path, iterations: int | None = None, dask_address: str | None = None
) -> list[SummaryRow]:
    """Lock the run, freeze its config and run the pipeline flow; returns the summary rows."""
    use_prefect_api(cfg)
    layout = RunLayout(project.resolve(), cfg.pipeline.data_dir, cfg.pipeline.name)
    with RunLock(layout):
        versioning.require_run_files(layout.project, layout.run, layout.rel(layout.params))
        resumed = layout.params.exists()
        text = freeze_config(cfg, layout)
        if resumed:  # the runs a killed process left RUNNING say so
            mlflow_runs.mark_killed(cfg, layout)
        n = iterations if iterations is not None else cfg.pipeline.iterations
        return pipeline(
            text, str(layout.project), layout.run, n, dask_address or cfg.pipeline.dask_address
        )


def use_prefect_api(cfg: Config) -> None:
    """Point this process's Prefect client at ``pipeline.prefect_api_url`` (when set), with
    Prefect's analytics off; before the first flow runs."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if cfg.pipeline.prefect_api_url:
        os.environ["PREFECT_API_URL"] = cfg.pipeline.prefect_api_url
