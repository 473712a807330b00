"""Bad input at the edges: malformed params, GTP junk, checkpoints carrying a pickle payload, a
tracking store that cannot be reached or whose run of the name is another project's, a Dask
scheduler on another machine with no Prefect server named, and a corrupt ``dvc.lock``.

Everything goes through the real entry points: the ``tabula`` command in a subprocess, the GTP
engine's ``handle``, the checkpoint loader. Expected failures are one line on stderr, exit 2,
and leave nothing behind.
"""

from __future__ import annotations

import os
import pickle
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.clone import empty_project
from model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from model.datamodule import synthetic_records
from model.network import make_network
from model.shards import write_shard
from tabula.errors import UsageError
from tabula.gtp import GtpEngine, preprocess
from tabula.players import RandomPlayer
from tests import pipeline_runs
from tests.conftest import TINY

TABULA = str(Path(sys.executable).parent / "tabula")
PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"


def _tabula(
    args: list[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "WARNING", **(env or {})}
    return subprocess.run(
        [TABULA, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _one_line(proc: subprocess.CompletedProcess) -> str:
    """The single stderr line of a refused command (exit 2)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("tabula: "), lines
    return lines[0]


# --- 3. malformed params.yaml values through `tabula run` --------------------------------------

# (id, edit of the shipped params.yaml as {dotted key: value} or raw YAML text, key named)
FILE_CASES = [
    ("string-for-int", {"rules.board_size": "nine"}, "rules.board_size"),
    ("board-too-small", {"rules.board_size": 4}, "rules.board_size"),
    ("board-too-large", {"rules.board_size": 25}, "rules.board_size"),
    ("komi-not-half", {"rules.komi": 7.3}, "rules.komi"),
    ("unknown-key", {"search.simulation": 100}, "search.simulation"),
    ("unknown-section", {"rulez": {"board_size": 9}}, "rulez"),
    ("section-not-mapping", {"network": 4}, "network"),
    ("float-for-int", {"search.simulations": 2.5}, "search.simulations"),
    ("negative-count", {"selfplay.games": -5}, "selfplay.games"),
    ("null-for-int", {"network.blocks": None}, "network.blocks"),
    ("scalar-for-list", {"training.lr_values": 0.01}, "training.lr_values"),
    ("not-increasing", {"training.lr_boundaries": [400, 200]}, "training.lr_boundaries"),
    ("lr-count", {"training.lr_values": [0.1]}, "training.lr_values"),
    ("momentum-one", {"training.momentum": 1.0}, "training.momentum"),
    ("not-a-bool", {"training.bf16": "maybe"}, "training.bf16"),
    ("nan", {"search.c_puct": float("nan")}, "search.c_puct"),
    ("infinity", {"search.dirichlet_epsilon": float("inf")}, "search.dirichlet_epsilon"),
    ("bad-literal", {"pipeline.device": "tpu"}, "pipeline.device"),
    ("path-in-name", {"pipeline.name": "../escape"}, "pipeline.name"),
    ("negative-seed", {"pipeline.seed": -1}, "pipeline.seed"),
    ("empty-string", {"pipeline.data_dir": ""}, "pipeline.data_dir"),
    ("sprt-order", {"evaluation.sprt_elo1": -5.0}, "evaluation.sprt_elo1"),
    ("tracking-uri", {"pipeline.mlflow_tracking_uri": "garbage"}, "pipeline.mlflow_tracking_uri"),
    ("duplicate-key", "rules:\n  board_size: 9\n  board_size: 7\n", "board_size"),
    ("yaml-syntax", "rules:\n  board_size: [9\n", "line "),
    ("top-level-list", "- rules\n- network\n", "top level"),
]

# (id, --set overrides on top of the default config, key named)
SET_CASES = [
    ("out-of-range", ["search.simulations=0"], "search.simulations"),
    ("unknown-key", ["search.simulatoins=5"], "search.simulatoins"),
    ("no-equals", ["rules.board_size"], "rules.board_size"),
    ("value-as-section", ["rules.board_size.x=1"], "rules.board_size"),
    ("yaml-syntax", ["training.lr_values=[0.1,oops"], "training.lr_values"),
    ("empty-value", ["selfplay.games="], "selfplay.games"),
    ("later-wins-bad", ["rules.board_size=9", "rules.board_size=3"], "rules.board_size"),
]


def _edited_params(edit: dict | str) -> str:
    if isinstance(edit, str):
        return edit
    data = yaml.safe_load(PARAMS.read_text())
    for dotted, value in edit.items():
        *path, last = dotted.split(".")
        node = data
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return yaml.safe_dump(data, sort_keys=False)


def _check_refused(
    proc: subprocess.CompletedProcess, key: str, project: Path, before: set[str]
) -> None:
    line = _one_line(proc)
    assert key in line, line
    assert proc.stdout == ""
    assert {p.name for p in project.iterdir()} == before  # no data/, mlflow/, .dvc
    assert not (project / "data").exists() and not (project / "mlflow").exists()


@pytest.mark.parametrize(
    ("edit", "key"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES]
)
def test_malformed_params_file_is_one_line_exit_2(tmp_path: Path, edit, key) -> None:
    bad = tmp_path / "BAD.yaml"
    bad.write_text(_edited_params(edit))
    before = {p.name for p in tmp_path.iterdir()}
    _check_refused(_tabula(["run", "--config", str(bad)], tmp_path), key, tmp_path, before)


@pytest.mark.parametrize(
    ("overrides", "key"), [c[1:] for c in SET_CASES], ids=[c[0] for c in SET_CASES]
)
def test_malformed_set_override_is_one_line_exit_2(tmp_path: Path, overrides, key) -> None:
    args = ["run", "--config", str(PARAMS)]
    for item in overrides:
        args += ["--set", item]
    _check_refused(_tabula(args, tmp_path), key, tmp_path, set())


def test_a_password_in_a_uri_is_refused_and_printed_nowhere(tmp_path: Path) -> None:
    """A URI is recorded as given (params.yaml, MLflow params, checkpoints): one that holds a
    password is refused before anything is made, and the password appears in no output."""
    args = ["run", "--set", "pipeline.mlflow_tracking_uri=postgresql://u:s3cret@127.0.0.1/db"]
    proc = _tabula(args, tmp_path)
    _check_refused(proc, "pipeline.mlflow_tracking_uri", tmp_path, set())
    assert "s3cret" not in proc.stdout + proc.stderr
    assert "PGPASSWORD" in proc.stderr


def test_missing_config_file_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _tabula(["run", "--config", "nope.yaml"], tmp_path)
    assert "nope.yaml" in _one_line(proc)
    assert not any(tmp_path.iterdir())


def test_reproducing_an_unknown_run_names_the_runs_there(tmp_path: Path) -> None:
    """Run as the README shows it, outside make, with none of Prefect's settings in the
    environment: one line naming the runs that exist, no Prefect output, no traceback."""
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / "data" / "mine").mkdir(parents=True)
    (project / "data" / "mine" / "params.yaml").write_text("{}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    proc = subprocess.run([TABULA, "reproduce", "zzz/2"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert _one_line(proc) == f"tabula: no run 'zzz' in {project} (runs: mine)"
    assert proc.stdout == ""
    bad = subprocess.run([TABULA, "reproduce", "zzz/two"], cwd=project, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "expected ITERATION, RUN/ITERATION or models:/NAME@ALIAS" in _one_line(bad)
    untrained = subprocess.run([TABULA, "reproduce", "mine/3"], cwd=project, env=env,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
    assert _one_line(untrained) == (
        "tabula: run 'mine' has no trained iteration 3 (no iteration is finished here)"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["status", "../x"],
        ["status", "/etc"],
        ["status", ".."],
        ["push", "../x"],
        ["reproduce", "../2"],
    ],
    ids=["status-up", "status-absolute", "status-dots", "push-up", "reproduce-dots"],
)
def test_a_run_name_that_is_a_path_is_refused(tmp_path: Path, args: list[str]) -> None:
    """A command's RUN follows the rule of ``pipeline.name``: a path (``../x`` would be
    ``data/../x``, ``/etc`` the system's) is one line, exit 2, and nothing is read or made."""
    project = tmp_path / "project"
    project.mkdir()
    name = args[1].removesuffix("/2")
    assert _one_line(_tabula(args, project)) == (
        f"tabula: run name {name!r}: must be letters, digits, '.', '_' or '-', starting with "
        "a letter or digit"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"]
    assert not any(project.iterdir())


def test_a_missing_mlflow_store_is_one_line_and_stays_missing(tmp_path: Path) -> None:
    """Reading a model from a store that is not there names it; nothing is created."""
    store = tmp_path / "none" / "mlflow.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    argv = [TABULA, "gtp", "--model", "models:/tabula-quickstart@champion",
            "--set", f"pipeline.mlflow_tracking_uri=sqlite:///{store}"]  # fmt: skip
    proc = subprocess.run(argv, cwd=tmp_path, env=env, input="", capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert _one_line(proc) == (
        f"tabula: models:/tabula-quickstart@champion: no MLflow store at {store} "
        "(set pipeline.mlflow_tracking_uri)"
    )
    again = subprocess.run([argv[0], "reproduce", *argv[3:]], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert _one_line(again) == _one_line(proc)
    assert not store.parent.exists() and not (tmp_path / ".dvc").exists()


# --- 4. GTP: 10,000 random and malformed lines -------------------------------------------------

GTP_LINES = 10_000
COMMANDS = [
    "protocol_version", "name", "version", "known_command", "list_commands", "boardsize",
    "clear_board", "komi", "play", "genmove", "kgs-genmove_cleanup", "undo", "showboard",
    "final_score", "time_settings", "time_left", "quit",
]  # fmt: skip
_vertex = st.builds(
    lambda c, r: f"{c}{r}", st.sampled_from("ABCDEFGHIJKLMNOPQRSTZabhjtz"), st.integers(-2, 25)
)
_token = st.one_of(
    _vertex,
    st.sampled_from(
        [
            "b",
            "w",
            "B",
            "white",
            "pass",
            "resign",
            "#",
            "0",
            "-1",
            "9",
            "19",
            "1e9",
            "nan",
            "inf",
            "+5",
            "7.5",
            "-0.5",
            "99999999999999999999999",
            "\x00",
            "\r",
            "\t",
            "\x7f",
            "\u2028",
            "\x85",
            "\ufeff",
        ]
    ),
    st.sampled_from(COMMANDS),
    st.integers(-(10**25), 10**25).map(str),
    st.text(max_size=10),
)
_command = st.builds(
    lambda i, c, a, tail: " ".join([*i, c, *a]) + tail,
    st.lists(st.integers(0, 10**20).map(str), max_size=1),
    st.sampled_from(COMMANDS),
    st.lists(_token, max_size=4),
    st.sampled_from(["", "\n", "\r\n", " # comment", "\t"]),
)
_junk = st.one_of(
    st.text(max_size=120),
    st.binary(max_size=120).map(lambda b: b.decode("latin-1")),
    st.lists(_token, max_size=6).map(" ".join),
    st.text(alphabet=st.characters(max_codepoint=0x3000), min_size=200, max_size=2000),
)
_line = st.one_of(_command, _command, _junk)


def _check_gtp_reply(line: str, reply: str | None) -> None:
    """GTP 2 (spec 2.6-2.7): '=' or '?', the command's id if it had one, a space, the text, and
    exactly one empty line at the end, none inside."""
    tokens = preprocess(line).split()
    if not tokens:
        assert reply is None, (line, reply)
        return
    assert isinstance(reply, str), (line, reply)
    cmd_id = tokens[0] if re.fullmatch(r"[0-9]+", tokens[0]) else ""
    assert re.match(rf"[=?]{cmd_id}( |\n)", reply), (line, reply[:200])
    assert reply.endswith("\n\n"), (line, reply[-200:])
    assert "\n\n" not in reply[:-2], (line, reply)
    assert all(part.strip() for part in reply[:-2].split("\n")[1:]), (line, reply)  # no blank
    assert "internal error" not in reply, (line, reply)


def test_ten_thousand_malformed_gtp_lines_get_protocol_replies() -> None:
    fed: list[int] = []

    @settings(
        max_examples=400,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(_line, min_size=25, max_size=40), st.sampled_from([5, 9, 19]))
    def feed(script: list[str], size: int) -> None:
        engine = GtpEngine(RandomPlayer(0), size=size)
        for line in script:
            _check_gtp_reply(line, engine.handle(line))
            fed.append(1)
        # Still a working engine afterwards.
        assert engine.handle("7 clear_board") == "=7 \n\n"
        assert engine.handle("8 genmove b").startswith("=8 ")  # type: ignore[union-attr]

    feed()
    assert len(fed) >= GTP_LINES, len(fed)


# --- 5. a checkpoint with a pickle payload is refused -----------------------------------------


class _Exploit:
    """Unpickling this runs ``os.system`` (what a malicious checkpoint would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return os.system, (f"touch {self.marker}",)


def _evil_files(tmp_path: Path, marker: Path) -> dict[str, Path]:
    """The payload every way it can arrive: inside a real tabula checkpoint, as the whole
    file, in torch's legacy format, and as a bare pickle."""
    files = {name: tmp_path / f"{name}.pt" for name in ("metadata", "whole", "legacy", "bare")}
    real = save_checkpoint(tmp_path / "real.pt", make_network(5, 1, 4, seed=0), {})
    payload = torch.load(real, weights_only=True)
    payload["metadata"] = {"note": _Exploit(marker)}
    torch.save(payload, files["metadata"])
    torch.save(_Exploit(marker), files["whole"])
    torch.save(
        {"state_dict": _Exploit(marker)}, files["legacy"], _use_new_zipfile_serialization=False
    )
    files["bare"].write_bytes(pickle.dumps(_Exploit(marker)))
    # The files really are armed: a plain unpickle runs the payload (then the marker goes).
    pickle.loads(files["bare"].read_bytes())
    assert marker.exists()
    marker.unlink()
    return files


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")
def test_pickle_payload_refused_by_load_checkpoint(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    for name, path in _evil_files(tmp_path, marker).items():
        with pytest.raises(CheckpointError) as refused:
            load_checkpoint(path)
        message = str(refused.value)
        assert "\n" not in message and str(path) in message, (name, message)
        assert not marker.exists(), name


@pytest.mark.parametrize(
    "entry",
    [  # gtp starts fastest; the others import Lightning
        "gtp",
        pytest.param("selfplay", marks=pytest.mark.slow),
        pytest.param("train", marks=pytest.mark.slow),
    ],
)
def test_pickle_payload_refused_by_the_cli(tmp_path: Path, entry: str) -> None:
    marker = tmp_path / "PWNED"
    evil = _evil_files(tmp_path, marker)["metadata"]
    args = {
        "gtp": ["gtp", "--model", str(evil)],
        "selfplay": [
            "selfplay",
            "--model",
            str(evil),
            "--out",
            str(tmp_path / "sp"),
            "--games",
            "1",
            "--set",
            "rules.board_size=5",
        ],
        "train": [
            "train",
            "--data",
            str(tmp_path / "data"),
            "--init",
            str(evil),
            "--out",
            str(tmp_path / "out.pt"),
        ],
    }[entry]
    write_shard(tmp_path / "data" / "s.parquet", synthetic_records(9, games=2, moves=4, seed=0))
    proc = _tabula(args, tmp_path)
    line = _one_line(proc)
    assert str(evil) in line and ("weights_only" in line or "not a readable" in line), line
    assert not marker.exists()
    assert not (tmp_path / "sp").exists() and not (tmp_path / "out.pt").exists()


# --- 6. a tracking store that cannot be reached: refused before the run begins ----------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _git_state(project: Path) -> tuple[str, str]:
    """Every ref and every commit of ``project``'s repository."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=project, capture_output=True, text=True,
                              check=True).stdout  # fmt: skip

    return git("for-each-ref"), git("rev-list", "--all")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("store", "cause"),
    [
        ("http://127.0.0.1:{port}", "cannot be reached: [Errno 111] Connection refused"),
        ("postgresql+psycopg2://tabula@127.0.0.1:{port}/mlflow", "Connection refused"),
        # SQLAlchemy's default driver for it may not be installed: refused either way.
        ("postgresql://tabula@127.0.0.1:{port}/mlflow", ""),
    ],
    ids=["server", "database", "database-default-driver"],
)
def test_an_unreachable_tracking_store_is_one_line_and_nothing_begun(
    tmp_path: Path, prefect_server: str, store: str, cause: str
) -> None:
    project = empty_project(tmp_path / "project")
    before = {p.name for p in project.iterdir()}, _git_state(project)
    uri = store.format(port=_closed_port())
    args = ["run", *(a for item in [*TINY, f"pipeline.mlflow_tracking_uri={uri}"]
                     for a in ("--set", item))]  # fmt: skip
    # Within a minute on a busy machine: MLflow's own retries would wait minutes.
    proc = _tabula(args, project, timeout=60, env={"PREFECT_API_URL": prefect_server})
    line = _one_line(proc)
    assert line.startswith(f"tabula: MLflow store {uri} ") and cause in line, line
    assert proc.stdout.strip() == ""  # (the progress display, never drawn, ends its line)
    assert not (project / "data").exists() and not (project / "mlflow").exists()
    assert ({p.name for p in project.iterdir()}, _git_state(project)) == before


def test_a_run_name_another_project_holds_in_the_store_is_one_line_and_nothing_begun(
    tmp_path: Path, prefect_server: str
) -> None:
    """Two projects that share a tracking store: the second's run of the same name would log
    into the first's MLflow runs and mark them KILLED on its resumes; it is refused."""
    from tabula.config import load_config
    from tasks import tracking
    from tasks.run.layout import RunLayout

    store = f"pipeline.mlflow_tracking_uri=sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"
    cfg = load_config(None, [*TINY, store])
    first = RunLayout(tmp_path / "first", cfg.pipeline.data_dir, cfg.pipeline.name)
    parent = tracking.open_pipeline_run.fn(cfg, first, {}).run_id
    project = empty_project(tmp_path / "project")
    before = {p.name for p in project.iterdir()}, _git_state(project)
    args = ["run", *(a for item in [*TINY, store] for a in ("--set", item))]
    proc = _tabula(args, project, env={"PREFECT_API_URL": prefect_server})
    line = _one_line(proc)
    assert line.startswith(f"tabula: run {cfg.pipeline.name!r}: MLflow store sqlite:///"), line
    assert f"(MLflow run {parent}) that is not this one" in line, line
    assert not (project / "data").exists()
    assert ({p.name for p in project.iterdir()}, _git_state(project)) == before
    client = tracking.connect(cfg.pipeline.mlflow_tracking_uri, project)
    assert client.get_run(parent).info.status == "RUNNING"


# --- 7. a Dask scheduler elsewhere and no Prefect server: refused before the run begins -------


def test_a_remote_dask_scheduler_needs_a_prefect_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its workers would take the run's temporary server (127.0.0.1) for their own machine."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    project = empty_project(tmp_path / "project")
    before = {p.name for p in project.iterdir()}, _git_state(project)
    args = ["run", "--dask-address", "tcp://10.11.12.13:8786",
            *(a for item in TINY for a in ("--set", item))]  # fmt: skip
    proc = _tabula(args, project, env={"PREFECT_HOME": str(tmp_path / "prefect-home")})
    line = _one_line(proc)
    assert "tcp://10.11.12.13:8786" in line and "PREFECT_API_URL" in line, line
    assert ({p.name for p in project.iterdir()}, _git_state(project)) == before


@pytest.mark.parametrize(
    ("address", "url", "refused"),
    [
        ("tcp://10.11.12.13:8786", None, True),
        ("scheduler:8786", None, True),
        ("tcp://127.0.0.1:8786", None, False),
        ("tcp://localhost:8786", None, False),
        ("tcp://[::1]:8786", None, False),
        ("tcp://10.11.12.13:8786", "http://prefect-host:4200/api", False),
        (None, None, False),
    ],
)
def test_which_dask_schedulers_need_a_prefect_server(
    address: str | None, url: str | None, refused: bool
) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.api import require_api_for

    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        if refused:
            with pytest.raises(UsageError, match="not on this machine"):
                require_api_for(url, address)
        else:
            require_api_for(url, address)


# --- 8. a corrupt dvc.lock in a finished run: one line naming it and how to restore it --------

RUN = pipeline_runs.RUN
LOCK = f"data/{RUN}/iter-0001/dvc.lock"
RESTORE = f"`git checkout tabula/runs/{RUN} -- {LOCK}`"
# (id, what replaces the lock, why the line says it cannot be read)
CORRUPT_LOCKS = [
    ("truncated", lambda good: good[: good.index("'") + 2], "not YAML"),  # schema: '2
    ("not-yaml", lambda good: "\x00\x01 {{{ not: [yaml\n", "not YAML"),
    ("wrong-shape", lambda good: "- schema\n- stages\n", "shape"),
    ("entry-shape", lambda good: good.replace("md5: ", "md5:\n        - ", 1), "shape"),
]


@pytest.fixture(scope="module")
def tiny_run(prefect_server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project holding one finished iteration of the TINY run (on its run branch)."""
    project = empty_project(tmp_path_factory.mktemp("lock") / "project")
    pipeline_runs.run(project, 1, prefect_server, extra=["evaluation.gating=false"])
    return project


def _corrupt_the_lock(project: Path, corrupt) -> tuple[bytes, bytes]:
    """Replace iteration 1's lock with ``corrupt(good text)``; returns (good, bad) bytes."""
    lock = project / LOCK
    good = lock.read_bytes()
    lock.chmod(0o644)
    lock.write_text(corrupt(good.decode()))
    return good, lock.read_bytes()


def _restore_as_told(project: Path, line: str, good: bytes) -> None:
    """The line names the lock and the git command that restores it; running it does."""
    assert f"{LOCK}: corrupt DVC file" in line and RESTORE in line, line
    recorded = subprocess.run(
        ["git", "show", f"tabula/runs/{RUN}:{LOCK}"], cwd=project, capture_output=True, check=True
    )
    assert recorded.stdout == good  # the run branch kept the good copy: nothing lost
    command = RESTORE.strip("`").split()
    subprocess.run(command, cwd=project, check=True, capture_output=True)
    assert (project / LOCK).read_bytes() == good


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "corrupt", "why"), CORRUPT_LOCKS, ids=[c[0] for c in CORRUPT_LOCKS]
)
@pytest.mark.parametrize(
    "command",
    [
        ["reproduce", f"{RUN}/1"],
        ["stage", "selfplay", "--params", f"data/{RUN}/params.yaml", "--iteration", "1"],
        ["stage", "train", "--params", f"data/{RUN}/params.yaml", "--iteration", "1"],
    ],
    ids=["reproduce", "stage-selfplay", "stage-train"],
)
def test_a_corrupt_dvc_lock_is_one_line_exit_2_and_nothing_lost(
    tiny_run: Path, prefect_server: str, command: list[str], name: str, corrupt, why: str
) -> None:
    good, bad = _corrupt_the_lock(tiny_run, corrupt)
    before = sorted(p for p in (tiny_run / "data").rglob("*") if p.is_file())
    proc = _tabula(command, tiny_run, env={"PREFECT_API_URL": prefect_server})
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = pipeline_runs.error_line(proc.stderr)  # the one line, and no traceback anywhere
    assert why in line, line
    assert (tiny_run / LOCK).read_bytes() == bad  # left as it was: nothing rewritten
    assert sorted(p for p in (tiny_run / "data").rglob("*") if p.is_file()) == before
    _restore_as_told(tiny_run, line, good)


@pytest.mark.slow
def test_a_resume_over_a_corrupt_dvc_lock_stops_in_one_line_and_goes_on_once_restored(
    tiny_run: Path, prefect_server: str
) -> None:
    """Training iteration 2 checks its window (iteration 1's self-play) against iteration 1's
    lock: corrupt, the resume stops there in one line; restored, it finishes."""
    extra = ["evaluation.gating=false"]
    good, _ = _corrupt_the_lock(tiny_run, CORRUPT_LOCKS[1][1])
    weights = (tiny_run / f"data/{RUN}/iter-0001/model/model.pt").read_bytes()
    stderr = pipeline_runs.run(tiny_run, 2, prefect_server, expect=2, extra=extra)
    line = pipeline_runs.error_line(stderr)
    assert (tiny_run / f"data/{RUN}/iter-0001/model/model.pt").read_bytes() == weights
    _restore_as_told(tiny_run, line, good)
    pipeline_runs.run(tiny_run, 2, prefect_server, extra=extra)
    assert (tiny_run / f"data/{RUN}/iter-0002/state").is_dir()
