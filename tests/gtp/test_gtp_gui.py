"""``tabula gtp`` started the way Go GUIs start an engine: Sabaki and Lizzie run it with the
engine's own folder (``.venv/bin``) as the working directory and no tabula settings in the
environment. The engine finds the project the installed ``tabula`` belongs to (here a copy of
this checkout, with a run whose champion is registered in the copy's own MLflow store), plays
with the checkpoint's board size and the run's frozen config, and refuses board sizes its
network cannot play."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model.checkpoint import save_checkpoint
from model.network import make_network, weights_sha256
from tabula.config import dump_config, load_config
from tabula.errors import UsageError
from tabula.go import coords
from tasks.gtp_setup import gtp_setup
from tasks.run.layout import RunLayout
from tasks.tracking import TAG_RUN, connect
from tasks.tracking.registry import CHAMPION, register_checkpoint
from tasks.tracking.runs import create_run
from tasks.tracking.store import experiment

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the virtual environment's folder, as GUIs start it in
TABULA = BIN / "tabula"
PACKAGES = ("tabula", "model", "tasks", "flows", "cli")
RUN = "gui"
MODEL = f"models:/tabula-{RUN}@champion"
#: The run's frozen config: a komi and a search the quick start's defaults do not have.
FROZEN = [f"pipeline.name={RUN}", "rules.komi=6.5", "evaluation.simulations=8"]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout of this code holding run ``gui``: its frozen config, one 9x9 checkpoint, and
    that checkpoint registered as ``tabula-gui``'s champion in the checkout's MLflow store
    (``mlflow/mlflow.db``, the default store)."""
    root = tmp_path_factory.mktemp("checkout")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    cfg = load_config(None, FROZEN)
    layout = RunLayout(root, cfg.pipeline.data_dir, RUN)
    layout.model_dir(1).mkdir(parents=True)
    layout.params.write_text(dump_config(cfg))
    net = make_network(9, 1, 8, 0, 16)
    checkpoint = save_checkpoint(layout.model(1), net, {"model_id": f"{RUN}-1"})
    client = connect(f"sqlite:///{root / 'mlflow' / 'mlflow.db'}")
    experiment_id = experiment(client, "tabula", root / "mlflow" / "artifacts")
    run_id = create_run(client, experiment_id, "iteration-1", {TAG_RUN: RUN})
    name = f"tabula-{RUN}"
    tags = {TAG_RUN: RUN}
    version = register_checkpoint(client, name, run_id, checkpoint, weights_sha256(net), tags)
    client.set_registered_model_alias(name, CHAMPION, version)
    return root


def responses(stdout: str) -> list[str]:
    """The GTP responses in ``stdout``, each without its ending empty line."""
    return stdout.split("\n\n")[:-1]


@pytest.mark.slow
def test_a_gui_plays_the_champion_from_the_environments_folder(
    checkout: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_"))}
    env["PYTHONPATH"] = str(checkout)  # the installed tabula's code is the checkout's
    env["TMPDIR"] = str(tmp_path)  # (where the registry's model is fetched to)
    commands = "1 boardsize 19\n2 boardsize 9\n3 list_commands\n4 showboard\n5 genmove b\n"
    proc = subprocess.run(
        [str(TABULA), "gtp", "--model", MODEL], cwd=BIN, env=env, input=commands + "6 quit\n",
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    size19, size9, listed, board, move, quit_ = responses(proc.stdout)
    assert size19 == "?1 unacceptable size"  # a 9x9 network: refused, not an error at genmove
    assert size9 == "=2 "
    new = {"final_status_list", "fixed_handicap", "place_free_handicap", "set_free_handicap",
           "lz-genmove_analyze"}  # fmt: skip
    assert new <= set(listed.removeprefix("=3 ").split("\n"))
    assert board.startswith("=4 \n   A B C D E F G H J\n")  # the checkpoint's 9x9
    assert board.endswith("komi 6.5")  # the run's frozen config, not the quick start's 7.5
    assert move.startswith("=5 ")
    vertex = move.removeprefix("=5 ")
    assert vertex == "pass" or 0 <= coords.from_gtp(vertex, 9) < 81
    assert quit_ == "=6 "
    assert not list(tmp_path.glob("tabula-model-*"))  # the fetched model's folder is gone


def test_the_project_option_finds_the_store_and_the_run(checkout: Path, tmp_path: Path) -> None:
    setup = gtp_setup(MODEL, checkout, None, None, [], tmp_path)
    assert (setup.project, setup.run, setup.sizes) == (checkout, RUN, (9,))
    assert (setup.cfg.rules.komi, setup.cfg.evaluation.simulations) == (6.5, 8)
    assert setup.checkpoint is not None and setup.checkpoint.read_bytes() == (
        RunLayout(checkout, "data", RUN).model(1).read_bytes()
    )
    # From inside the project the working directory is the project; --set still wins.
    here = gtp_setup(MODEL, None, None, None, ["rules.komi=0.5"], checkout)
    assert (here.project, here.run, here.cfg.rules.komi) == (checkout, RUN, 0.5)


def test_a_checkpoint_path_plays_its_own_board_size(checkout: Path, tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "net13.pt", make_network(13, 1, 8, 0, 16), {})
    setup = gtp_setup(str(path), None, None, None, [], tmp_path)
    assert (setup.sizes, setup.cfg.rules.board_size, setup.run) == ((13,), 13, None)
    # A checkpoint in a run's folder plays with that run's config.
    in_run = RunLayout(checkout, "data", RUN).model(1)
    setup = gtp_setup(f"raw:{in_run}", None, None, None, [], tmp_path)
    assert (setup.run, setup.cfg.rules.komi, setup.sizes) == (RUN, 6.5, (9,))
    # --run names the config explicitly; random plays every size.
    setup = gtp_setup("random", checkout, RUN, None, [], tmp_path)
    assert (setup.run, setup.cfg.rules.komi, setup.checkpoint) == (RUN, 6.5, None)
    assert setup.sizes == tuple(range(5, 20))


def test_an_unknown_run_or_project_is_one_line(checkout: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=rf"^--run nope: no run 'nope' in {checkout} \(runs: gui;"):
        gtp_setup("random", checkout, "nope", None, [], tmp_path)
    with pytest.raises(UsageError, match=r"^--project .*missing: no such folder$"):
        gtp_setup("random", tmp_path / "missing", None, None, [], tmp_path)
