"""The ratings, tables and learning-curve figure of ``bench/strength.py`` (its rows and pairs as
that script builds them: one row per config, one pair per head-to-head match of two champions)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from tabula.elo import fit_ratings
from tabula.ladder import fixed_elos
from tasks.run.cputime import CORE_HOUR
from tasks.run.results import load_results, results_from_rows

LEVELS = (1, 5, 10)  # the GnuGo levels of the ladder
#: The champions' games at the deeper budget: a store of their own beside each config's
#: ``ladder``, fitted apart, so no rating mixes them with the games at the usual budget (the
#: same player, another strength).
DEEP_LADDER = "ladder-deep"
#: The moonshot (docs/strength.md): a day on two cores wins 90% against GnuGo level 10.
MOONSHOT_CORE_HOURS, MOONSHOT_LEVEL, MOONSHOT_SCORE = 48.0, 10, 0.9


def add_elo(
    rows: list[dict[str, Any]], pairs: list[dict[str, Any]], workdir: Path
) -> dict[str, float]:
    """Elo of every rated checkpoint, fitted over all ladder and head-to-head games with GnuGo
    held fixed; each pair's gap is the difference of its two champions' fitted Elo. The
    champions' games at the deeper budget (`DEEP_LADDER`) are fitted apart, on the same scale,
    into each row's ``deep``."""
    anchors = fixed_elos([f"gnugo-l{level}" for level in LEVELS], 9)
    stores = [workdir / row["config"] / "ladder" for row in rows] + [workdir / "head-to-head"]
    results = [r for store in stores if store.exists()
               for r in results_from_rows(load_results(store))]  # fmt: skip
    fit = fit_ratings(results, anchors=anchors) if results else {}
    for row in rows:
        for point in row["checkpoints"].values():
            point["elo"] = _elo(fit.get(point["player"]))
    for pair in pairs:
        a, b = (fit.get(p) for p in pair["players"])
        pair["elo_gap"] = None if a is None or b is None else a.elo - b.elo
    deep_stores = [workdir / row["config"] / DEEP_LADDER for row in rows]
    deep = [r for store in deep_stores if store.exists()
            for r in results_from_rows(load_results(store))]  # fmt: skip
    deep_fit = fit_ratings(deep, anchors=anchors) if deep else {}
    for row in rows:
        if row.get("deep"):
            row["deep"]["elo"] = _elo(deep_fit.get(row["deep"]["player"]))
    return anchors


def _elo(r: Any) -> dict[str, float] | None:
    """A fitted rating as the JSON keeps it (None: not rated)."""
    return None if r is None else {"elo": r.elo, "low": r.low, "high": r.high}


def extrapolate(
    row: dict[str, Any], anchors: dict[str, float], core_hours: float = MOONSHOT_CORE_HOURS
) -> dict[str, Any]:
    """Elo against log2(core-hours), a weighted least-squares line through the run's rated
    checkpoints that both won and lost against GnuGo (a checkpoint that only lost has the fit's
    prior for an Elo, not a measurement), each weighted by its 95% interval; its Elo per
    doubling of compute and what it gives at ``core_hours``, with 95% intervals from the
    points' own errors, beside the Elo the moonshot needs (``MOONSHOT_SCORE`` against GnuGo
    level ``MOONSHOT_LEVEL``), widened when the points scatter about the line more than their
    errors allow (three or more points). Each point's Elo is the joint fit's, which its prior
    (two virtual draws) pulls a little toward the mean; a straight line in log compute is the
    optimistic reading, as the curves of AlphaGo Zero and KataGo bend down as they go
    (``fitted`` says how many points carry it; fewer than two give no line)."""
    target = anchors[f"gnugo-l{MOONSHOT_LEVEL}"] + 400.0 * math.log10(
        MOONSHOT_SCORE / (1.0 - MOONSHOT_SCORE)
    )
    points = [
        (math.log2(p["cpu_s"] / CORE_HOUR), p["elo"])
        for p in row["checkpoints"].values()
        if p["cpu_s"] > 0 and p["elo"] and _won_and_lost(p["matches"])
    ]
    out: dict[str, Any] = {"core_hours": core_hours, "target_elo": target, "fitted": len(points)}
    if len({x for x, _ in points}) < 2:
        return out
    x = np.array([[1.0, px] for px, _ in points])
    y = np.array([e["elo"] for _, e in points])
    w = np.array([(3.92 / max(e["high"] - e["low"], 1e-9)) ** 2 for _, e in points])  # 1 / sd^2
    cov = np.linalg.inv(x.T @ (w[:, None] * x))
    a, b = cov @ (x.T @ (w * y))
    if len(points) > 2:  # reduced chi-square: scatter beyond the points' errors widens all
        cov *= max(1.0, float(w @ (y - x @ (a, b)) ** 2) / (len(points) - 2))
    at = np.array([1.0, math.log2(core_hours)])
    elo, se = float(at @ (a, b)), float(math.sqrt(at @ cov @ at))
    slope_se = float(math.sqrt(cov[1, 1]))
    out.update(
        elo_per_doubling=float(b),
        elo_per_doubling_interval=[float(b) - 1.96 * slope_se, float(b) + 1.96 * slope_se],
        elo=elo,
        interval=[elo - 1.96 * se, elo + 1.96 * se],
        core_hours_to_target=_crossing(float(a), float(b), target),
    )
    return out


def _crossing(a: float, b: float, target: float) -> float | None:
    """Core-hours where the line ``a + b log2(h)`` reaches ``target``: None if it never does
    (no gain per doubling) or only past 2^40 core-hours."""
    doublings = (target - a) / b if b > 0 else math.inf
    return 2.0**doublings if doublings <= 40 else None


def _won_and_lost(matches: list[dict[str, Any]]) -> bool:
    """A game won and a game lost among the checkpoint's matches: its Elo is measured."""
    rates = [m["win_rate"] for m in matches if m["win_rate"] is not None]
    return any(r > 0.0 for r in rates) and any(r < 1.0 for r in rates)


def extrapolation_line(name: str, e: dict[str, Any]) -> str:
    """One printed line of `extrapolate`'s result."""
    head = (f"{name}: the moonshot ({MOONSHOT_SCORE:.0%} against GnuGo level {MOONSHOT_LEVEL})"
            f" needs Elo {e['target_elo']:+.0f}")  # fmt: skip
    if "elo" not in e:
        return f"{head}; {e['fitted']} checkpoint(s) with a win and a loss: no line to extend yet"
    (low, high), (elo_low, elo_high) = e["elo_per_doubling_interval"], e["interval"]
    reach = e["core_hours_to_target"]
    if low <= 0:
        tail = "; its interval includes no gain at all"
    elif reach is None:
        tail = "; the line does not reach the target"
    else:
        tail = f"; the line reaches the target at {reach:,.0f} core-hours"
    return (
        f"{head}; {e['elo_per_doubling']:+.0f} Elo per doubling of compute [{low:+.0f}, "
        f"{high:+.0f}] over {e['fitted']} checkpoints gives {e['elo']:+.0f} [{elo_low:+.0f}, "
        f"{elo_high:+.0f}] at {e['core_hours']:g} core-hours{tail}"
    )


def pace_line(name: str, pace: dict[str, Any] | None) -> str | None:
    """A warning for a run whose CPU-seconds bought less self-play work as it went
    (`bench.provenance.pace`), None otherwise: its budget was not the same along the run."""
    if pace is None or not pace["slowed"]:
        return None
    return (
        f"{name}: in its last third a CPU-second of self-play bought {pace['share']:.0%} of the"
        f" network evaluations it bought in its first ({pace['last_third']:,.0f} against"
        f" {pace['first_third']:,.0f}): the machine slowed, or its network grew"
    )


def _pct(m: dict[str, Any]) -> str:
    if m["win_rate"] is None:
        return "—"
    return f"{m['win_rate']:.0%} [{m['low']:.0%}, {m['high']:.0%}] of {m['games']}"


def table(rows: list[dict[str, Any]], budget: str, simulations: int) -> Table:
    t = Table(title=f"strength at budget {budget}: champion vs GnuGo ({simulations} simulations)")
    columns = ("config", "CPU-h used", "learning share", "iterations", "games", "positions",
               "champion",
               "vs GnuGo l1 (95%)", "margin vs l1", "higher levels", "Elo (l1 = 0)")  # fmt: skip
    for column in columns:
        t.add_column(column)
    for row in rows:
        best = row["checkpoints"].get(str(row["champion"]), {})
        matches = best.get("matches", [])
        t.add_row(
            row["config"] + (f" (failed: {row['failed']})" if row["failed"] else ""),
            f"{row['cpu_s'] / CORE_HOUR:.2f}",
            "—" if row.get("learning_share") is None else f"{row['learning_share']:.0%}",
            str(row["iterations"]),
            f"{row['games']:,}",
            f"{row['positions']:,}",
            str(row["champion"]),
            *_ladder_cells(matches, best.get("elo")),
        )
    return t


def _ladder_cells(matches: list[dict[str, Any]], elo: dict[str, float] | None) -> list[str]:
    """A champion's ladder as the tables show it: level 1 (95%), its margin, the higher
    levels, the fitted Elo."""
    first = matches[0] if matches else None
    return [
        _pct(first) if first else "—",
        "—" if not first or first["mean_margin"] is None else f"{first['mean_margin']:+.1f}",
        ", ".join(f"l{m['level']}: {_pct(m)}" for m in matches[1:]) or "—",
        "—" if not elo else f"{elo['elo']:+.0f} [{elo['low']:+.0f}, {elo['high']:+.0f}]",
    ]


def deep_table(rows: list[dict[str, Any]], budget: str, simulations: int) -> Table:
    """The champions at the deeper budget, rated apart from the table at the usual one."""
    t = Table(title=f"strength at budget {budget}: champion vs GnuGo ({simulations} simulations)")
    for column in ("config", "champion", "vs GnuGo l1 (95%)", "margin vs l1", "higher levels",
                   "Elo (l1 = 0)"):  # fmt: skip
        t.add_column(column)
    for row in rows:
        deep = row.get("deep") or {}
        cells = _ladder_cells(deep.get("matches", []), deep.get("elo"))
        t.add_row(row["config"], str(row["champion"]), *cells)
    return t


#: The share of games a champion searching deeper should win against itself at the usual
#: budget: a value head that ranks positions under good play gains from more search.
SEARCH_PAYS_GOAL = 0.70


def search_table(rows: list[dict[str, Any]]) -> Table:
    """Each champion searching deeper against itself at the usual budget (``search_pays``)."""
    t = Table(title="search pays: each champion searching deeper against itself")
    for column in ("config", "champion", "simulations", "deeper's win rate (95%)",
                   "deeper's mean margin", f"goal >= {SEARCH_PAYS_GOAL:.0%}"):  # fmt: skip
        t.add_column(column)
    for row in rows:
        match = row.get("search_pays")
        if not match:
            continue
        deep, usual = match["simulations"]
        margin = match["mean_margin"]
        met = match["win_rate"] is not None and match["win_rate"] >= SEARCH_PAYS_GOAL
        t.add_row(
            row["config"],
            str(row["champion"]),
            f"{deep} vs {usual}",
            _pct(match),
            "—" if margin is None else f"{margin:+.1f}",
            "met" if met else "not met",
        )
    return t


def pairs_table(pairs: list[dict[str, Any]], simulations: int) -> Table:
    """Head-to-head matches of the configs' champions: the first config's record."""
    t = Table(title=f"champions head to head ({simulations} simulations each side)")
    for column in ("match", "games", "first's win rate (95%)", "first's mean margin", "Elo gap"):
        t.add_column(column)
    for pair in pairs:
        t.add_row(
            f"{pair['first']} vs {pair['second']}",
            str(pair["games"]),
            _pct(pair),
            "—" if pair["mean_margin"] is None else f"{pair['mean_margin']:+.1f}",
            "—" if pair["elo_gap"] is None else f"{pair['elo_gap']:+.0f}",
        )
    return t


def plot(rows: list[dict[str, Any]], path: Path, budget: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for row in rows:
        points = sorted(
            (p["cpu_s"] / CORE_HOUR, p["elo"], p["matches"][0])
            for p in row["checkpoints"].values()
            if p["elo"]
        )
        if not points:
            continue
        x = [p[0] for p in points]
        y = [p[1]["elo"] for p in points]
        err = [[p[1]["elo"] - p[1]["low"] for p in points],
               [p[1]["high"] - p[1]["elo"] for p in points]]  # fmt: skip
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=row["config"])
        margins = [(p[0], p[2]["mean_margin"]) for p in points if p[2]["mean_margin"] is not None]
        bx.plot([m[0] for m in margins], [m[1] for m in margins], marker="o", label=row["config"])
    for axis in (ax, bx):
        axis.axhline(0.0, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel("CPU core-hours (user + system, all processes of the run)")
        axis.legend()
    ax.text(0.0, 0.0, " GnuGo level 1", va="bottom", fontsize=8, color="grey")
    ax.set_ylabel("Elo (GnuGo level 1 = 0, 95% interval)")
    bx.set_ylabel("mean score margin vs GnuGo level 1 (points)")
    fig.suptitle(f"tabula 9x9: strength against compute (budget {budget})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
