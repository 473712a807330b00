"""The typed config: presets, the embedded default, overrides, one-line errors, round trips."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tabula.config import (
    Config,
    ConfigError,
    apply_overrides,
    config_to_flat_dict,
    dump_config,
    load_config,
    parse_config,
)

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "configs").glob("*.yaml"))
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def _sections(model: type = Config) -> dict[str, type]:
    return {name: field.annotation for name, field in model.model_fields.items()}


# --- presets and the embedded default ----------------------------------------------------


def test_the_three_presets_exist() -> None:
    assert {p.name for p in PRESETS} >= {"quickstart.yaml", "9x9.yaml", "19x19-paper.yaml"}


@pytest.mark.parametrize("path", [ROOT / "params.yaml", *PRESETS], ids=lambda p: p.name)
def test_preset_loads_and_names_every_field(path: Path) -> None:
    cfg = load_config(path)
    raw = yaml.safe_load(path.read_text())
    # A preset spells out every field, so nothing silently inherits the quick-start default.
    assert list(raw) == list(Config.model_fields)
    for section, model in _sections().items():
        assert set(raw[section]) == set(model.model_fields), section
    assert cfg.pipeline.name == path.stem or path.name == "params.yaml"


def _package_imports(module: str) -> list[str]:
    """What ``tabula/config/<module>.py`` imports of the package itself."""
    tree = ast.parse((ROOT / "tabula" / "config" / f"{module}.py").read_text())
    names = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            names += [f"{n.module}.{a.name}" for a in n.names]
        elif isinstance(n, ast.Import):
            names += [a.name for a in n.names]
    return [name for name in names if name.startswith("tabula.")]


def test_the_package_imports_point_one_way() -> None:
    # legacy <- models <- io <- __init__: the models never reach back into the I/O half (they
    # may use constants of the core, e.g. the board-size bounds of tabula.go.coords), and the
    # rules for old files import nothing of the package.
    assert not _package_imports("legacy")
    of_config = [name for name in _package_imports("models") if name.startswith("tabula.config")]
    assert of_config == ["tabula.config.legacy"]


def test_embedded_default_equals_params_yaml_and_quickstart() -> None:
    default = load_config(None)
    assert default == Config()
    assert load_config(ROOT / "params.yaml") == default
    assert load_config(QUICKSTART) == default


def test_a_format_5_file_runs_without_a_budget_and_plays_anchors_every_iteration() -> None:
    data = Config().model_dump()
    data["pipeline"]["config_version"] = 5
    for section, field in (("pipeline", "core_hours"), ("pipeline", "hours"),
                           ("pipeline", "budget_overshoot"), ("evaluation", "anchor_every"),
                           ("evaluation", "random_every")):  # fmt: skip
        data[section].pop(field)
    cfg = Config.model_validate(data)
    assert (cfg.pipeline.core_hours, cfg.pipeline.hours, cfg.pipeline.budget_overshoot) == (
        None,
        None,
        None,
    )
    assert (cfg.evaluation.anchor_every, cfg.evaluation.random_every) == (1, 1)
    assert cfg.pipeline.config_version == 5
    today = Config()
    assert (today.pipeline.hours, today.evaluation.anchor_every) == (0.2, 6)


@pytest.mark.parametrize(
    ("version", "section", "field", "then", "now"),
    [
        (6, "pipeline", "budget_shrink", None, 0.25),  # the last iteration whole or not at all
        (7, "evaluation", "anchor_every", 3, 6),  # the anchors every third iteration
        (8, "pipeline", "hours", 0.15, 0.2),  # nine minutes of learning
        (9, "evaluation", "anchor_skip_near_last", False, True),  # every iteration in turn
        (10, "training", "window_games", 3840, 768),  # the last ten iterations' games
        (11, "training", "window_games", 1920, 768),  # the last five
        (12, "pipeline", "budget_stretch", None, 0.25),  # the last iteration never stretched
        (13, "pipeline", "hours", 0.18, 0.2),  # 10.8 minutes of learning
        (13, "training", "window_games", 1152, 768),  # the last three iterations' games
        (14, "pipeline", "hours", 0.19, 0.2),  # 11.4 minutes of learning
    ],
)
def test_a_file_of_an_older_format_reads_a_field_left_out_as_it_ran(
    version: int, section: str, field: str, then: object, now: object
) -> None:
    data = Config().model_dump()
    data["pipeline"]["config_version"] = version
    data[section].pop(field)
    assert getattr(getattr(Config.model_validate(data), section), field) == then
    assert getattr(getattr(Config(), section), field) == now


def test_paper_preset_has_the_papers_numbers() -> None:
    cfg = load_config(ROOT / "configs" / "19x19-paper.yaml")
    assert (cfg.rules.board_size, cfg.rules.komi) == (19, 7.5)
    assert (cfg.network.blocks, cfg.network.filters, cfg.network.value_hidden) == (19, 256, 256)
    s = cfg.search
    assert (s.simulations, s.dirichlet_alpha, s.dirichlet_epsilon, s.leaves_per_game) == (
        1600,
        0.03,
        0.25,
        8,
    )
    sp = cfg.selfplay
    assert (sp.games, sp.temperature_moves) == (25000, 30)
    assert (sp.resign_disabled_fraction, sp.resign_false_positive_target) == (0.1, 0.05)
    t = cfg.training
    assert (t.batch_size, t.window_games, t.momentum, t.weight_decay) == (2048, 500000, 0.9, 1e-4)
    assert t.lr_boundaries == [400000, 600000] and t.lr_values == [1e-2, 1e-3, 1e-4]
    assert t.checkpoint_every == 1000
    e = cfg.evaluation
    assert (e.gating_games, e.gating_threshold, e.simulations) == (400, 0.55, 1600)


def test_small_presets_are_nine_by_nine_with_scaled_defaults() -> None:
    for name in ("quickstart.yaml", "9x9.yaml"):
        cfg = load_config(ROOT / "configs" / name).resolve()
        assert cfg.rules.board_size == 9
        assert cfg.search.dirichlet_alpha == pytest.approx(0.03 * 361 / 81)
        assert cfg.selfplay.temperature_moves == 7
        assert cfg.pipeline.registered_model == f"tabula-{cfg.pipeline.name}"


# --- scaled defaults -----------------------------------------------------------------------


@pytest.mark.parametrize("N", range(5, 20))
def test_scaled_defaults_follow_the_rule_and_match_the_paper_at_19(N: int) -> None:
    cfg = load_config(None, [f"rules.board_size={N}"]).resolve()
    assert cfg.search.dirichlet_alpha == pytest.approx(0.03 * 361 / N**2)
    assert cfg.selfplay.temperature_moves == round(30 * N**2 / 361)
    assert cfg.pipeline.registered_model == "tabula-quickstart"  # one per run: its name
    assert cfg.resolve() == cfg  # idempotent
    if N == 19:
        assert (cfg.search.dirichlet_alpha, cfg.selfplay.temperature_moves) == (0.03, 30)


def test_resolve_keeps_explicit_values() -> None:
    overrides = [
        "search.dirichlet_alpha=0.5",
        "selfplay.temperature_moves=0",
        "pipeline.registered_model=mine",
    ]
    cfg = load_config(None, overrides).resolve()
    assert cfg.search.dirichlet_alpha == 0.5
    assert cfg.selfplay.temperature_moves == 0
    assert cfg.pipeline.registered_model == "mine"


# --- overrides -----------------------------------------------------------------------------


def test_overrides_set_nested_keys_lists_null_and_bools() -> None:
    cfg = load_config(
        ROOT / "params.yaml",
        [
            "search.simulations=200",
            "training.lr_boundaries=[10, 20, 30]",
            "training.lr_values=[1e-1, 1e-2, 1e-3, 1e-4]",
            "selfplay.v_resign=null",
            "training.bf16=true",
            "evaluation.anchors=[gnugo-l5, gtp:gnugo --mode gtp --level 2]",
            "rules.komi=-0.5",
        ],
    )
    assert cfg.search.simulations == 200
    assert cfg.training.lr_boundaries == [10, 20, 30]
    assert cfg.training.lr_values == [0.1, 0.01, 0.001, 0.0001]
    assert cfg.selfplay.v_resign is None
    assert cfg.training.bf16 is True
    assert cfg.evaluation.anchors == ["gnugo-l5", "gtp:gnugo --mode gtp --level 2"]
    assert cfg.rules.komi == -0.5


def test_a_run_frozen_with_one_gnugo_command_reads_it_as_an_anchor() -> None:
    data = Config().model_dump()
    data["evaluation"].pop("anchors")
    data["evaluation"]["gnugo"] = "gnugo --mode gtp --level 10"
    data["evaluation"].pop("opening_plies")
    data["evaluation"].pop("anchor_every")
    evaluation = Config.model_validate(data).evaluation
    assert evaluation.anchors == ["gtp:gnugo --mode gtp --level 10"]
    assert (evaluation.anchor_every, evaluation.opening_plies) == (1, 0)  # as it was played
    data["evaluation"]["gnugo"] = None
    assert Config.model_validate(data).evaluation.anchors == []


def test_two_anchors_that_would_play_under_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="two anchors would play as 'gnugo-l1'"):
        load_config(None, ["evaluation.anchors=[gnugo-l1, 'gtp:gnugo --mode gtp --level 1']"])


def test_a_score_utility_without_the_score_head_is_refused_in_one_line() -> None:
    overrides = ["network.aux_heads=false", "search.score_utility=0.1"]
    with pytest.raises(ConfigError, match="search.score_utility needs the score head") as info:
        load_config(None, overrides)
    assert "\n" not in str(info.value)
    assert load_config(None, ["search.score_utility=0.1"]).search.score_utility == 0.1


@pytest.mark.parametrize("bad", ["random", "gnugo-l0", "gnugo-l11", "gnugo", "gtp:", "gtp:  "])
def test_unknown_anchors_are_one_line_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="gnugo-l1 .. gnugo-l10") as info:
        load_config(None, [f"evaluation.anchors=['{bad}']"])
    assert "\n" not in str(info.value)


def test_later_override_wins_and_input_is_not_mutated() -> None:
    data = {"search": {"simulations": 8}}
    out = apply_overrides(data, ["search.simulations=1", "search.simulations=2"])
    assert out == {"search": {"simulations": 2}}
    assert data == {"search": {"simulations": 8}}


def test_override_of_a_key_absent_from_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "partial.yaml"
    path.write_text("rules:\n  board_size: 13\n")
    cfg = load_config(path, ["network.blocks=2"])
    assert (cfg.rules.board_size, cfg.network.blocks) == (13, 2)


def test_string_fields_take_the_override_text_as_written() -> None:
    cfg = load_config(None, ["pipeline.name=2024", "pipeline.registered_model=0123"])
    assert (cfg.pipeline.name, cfg.pipeline.registered_model) == ("2024", "0123")
    assert load_config(None, ["pipeline.registered_model=null"]).pipeline.registered_model is None


def test_a_whole_section_can_be_overridden() -> None:
    cfg = load_config(None, ["rules={board_size: 7, komi: 0.5}"])
    assert (cfg.rules.board_size, cfg.rules.komi) == (7, 0.5)


# --- one-line errors -------------------------------------------------------------------------


def _error(text: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "x.yaml", overrides)
    message = str(info.value)
    assert "\n" not in message and message.startswith("x.yaml")
    return message


BAD_CONFIGS = {
    "unknown key": (
        "network:\n  filtres: 3\n",
        "x.yaml: network.filtres: unknown key (allowed: blocks, filters, value_hidden,",
    ),
    "unknown section": ("serch:\n  simulations: 3\n", "serch: unknown key (allowed: rules,"),
    "wrong type": ("search:\n  simulations: many\n", "search.simulations: must be an integer"),
    "float for an int": ("network:\n  blocks: 2.5\n", "network.blocks: must be an integer"),
    "quoted number": ("search:\n  c_puct: '1.5'\n", "search.c_puct: must be a number"),
    "out of range": ("search:\n  simulations: 0\n", "search.simulations: must be >= 1 (got 0)"),
    "board_size 4": ("rules:\n  board_size: 4\n", "rules.board_size: must be >= 5 (got 4)"),
    "board_size 20": ("rules:\n  board_size: 20\n", "rules.board_size: must be <= 19 (got 20)"),
    "komi not half": ("rules:\n  komi: 7.3\n", "rules.komi: must be a multiple of 0.5"),
    "bad enum": ("pipeline:\n  device: tpu\n", "pipeline.device: must be one of 'auto', 'cpu'"),
    "lr length": (
        "training:\n  lr_boundaries: [10, 20]\n  lr_values: [0.1, 0.01]\n",
        "training.lr_values: needs len(lr_boundaries) + 1 = 3 values (got 2)",
    ),
    "lr not increasing": (
        "training:\n  lr_boundaries: [20, 20]\n  lr_values: [0.1, 0.01, 0.001]\n",
        "training.lr_boundaries: must be strictly increasing",
    ),
    "section not a mapping": ("search: 5\n", "search: must be a mapping (got 5)"),
    "bad name": ("pipeline:\n  name: a/b\n", "pipeline.name: must be letters, digits"),
    "sprt order": ("evaluation:\n  sprt_elo1: -5\n", "evaluation.sprt_elo1: must be > sprt_elo0"),
    "not finite": ("search:\n  c_puct: .inf\n", "search.c_puct: must be a finite number"),
    "top-level list": ("- 1\n- 2\n", "x.yaml: top level must be a mapping of sections"),
    "empty file": ("", "top level must be a mapping of sections (rules, network"),
    "yaml syntax": ("rules:\n  board_size: 9\n   komi: 7.5\n", "x.yaml: line 3, column"),
    "duplicate key": ("rules:\n  komi: 1.5\n  komi: 2.5\n", "line 3, column 3: YAML syntax "),
}


@pytest.mark.parametrize("case", BAD_CONFIGS, ids=str)
def test_malformed_config_gives_one_line_naming_the_key(case: str) -> None:
    text, expected = BAD_CONFIGS[case]
    assert expected in _error(text)


def test_several_errors_report_the_first_and_count_the_rest() -> None:
    message = _error("search:\n  simulations: 0\n  c_puct: 0\n")
    assert message == "x.yaml: search.simulations: must be >= 1 (got 0) (and 1 more errors)"


BAD_OVERRIDES = {
    "no equals sign": ("search.simulations", "expected KEY=VALUE"),
    "unknown key": ("search.simulatons=3", "search.simulatons (allowed: algorithm, simulations,"),
    "unknown section": ("serch.simulations=3", "unknown key serch (allowed: rules,"),
    "below a value": ("search.simulations.x=3", "search.simulations is a value, not a section"),
    "empty key part": ("search..simulations=3", "empty key part"),
    "empty value": ("search.simulations=", "empty value"),
    "bad YAML value": ("training.lr_values=[0.1,", "YAML syntax error"),
}


@pytest.mark.parametrize("case", BAD_OVERRIDES, ids=str)
def test_bad_override_gives_one_line_naming_it(case: str) -> None:
    raw, expected = BAD_OVERRIDES[case]
    with pytest.raises(ConfigError) as info:
        load_config(None, [raw])
    message = str(info.value)
    assert "\n" not in message and expected in message and raw.split("=")[0] in message


def test_an_invalid_override_value_is_blamed_on_the_override() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(ROOT / "params.yaml", ["search.simulations=0"])
    assert str(info.value) == (
        f"{ROOT / 'params.yaml'} (override search.simulations=0): "
        "search.simulations: must be >= 1 (got 0)"
    )


PASSWORD_URIS = [
    ("mlflow_tracking_uri", "postgresql+psycopg2://u:s3cret@db/mlflow", "PGPASSWORD"),
    ("mlflow_tracking_uri", "https://u:s3cret@mlflow.example:5000", "MLFLOW_TRACKING_PASSWORD"),
    ("mlflow_artifact_root", "s3://key:s3cret@bucket/mlflow", "AWS_SECRET_ACCESS_KEY"),
    ("dvc_remote", "https://u:s3cret@dvc.example/remote", "dvc remote modify --local"),
    ("prefect_api_url", "http://u:s3cret@prefect:4200/api", "PREFECT_API_AUTH_STRING"),
    ("dask_address", "tls://u:s3cret@scheduler:8786", "TLS"),
]


@pytest.mark.parametrize(("field", "uri", "where"), PASSWORD_URIS)
def test_a_password_in_a_uri_field_is_refused_without_showing_it(field, uri, where) -> None:
    for source in ("override", "file"):
        with pytest.raises(ConfigError) as info:
            if source == "override":
                load_config(None, [f"pipeline.{field}={uri}"])
            else:
                parse_config(yaml.safe_dump({"pipeline": {field: uri}}))
        message = str(info.value)
        assert f"pipeline.{field}: holds a password" in message and where in message
        assert "s3cret" not in message and ":***@" in message


@pytest.mark.parametrize(
    "uri", ["postgresql://u@db/mlflow", "http://mlflow:5000", "sqlite:///mlflow/mlflow.db"]
)
def test_a_uri_with_a_user_but_no_password_is_taken(uri: str) -> None:
    assert (
        load_config(None, [f"pipeline.mlflow_tracking_uri={uri}"]).pipeline.mlflow_tracking_uri
        == uri
    )


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^.*nope\.yaml: file not found$"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00rules")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_every_field_has_a_description() -> None:
    for section, model in _sections().items():
        assert Config.model_fields[section].description
        for name, field in model.model_fields.items():
            assert field.description, f"{section}.{name}"


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


def test_models_are_frozen() -> None:
    cfg = Config()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError
        cfg.search.simulations = 3  # type: ignore[misc]


# --- flat dict and round trips ------------------------------------------------------------


def test_flat_dict_has_every_field_as_a_scalar() -> None:
    flat = config_to_flat_dict(load_config(None))
    n_fields = sum(len(model.model_fields) for model in _sections().values())
    assert len(flat) == n_fields
    assert flat["search.simulations"] == 16
    assert flat["training.lr_boundaries"] == "[2000, 2300]"
    assert flat["search.dirichlet_alpha"] is None
    assert all(v is None or isinstance(v, str | int | float | bool) for v in flat.values())
    assert config_to_flat_dict(load_config(None).resolve())["search.dirichlet_alpha"] > 0


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_dump_then_load_round_trips(path: Path, tmp_path: Path) -> None:
    cfg = load_config(path)
    out = tmp_path / "dumped.yaml"
    out.write_text(dump_config(cfg))
    assert load_config(out) == cfg
    assert load_config(out, ["rules.komi=0.5"]).rules.komi == 0.5


@settings(max_examples=60, deadline=None)
@given(
    N=st.integers(5, 19),
    komi=st.integers(-40, 40).map(lambda k: k / 2),
    sims=st.integers(1, 5000),
    alpha=st.none() | st.floats(1e-6, 10),
    boundaries=st.lists(st.integers(1, 10**7), max_size=5, unique=True).map(sorted),
    lr=st.floats(1e-8, 1.0),
    v_resign=st.none() | st.floats(-1, 1),
    anchors=st.lists(st.integers(1, 10).map(lambda n: f"gnugo-l{n}"), max_size=3, unique=True),
)
def test_random_valid_configs_round_trip(
    N: int,
    komi: float,
    sims: int,
    alpha: float | None,
    boundaries: list[int],
    lr: float,
    v_resign: float | None,
    anchors: list[str],
) -> None:
    data = Config().model_dump()
    data["rules"].update(board_size=N, komi=komi)
    data["search"].update(simulations=sims, dirichlet_alpha=alpha)
    data["training"].update(
        lr_schedule="steps", lr_boundaries=boundaries, lr_values=[lr] * (len(boundaries) + 1)
    )
    data["selfplay"]["v_resign"] = v_resign
    data["evaluation"]["anchors"] = anchors
    cfg = Config.model_validate(data)
    assert parse_config(dump_config(cfg)) == cfg


def test_a_config_written_in_full_before_a_switch_existed_loads_as_it_ran() -> None:
    """A run frozen before the laptop preset's switches existed (its params.yaml holds every field
    of its time) resumes with them off, as it ran; a partial file gets today's defaults."""
    data = yaml.safe_load(dump_config(load_config(None)))
    switches = {("search", "early_pass"): True, ("search", "fill_own_eyes"): True,
                ("network", "aux_heads"): False, ("search", "algorithm"): "puct",
                ("selfplay", "full_search_fraction"): 1.0,
                ("training", "value_target_mix"): 0.0, ("evaluation", "gating"): True}  # fmt: skip
    for section, field in switches:
        del data[section][field]
    del data["pipeline"]["config_version"]  # written before files said their format
    frozen = parse_config(yaml.safe_dump(data), source="old/params.yaml")
    assert {k: getattr(getattr(frozen, k[0]), k[1]) for k in switches} == switches
    today = load_config(None)
    assert {k: getattr(getattr(today, k[0]), k[1]) for k in switches} == {
        ("search", "early_pass"): False, ("search", "fill_own_eyes"): False,
        ("network", "aux_heads"): True, ("search", "algorithm"): "gumbel",
        ("selfplay", "full_search_fraction"): 0.25,
        ("training", "value_target_mix"): 0.5, ("evaluation", "gating"): False,
    }  # fmt: skip
    partial = parse_config("search:\n  simulations: 32\nnetwork:\n  blocks: 2\n")
    assert partial.search.algorithm == "gumbel" and partial.network.aux_heads
    assert frozen.pipeline.config_version == 1 and partial.pipeline.config_version == 15
    assert parse_config(dump_config(frozen)) == frozen  # the dump says format 1


def test_a_run_frozen_in_format_2_keeps_its_playout_caps() -> None:
    """A params.yaml frozen before ``selfplay.record_fast_rows`` existed (format 2, written in
    full) resumes recording its fast rows, with noisy fast searches and `steps` every iteration,
    as it ran; format 1 reads them so too; today's files take KataGo's."""
    data = yaml.safe_load(dump_config(load_config(None)))
    switches = {("selfplay", "quiet_fast_searches"): False, ("selfplay", "record_fast_rows"): True,
                ("training", "samples_per_row"): None}  # fmt: skip
    for section, field in switches:
        del data[section][field]
    data["pipeline"]["config_version"] = 2
    frozen = parse_config(yaml.safe_dump(data), source="old/params.yaml")
    assert {k: getattr(getattr(frozen, k[0]), k[1]) for k in switches} == switches
    assert frozen.pipeline.config_version == 2 and frozen.search.algorithm == "gumbel"
    assert parse_config(dump_config(frozen)) == frozen
    first = parse_config("pipeline:\n  config_version: 1\n")
    assert {k: getattr(getattr(first, k[0]), k[1]) for k in switches} == switches
    today = load_config(None)
    assert {k: getattr(getattr(today, k[0]), k[1]) for k in switches} == {
        ("selfplay", "quiet_fast_searches"): True, ("selfplay", "record_fast_rows"): False,
        ("training", "samples_per_row"): 4.0,
    }  # fmt: skip


def test_a_run_frozen_in_format_3_keeps_the_papers_learning_rates() -> None:
    """A params.yaml written in format 3 that leaves ``training.lr_values`` out (a user's copy of
    a preset, trimmed) trains at the paper's rates, as it did; today's default is three times
    them, and a frozen file that spells its rates out keeps them whatever its format."""
    data = yaml.safe_load(dump_config(load_config(None)))
    del data["training"]["lr_values"]
    data["pipeline"]["config_version"] = 3
    assert parse_config(yaml.safe_dump(data)).training.lr_values == [0.01, 0.001, 0.0001]
    assert parse_config("pipeline:\n  config_version: 1\n").training.lr_values == [
        0.01, 0.001, 0.0001,
    ]  # fmt: skip
    assert load_config(None).training.lr_values == [0.03, 0.003, 0.0003]
    data["training"]["lr_values"] = [0.05, 0.005, 0.0005]
    assert parse_config(yaml.safe_dump(data)).training.lr_values == [0.05, 0.005, 0.0005]
    for preset in ("9x9.yaml", "19x19-paper.yaml"):  # the paper's presets keep the paper's
        assert load_config(ROOT / "configs" / preset).training.lr_values == [0.01, 0.001, 0.0001]


def test_a_run_frozen_in_format_4_keeps_the_17_planes() -> None:
    """A params.yaml of format 4 (every run frozen before the liberty planes) leaves
    ``network.liberties`` out: its networks take the 17 planes, as they did, so it resumes
    from its checkpoints; today's quick start takes the liberty planes, the paper's presets not."""
    data = yaml.safe_load(dump_config(load_config(None)))
    del data["network"]["liberties"]
    data["pipeline"]["config_version"] = 4
    assert parse_config(yaml.safe_dump(data)).network.liberties is False
    assert load_config(None).network.liberties is True
    for preset in ("9x9.yaml", "19x19-paper.yaml"):
        assert load_config(ROOT / "configs" / preset).network.liberties is False


def test_a_config_that_says_its_format_reads_left_out_fields_as_that_format() -> None:
    """Every dump and preset says ``pipeline.config_version``: a copy of a preset with a switch
    deleted gets today's default; a file that says format 1 gets what format 1 ran with; a
    format from a newer tabula is refused with one line."""
    data = yaml.safe_load(dump_config(load_config(None)))
    assert data["pipeline"]["config_version"] == 15
    del data["search"]["algorithm"], data["evaluation"]["gating"]
    today = parse_config(yaml.safe_dump(data))
    assert today.search.algorithm == "gumbel" and today.evaluation.gating is False
    old = parse_config("pipeline:\n  config_version: 1\nsearch:\n  simulations: 32\n")
    assert old.search.algorithm == "puct" and old.network.aux_heads is False
    assert old.search.simulations == 32 and old.pipeline.config_version == 1
    for path in PRESETS:
        assert load_config(path).pipeline.config_version == 15, path.name
    newer = "new.yaml: pipeline.config_version: written by a newer tabula: this one reads formats "
    for text in ("pipeline:\n  config_version: 16\n",
                 "search:\n  a_later_field: 1\npipeline:\n  config_version: 16\n"):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            parse_config(text, source="new.yaml")
        assert str(e.value) == newer + "up to 15 (got 16)"
    for text, key in [
        ("pipeline:\n  config_version: true\n", "pipeline.config_version"),
        ("pipeline:\n  config_version: 1.0\n", "pipeline.config_version"),
        ("pipeline:\n  config_version: 1\nsearch: 5\n", "search"),
        ("pipeline:\n  config_version: 1\nsearch:\n", "search"),
    ]:
        with pytest.raises(ConfigError, match=f"^bad.yaml: {key}: ") as e:
            parse_config(text, source="bad.yaml")
        assert "\n" not in str(e.value)


def test_held_out_games_leave_an_iteration_some_of_its_own() -> None:
    assert load_config(None, ["training.holdout_games=383"]).training.holdout_games == 383
    with pytest.raises(ConfigError, match="holdout_games must be less than selfplay.games"):
        load_config(None, ["training.holdout_games=384"])


def test_links_and_printed_commands_carry_no_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """``MLFLOW_TRACKING_URI`` may hold a password (the config's fields may not): the run's
    link drops the user-info, the printed ``mlflow server`` line shows ``***``."""
    from cli.ui import ui_command
    from tabula.config import without_userinfo
    from tasks.tracking import Tracking, run_link

    assert without_userinfo("https://u:s3cret@mlflow.example:5000/x") == (
        "https://mlflow.example:5000/x"
    )
    assert without_userinfo("https://mlflow.example/a@b") == "https://mlflow.example/a@b"
    track = Tracking("https://u:s3cret@mlflow.example:5000", "7", "r", "uid", "tabula-r", "abc")
    assert run_link(track) == "https://mlflow.example:5000/#/experiments/7/runs/abc"
    line = ui_command("postgresql://u:s3cret@db:5432/mlflow", "s3://bucket/mlflow")
    assert "s3cret" not in line and "postgresql://u:***@db:5432/mlflow" in line


def test_a_network_grows_at_increasing_iterations_to_more_blocks() -> None:
    grows = load_config(None, ["network.blocks=2", "network.grow=[[3,4],[10,6]]"]).network
    assert [grows.blocks_at(i) for i in (0, 2, 3, 9, 10, 50)] == [2, 2, 4, 4, 6, 6]
    assert load_config(None).network.grow == []  # off by default: the blocks throughout
    for grow, problem in [
        ("[[3,2]]", "the first growth must give more than blocks=2"),
        ("[[3,4],[2,6]]", "iterations must be >= 1 and increasing"),
        ("[[0,4]]", "iterations must be >= 1 and increasing"),
        ("[[3,6],[5,4]]", "blocks must increase"),
        ("[[3]]", "each step is [ITERATION, BLOCKS]"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(problem)) as e:
            load_config(None, ["network.blocks=2", f"network.grow={grow}"])
        assert "\n" not in str(e.value)
