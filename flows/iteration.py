"""One iteration of AlphaGo Zero: self-play → dataset → training → gating → promotion.

Control flow only: every side effect is a task in ``tasks/``. A stage is skipped when its
``state/STAGE.json`` exists, so running the same command again resumes at the first
unfinished stage of the first unfinished iteration.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from flows.summary import iteration_artifact, selfplay_metrics
from model.files import write_json
from tabula.config import Config, parse_config
from tasks import record, stages
from tasks.layout import RunLayout, mark_done, read_json, stage_done
from tasks.lineage import IterationPlan, write_iteration_stages


def plan_iteration(cfg: Config, layout: RunLayout, i: int) -> IterationPlan:
    """Fix the champion, the parent checkpoint and the training window of iteration ``i``.

    The plan is written once (``state/plan.json``) and read back on resume: a promotion
    later in the run must not change what an earlier iteration was made from.
    """
    frozen = stage_done(layout, i, "plan")
    if frozen is not None:
        return IterationPlan(**{**frozen, "window": tuple(frozen["window"])})
    champion = read_json(layout.champion) or {"iteration": 0}
    window: list[str] = []
    games = 0
    oldest = max(0, i - (cfg.training.window_iterations or i))
    for j in range(i, oldest, -1):
        if games >= cfg.training.window_games:
            break
        window.insert(0, layout.rel(layout.selfplay(j)))
        games += cfg.selfplay.games
    seed = cfg.pipeline.seed
    plan = IterationPlan(
        iteration=i,
        best=int(champion["iteration"]),
        parent=i - 1,
        window=tuple(window),
        selfplay_seed=stages.derive_seed(seed, i, 0),
        train_seed=stages.derive_seed(seed, i, 1),
        gate_seed=stages.derive_seed(seed, i, 2),
    )
    mark_done(layout, i, "plan", asdict(plan))
    return plan


def _worker_games(total: int, workers: int) -> list[int]:
    return [total // workers + (1 if w < total % workers else 0) for w in range(workers)]


def run_selfplay(
    cfg: Config, layout: RunLayout, plan: IterationPlan, runs: list[str], v_resign: float | None
) -> dict[str, Any]:
    i = plan.iteration
    if v_resign is not None and cfg.selfplay.v_resign is not None:
        cfg = cfg.model_copy(
            update={"selfplay": cfg.selfplay.model_copy(update={"v_resign": v_resign})}
        )
    best = str(layout.model(plan.best))
    futures = [
        stages.selfplay_worker.submit(
            cfg, layout, i, w, best, games, stages.derive_seed(plan.selfplay_seed, w)
        )
        for w, games in enumerate(_worker_games(cfg.selfplay.games, cfg.selfplay.workers))
    ]
    workers = [f.result() for f in futures]
    hashes = stages.dvc_commit(layout, i, "selfplay")
    result = {
        **selfplay_metrics(workers, cfg.selfplay.resign_false_positive_target),
        "v_resign_used": cfg.selfplay.v_resign,
        "hashes": hashes,
        "seconds": max(w["seconds"] for w in workers),
    }
    record.log_metrics(cfg, layout, runs, _metrics(result, "selfplay/"), step=i)
    record.log_datasets(cfg, layout, runs[0], hashes, context="selfplay")
    mark_done(layout, i, "selfplay", result)
    return result


def run_train(cfg: Config, layout: RunLayout, plan: IterationPlan, runs: list[str]) -> dict:
    i = plan.iteration
    parent = layout.trainer_ckpt(plan.parent)
    init = parent if plan.parent > 0 and parent.exists() else layout.model(plan.parent)
    trained = stages.train(
        cfg,
        layout,
        i,
        list(plan.window),
        str(init),
        plan.train_seed,
        runs[0],
        record.tracking_uri(cfg, layout),
    )
    hashes = stages.dvc_commit(layout, i, "train")
    window = {w: _dir_hash(layout, w) for w in plan.window}
    record.log_datasets(cfg, layout, runs[0], window, context="training")
    result = {**trained, "hashes": hashes, "window": window}
    record.log_metrics(cfg, layout, runs[1:], _metrics(trained, "train/"), step=i)
    mark_done(layout, i, "train", result)
    return result


def run_evaluate(cfg: Config, layout: RunLayout, plan: IterationPlan, runs: list[str]) -> dict:
    i = plan.iteration
    decision = stages.gate(cfg, layout, i, plan.best, plan.gate_seed)
    anchors = ["random"] + ([f"gtp:{cfg.evaluation.gnugo}"] if cfg.evaluation.gnugo else [])
    matches = {
        a: stages.anchor_match(cfg, layout, i, a, stages.derive_seed(plan.gate_seed, k + 1))
        for k, a in enumerate(anchors)
        if cfg.evaluation.anchor_games > 0
    }
    table = stages.ratings(layout, i)
    hashes = stages.dvc_commit(layout, i, "evaluate")
    me = next((r for r in table if r["player"] == layout.model_id(i)), None)
    result = {
        "gate": decision,
        "anchors": matches,
        "ratings": table,
        "hashes": hashes,
        "elo": me and {k: me[k] for k in ("elo", "low", "high")},
    }
    metrics = {"eval/win_rate": decision.get("win_rate"), "eval/gate_games": decision.get("games")}
    if me:
        metrics.update({"elo": me["elo"], "elo_low": me["low"], "elo_high": me["high"]})
    for name, match in matches.items():
        metrics[f"eval/score_vs_{name.split()[0].removeprefix('gtp:')}"] = match.get("score")
    record.log_metrics(cfg, layout, runs, metrics, step=i)
    record.log_artifacts(
        cfg,
        layout,
        runs[0],
        {str(layout.match(i)): "evaluation", str(layout.root / "elo.png"): "plots"},
    )
    mark_done(layout, i, "evaluate", result)
    return result


def run_promote(
    cfg: Config,
    layout: RunLayout,
    plan: IterationPlan,
    evaluation: dict,
    train: dict,
    runs: list[str],
    tags: dict[str, str],
) -> dict:
    i = plan.iteration
    promoted = bool(evaluation["gate"].get("promoted"))
    lineage = {
        "tabula.parent_checkpoint": layout.rel(layout.model(plan.parent)),
        "tabula.window": ",".join(f"{p}@{h}" for p, h in train["window"].items()),
        "tabula.seed": str(plan.train_seed),
        "tabula.global_step": str(train.get("global_step")),
        "tabula.dvc_model": next(iter(train["hashes"].values()), ""),
        "tabula.run": layout.run,
        "tabula.iteration": str(i),
        **tags,
    }
    version = record.register(
        cfg, layout, runs[0], i, train["weights_sha256"], lineage, champion=promoted
    )
    if promoted:
        write_json(
            layout.champion,
            {"iteration": i, "model": layout.rel(layout.model(i)), "version": version},
        )
    result = {
        "promoted": promoted,
        "version": version,
        "champion": (read_json(layout.champion) or {"iteration": 0})["iteration"],
    }
    record.log_metrics(
        cfg,
        layout,
        runs,
        {"promoted": float(promoted)},
        step=i,
        tags={"tabula.champion_iteration": result["champion"]},
    )
    mark_done(layout, i, "promote", result)
    return result


def _dir_hash(layout: RunLayout, rel_dir: str) -> str:
    """The DVC hash recorded for a self-play directory by its own iteration's stage."""
    done = read_json(layout.project / Path(rel_dir).parent / "state" / "selfplay.json") or {}
    return done.get("hashes", {}).get(rel_dir, "")


_NOT_METRICS = {"seed", "threads", "pid"}


def _metrics(record_: dict[str, Any], prefix: str) -> dict[str, float]:
    return {
        f"{prefix}{k}": float(v)
        for k, v in record_.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in _NOT_METRICS
    }


@flow(name="tabula-iteration", flow_run_name="{run}-iter-{i}")
def iteration(
    config_yaml: str, project: str, run: str, i: int, parent_run_id: str, tags: dict[str, str]
) -> dict[str, Any]:
    """Run (or resume) iteration ``i`` of ``run``; returns its summary row."""
    cfg = parse_config(config_yaml, source=f"data/{run}/params.yaml")
    layout = RunLayout(Path(project), cfg.pipeline.data_dir, run)
    plan = plan_iteration(cfg, layout, i)
    write_iteration_stages(layout, plan)
    tags = {**tags, "prefect.flow_run_id": str(flow_run.id or "")}
    child = record.open_iteration_run(cfg, layout, i, parent_run_id, tags)
    runs = [child, parent_run_id]
    previous = stage_done(layout, i - 1, "selfplay") or {}
    selfplay = stage_done(layout, i, "selfplay") or run_selfplay(
        cfg, layout, plan, runs, previous.get("v_resign_next")
    )
    train = stage_done(layout, i, "train") or run_train(cfg, layout, plan, runs)
    evaluation = stage_done(layout, i, "evaluate") or run_evaluate(cfg, layout, plan, runs)
    promotion = stage_done(layout, i, "promote") or run_promote(
        cfg, layout, plan, evaluation, train, runs, tags
    )
    stages.record_lineage(layout, i, f"{run}: iteration {i} (code {tags.get('git_commit')})")
    row = iteration_artifact(layout, i, selfplay, train, evaluation, promotion)
    record.finish(cfg, layout, child)
    return row
