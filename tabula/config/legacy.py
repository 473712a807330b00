"""How configs written by older versions read: what a run frozen then ran with.

A run's ``params.yaml`` is frozen on its first start, with every field of that day, and is read
again on every resume, by ``dvc repro`` and by ``tabula reproduce``. When a field is added or a
default changes, such a file must still mean what it ran with. Each rule here takes the raw
mapping of one section (or of the whole config) before validation and returns it with what the
old file meant spelled out; `tabula.config.models` applies them. Nothing else of the package is
imported.

Every config this version writes says its format (``pipeline.config_version``, `CONFIG_VERSION`),
so a field it leaves out reads as that format's default. A file without the marker is either one
written before the marker existed in full (format 1: a frozen run's params.yaml, a copy of a
preset of that time) or a user's partial file (today's format).
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
#: The format of the configs this version writes (``pipeline.config_version``): 15 since the
#: quick start learns for 0.2 hours, 14 since it learned for 0.19 hours on the last two
#: iterations' games, 13 since a
#: budgeted run's last iteration stretches to the games that fit in its budget, 12 since the
#: quick start trains on the last three iterations' games, 11 since it trained on the last
#: five, 10 since an
#: iteration in turn for the anchors skips them when the run's last is near, 9 since the
#: quick start learns for 0.18 hours, 8 since the
#: quick start plays its anchors every sixth iteration, 7 since a
#: budgeted run's last iteration shrinks to the games that fit in its budget, 6 since the
#: quick start is a wall-clock budget with anchor games every third iteration, 5 since the
#: quick start's network takes the liberty planes, 4 since the
#: default learning rate is three times the paper's, 3 since the
#: default took KataGo's playout caps as KataGo runs them, 2 since the quick start took the
#: laptop preset's settings (docs/configuration.md); 1 before, when no file said its format.
CONFIG_VERSION = 15
#: Per older format, the fields whose default changed when the next format came, and what a file
#: of that format meant by leaving them out. Format 1 (2 to come): the search's early passes and
#: own-eye fills (allowed until these switches came, off by default since), and the switches
#: whose defaults changed when the quick start took the laptop preset's settings. Format 2 (3 to
#: come): the playout caps' fast searches noisy and recorded, and `steps` every iteration. Format
#: 3 (4 to come): the paper's learning rates. Format 4 (5 to come): the 17 planes of stones alone.
#: Format 5 (6 to come): no budget of its own, a budget's end at the first boundary past it, and
#: the anchors and the random player every iteration. Format 6 (7 to come): a budget's last
#: iteration whole or not at all. Format 7 (8 to come): the anchors every third iteration.
#: Format 8 (9 to come): nine minutes of learning (0.15 hours). Format 9 (10 to come): the
#: anchors in every iteration in turn, however near the run's last. Format 10 (11 to come): a
#: window of the last 3,840 games (ten of the quick start's iterations). Format 11 (12 to come):
#: a window of the last 1,920 games (five of them). Format 12 (13 to come): a budget's last
#: iteration planned as it was when the budget was planned, never stretched. Format 13 (14 to
#: come): 10.8 minutes of learning (0.18 hours) on a window of the last 1,152 games (three
#: iterations). Format 14 (15 to come): 11.4 minutes of learning (0.19 hours).
CHANGED_AFTER: dict[int, dict[tuple[str, str], Any]] = {
    1: {
        ("search", "early_pass"): True,
        ("search", "fill_own_eyes"): True,
        ("network", "aux_heads"): False,
        ("search", "algorithm"): "puct",
        ("selfplay", "full_search_fraction"): 1.0,
        ("training", "value_target_mix"): 0.0,
        ("evaluation", "gating"): True,
    },
    2: {
        ("selfplay", "quiet_fast_searches"): False,
        ("selfplay", "record_fast_rows"): True,
        ("training", "samples_per_row"): None,
    },
    3: {
        ("training", "lr_values"): [0.01, 0.001, 0.0001],
    },
    4: {
        ("network", "liberties"): False,
    },
    5: {
        ("pipeline", "core_hours"): None,
        ("pipeline", "hours"): None,
        ("pipeline", "budget_overshoot"): None,
        ("evaluation", "anchor_every"): 1,
        ("evaluation", "random_every"): 1,
    },
    6: {
        ("pipeline", "budget_shrink"): None,
    },
    7: {
        ("evaluation", "anchor_every"): 3,
    },
    8: {
        ("pipeline", "hours"): 0.15,
    },
    9: {
        ("evaluation", "anchor_skip_near_last"): False,
    },
    10: {
        ("training", "window_games"): 3840,
    },
    11: {
        ("training", "window_games"): 1920,
    },
    12: {
        ("pipeline", "budget_stretch"): None,
    },
    13: {
        ("pipeline", "hours"): 0.18,
        ("training", "window_games"): 1152,
    },
    14: {
        ("pipeline", "hours"): 0.19,
    },
}


def ran_before(version: int) -> dict[tuple[str, str], Any]:
    """What a file of format ``version`` means by each field it leaves out whose default has
    changed since: the reading of the earliest format that changed it."""
    fields: dict[tuple[str, str], Any] = {}
    for older in range(CONFIG_VERSION - 1, version - 1, -1):
        fields.update(CHANGED_AFTER[older])
    return fields


def switches_as_they_ran(data: Any) -> Any:
    """A whole config of an older format (``pipeline.config_version`` below `CONFIG_VERSION`,
    or no marker and written in full: every run frozen before the marker, or a copy of a preset
    of that time, is format 1) gets the value each field of `ran_before` ran with where it leaves
    the field out, not today's default, and says its format. A partial config without the marker
    (a user's file of a few fields) and any file of today's format get today's defaults."""
    if not isinstance(data, dict):
        return data
    pipeline = data.get("pipeline")
    if isinstance(pipeline, dict) and "config_version" in pipeline:
        version = pipeline["config_version"]
        if type(version) is not int or not 1 <= version < CONFIG_VERSION:
            return data  # today's, or bad: validation says which
    elif _written_in_full(data):
        version = 1
    else:
        return data
    fields = ran_before(version)
    data = dict(data)
    for name in {name for name, _ in fields} | {"pipeline"}:
        if name not in data:
            data[name] = {}
        if isinstance(data[name], dict):  # anything else is left for validation to report
            data[name] = dict(data[name])
    for (name, field), value in fields.items():
        if isinstance(data[name], dict):
            data[name].setdefault(field, value)
    if isinstance(data["pipeline"], dict):
        data["pipeline"]["config_version"] = version
    return data


def newer_format(data: Any) -> int | None:
    """The format a config says it is written in when that is newer than `CONFIG_VERSION` (so
    it is refused as such before its unknown fields are), else None."""
    pipeline = data.get("pipeline") if isinstance(data, dict) else None
    version = pipeline.get("config_version") if isinstance(pipeline, dict) else None
    return version if type(version) is int and version > CONFIG_VERSION else None


def _written_in_full(data: dict) -> bool:
    return all(
        isinstance(data.get(name), dict) and all(field in data[name] for field in fields)
        for name, fields in ALWAYS_WRITTEN.items()
    )


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
