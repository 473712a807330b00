"""How configs written by older versions read: what a run frozen then ran with.

A run's ``params.yaml`` is frozen on its first start, with every field of that day, and is read
again on every resume, by ``dvc repro`` and by ``tabula reproduce``. When a field is added or a
default changes, such a file must still mean what it ran with. Each rule here takes the raw
mapping of one section (or of the whole config) before validation and returns it with what the
old file meant spelled out; `tabula.config.models` applies them. Nothing else of the package is
imported.
"""

from __future__ import annotations

from typing import Any

#: Fields every full config has held since the first (a frozen params.yaml is one): a config
#: that holds them all was written in full, when it was written.
ALWAYS_WRITTEN = {
    "rules": ("board_size", "komi"),
    "network": ("blocks", "filters", "value_hidden"),
    "search": ("simulations", "c_puct", "fpu", "dirichlet_epsilon", "virtual_loss"),
    "selfplay": ("games", "workers", "resign_disabled_fraction", "v_resign"),
    "training": ("batch_size", "steps", "momentum", "weight_decay", "window_games"),
    "evaluation": ("gating_games", "gating_threshold", "simulations"),
    "pipeline": ("name", "iterations", "seed"),
}
#: Fields added after the first runs were frozen whose default is not what a run frozen before
#: the field existed ran with, and that value: the search's early passes and own-eye fills
#: (allowed until these switches came, off by default since), and the switches whose defaults
#: changed when the quick start took the laptop preset's settings (issue 15).
RAN_BEFORE = {
    ("search", "early_pass"): True,
    ("search", "fill_own_eyes"): True,
    ("network", "aux_heads"): False,
    ("search", "algorithm"): "puct",
    ("selfplay", "full_search_fraction"): 1.0,
    ("training", "value_target_mix"): 0.0,
    ("evaluation", "gating"): True,
}


def switches_as_they_ran(data: Any) -> Any:
    """A whole config written in full before a field of ``RAN_BEFORE`` existed (every run frozen
    then, or a copy of a preset of that time) gets the value it ran with, not today's default;
    a partial config (a user's file of a few fields) gets today's defaults. So a config file
    that spells out every section leaves none of these fields to the default: it names them."""
    if not isinstance(data, dict):
        return data
    written_in_full = all(
        isinstance(data.get(name), dict) and all(field in data[name] for field in fields)
        for name, fields in ALWAYS_WRITTEN.items()
    )
    if not written_in_full:
        return data
    data = {**data, **{name: dict(data[name]) for name in ALWAYS_WRITTEN}}
    for (name, field), value in RAN_BEFORE.items():
        data[name].setdefault(field, value)
    return data


def step_boundaries_given(training: Any) -> Any:
    """A training section that gives lr_boundaries without lr_schedule (every run frozen before
    lr_schedule existed) means them as global steps, as it ran."""
    if isinstance(training, dict) and "lr_boundaries" in training and "lr_schedule" not in training:
        training = {**training, "lr_schedule": "steps"}
    return training


def gnugo_as_anchor(evaluation: Any) -> Any:
    """An evaluation section frozen before `anchors` names its one GnuGo as ``gnugo: COMMAND``:
    that GnuGo becomes an anchor, played every iteration from the empty board, as it ran."""
    if isinstance(evaluation, dict) and "gnugo" in evaluation:
        evaluation = dict(evaluation)
        command = evaluation.pop("gnugo")
        extra = [] if command is None else [f"gtp:{command}"]
        evaluation["anchors"] = [*evaluation.get("anchors", []), *extra]  # null: no GnuGo
        evaluation.setdefault("anchor_every", 1)
        evaluation.setdefault("opening_plies", 0)
    return evaluation
