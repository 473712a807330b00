"""What an iteration reports: the self-play totals, the summary row, the Prefect artifact."""

from __future__ import annotations

from typing import Any

from prefect.artifacts import create_markdown_artifact

from tasks.layout import RunLayout

_SUMMED = (
    "games",
    "positions",
    "simulations",
    "evaluations",
    "resigned_games",
    "resign_disabled_games",
    "false_positives",
)


def selfplay_metrics(workers: list[dict[str, Any]], fp_target: float) -> dict[str, Any]:
    """Totals over the workers of one iteration, and the v_resign for the next one."""
    from tabula.resign import calibrate_samples

    totals: dict[str, Any] = {k: sum(w.get(k, 0) or 0 for w in workers) for k in _SUMMED}
    seconds = max((w.get("seconds", 0.0) for w in workers), default=0.0) or 1e-9
    games = max(totals["games"], 1)
    totals["mean_game_length"] = totals["positions"] / games
    totals["resign_rate"] = totals["resigned_games"] / games
    totals["positions_per_s"] = totals["positions"] / seconds
    totals["simulations_per_s"] = totals["simulations"] / seconds
    totals["evaluations_per_s"] = totals["evaluations"] / seconds
    samples = [s for w in workers for s in w.get("resign_samples", [])]
    threshold = workers[0].get("v_resign") if workers else None
    v_next, fp_rate = calibrate_samples(samples, threshold, target=fp_target)
    totals["v_resign_next"] = v_next
    totals["false_positive_rate"] = fp_rate
    return totals


def summary_row(i: int, selfplay: dict, train: dict, evaluation: dict, promotion: dict) -> dict:
    elo = evaluation.get("elo") or {}
    gate = evaluation.get("gate", {})
    seconds = sum(s.get("seconds", 0.0) for s in (selfplay, train)) + gate.get("seconds", 0.0)
    seconds += sum(m.get("seconds", 0.0) for m in evaluation.get("anchors", {}).values())
    return {
        "iteration": i,
        "promoted": promotion.get("promoted"),
        "win_rate": gate.get("win_rate"),
        "elo": elo.get("elo"),
        "elo_low": elo.get("low"),
        "elo_high": elo.get("high"),
        "positions": selfplay.get("positions"),
        "games": selfplay.get("games"),
        "v_resign": selfplay.get("v_resign_used"),
        "false_positive_rate": selfplay.get("false_positive_rate"),
        "loss": train.get("loss"),
        "policy_loss": train.get("policy_loss"),
        "value_loss": train.get("value_loss"),
        "stage_seconds": seconds,
        "vs_random": evaluation.get("anchors", {}).get("random", {}).get("score"),
    }


def with_final_ratings(rows: list[dict], ratings: list[dict], layout: RunLayout) -> list[dict]:
    """``rows`` with each iteration's Elo from ``ratings``, the fit over every game of the run.

    An iteration's own row holds the fit made when it finished; later games move every rating,
    so the run's closing table uses one fit for all, the one the Elo plot shows.
    """
    fit = {r["player"]: r for r in ratings}
    out = []
    for row in rows:
        me = fit.get(layout.model_id(row["iteration"]))
        if me is not None:
            row = {**row, "elo": me["elo"], "elo_low": me["low"], "elo_high": me["high"]}
        out.append(row)
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "—" if value is None else str(value)


def iteration_artifact(
    layout: RunLayout, i: int, selfplay: dict, train: dict, evaluation: dict, promotion: dict
) -> dict[str, Any]:
    """Publish the iteration's summary as a Prefect markdown artifact; return the row."""
    row = summary_row(i, selfplay, train, evaluation, promotion)
    gate = evaluation.get("gate", {})
    lines = [
        f"# {layout.run}: iteration {i}",
        "",
        "| what | value |",
        "| --- | --- |",
        *(f"| {k} | {_fmt(v)} |" for k, v in row.items()),
        f"| gate decision | {gate.get('reason', '—')} ({gate.get('wins')}–{gate.get('losses')}) |",
        f"| champion | iteration {promotion.get('champion')} |",
    ]
    key = f"{layout.run}-iter-{i:04d}".lower().replace("_", "-").replace("/", "-")
    create_markdown_artifact(
        markdown="\n".join(lines), key=key, description=f"tabula {layout.run} iteration {i}"
    )
    return row
