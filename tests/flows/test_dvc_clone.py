"""DVC and git as a user sees them in a clone of this repository (its ``.gitignore``, its
``.dvc/``), not in a stand-in: after ``tabula run``, ``dvc dag`` and ``dvc status`` see every
iteration, the committed DVC config is left as it was, the lineage branch sits on the code
commit, and a fresh clone of the lineage pulls the data back with the README's two commands."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks import versioning
from tests import pipeline_runs as runs
from tests.conftest import TINY
from tests.repos import clone_this_repo

pytestmark = pytest.mark.slow

DVC = str(Path(sys.executable).parent / "dvc")  # the venv's, whether or not it is on PATH
BRANCH = f"tabula/runs/{runs.RUN}"


def sh(cwd: Path, *args: str) -> str:
    """A command as a user runs it, with the venv activated (``tabula`` on PATH)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, env={**os.environ, "PATH": path}
    )
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def ran(prefect_server, tmp_path_factory) -> Path:
    """A clone of this repository after a two-iteration tiny run with the default remote."""
    project = clone_this_repo(tmp_path_factory.mktemp("clone") / "tabula")
    runs.run(project, 2, prefect_server)
    return project


def test_dvc_sees_every_iteration(ran):
    dag = sh(ran, DVC, "dag", "--md")
    for i in (1, 2):
        for stage in ("selfplay", "train", "evaluate"):
            assert f"data/{runs.RUN}/iter-{i:04d}/dvc.yaml:{stage}" in dag, dag
    status = sh(ran, DVC, "status")
    assert "up to date" in status and "no data or pipelines" not in status, status


def test_the_committed_dvc_config_is_left_alone(ran, tmp_path):
    assert sh(ran, "git", "status", "--porcelain", "--", ".dvc", ".dvcignore") == ""
    assert not (ran / ".dvc" / "config.local").exists()  # the default remote is the committed one
    remote = tmp_path / "elsewhere"
    versioning.ensure_repo(ran, str(remote))  # any other remote is a machine-local setting
    assert sh(ran, "git", "status", "--porcelain", "--", ".dvc", ".dvcignore") == ""
    assert str(remote) in (ran / ".dvc" / "config.local").read_text()
    (ran / ".dvc" / "config.local").unlink()


def test_the_run_leaves_git_status_clean_on_its_branch(ran):
    """The run checks its branch out: its lineage sits on the code commit that ran it, the
    user's branch has not moved, and ``git status`` lists nothing (the outputs are ignored, the
    stage files, locks and markers committed)."""
    assert sh(ran, "git", "status", "--porcelain", "--untracked-files=all") == ""
    assert sh(ran, "git", "symbolic-ref", "--short", "HEAD").strip() == BRANCH
    assert sh(ran, "git", "rev-list", "--count", "main").strip() == "1"  # the clone's commit
    sh(ran, "git", "merge-base", "--is-ancestor", "main", BRANCH)
    assert "README.md" in sh(ran, "git", "ls-tree", "--name-only", BRANCH)
    lineage = sh(ran, "git", "ls-tree", "-r", "--name-only", BRANCH, f"data/{runs.RUN}")
    assert f"data/{runs.RUN}/iter-0002/dvc.lock" in lineage.splitlines()


def test_a_run_recorded_on_another_branch_is_not_started_over(ran, prefect_server):
    """Back on ``main`` the run's files are gone from the working tree with their branch; a
    ``tabula run`` of the same name says where the run is, in one line, and writes nothing."""
    sh(ran, "git", "switch", "-q", "main")
    try:
        assert not (ran / "data" / runs.RUN / "params.yaml").exists()
        stderr = runs.run(ran, 3, prefect_server, expect=2)
        assert f"git switch {BRANCH}" in runs.error_line(stderr)
        assert sh(ran, "git", "status", "--porcelain") == ""
    finally:
        sh(ran, "git", "switch", "-q", BRANCH)
    assert (ran / "data" / runs.RUN / "params.yaml").exists()


def test_a_fresh_clone_of_the_lineage_pulls_the_data(ran, tmp_path):
    fresh = tmp_path / "fresh"
    sh(tmp_path, "git", "clone", "-q", "--branch", BRANCH, str(ran), str(fresh))
    remote = ran / "data" / ".dvc-remote"  # a shared path or bucket in real use
    sh(fresh, DVC, "remote", "modify", "--local", "tabula", "url", str(remote))
    sh(fresh, DVC, "pull", "-q")
    model = f"data/{runs.RUN}/iter-0002/model/model.pt"
    assert (fresh / model).read_bytes() == (ran / model).read_bytes()
    assert "up to date" in sh(fresh, DVC, "status")


def test_metrics_and_plots_of_the_run(ran):
    """``dvc metrics diff`` between two iteration tags, and the run's plots."""
    tags = [f"tabula/{runs.RUN}/iter-{i:04d}" for i in (1, 2)]
    diff = json.loads(sh(ran, DVC, "metrics", "diff", *tags, "--json"))
    changed = diff[f"data/{runs.RUN}/metrics.json"]
    assert changed["iteration"] == {"old": 1, "new": 2, "diff": 1}
    old, new = (
        json.loads(sh(ran, "git", "show", f"{t}:data/{runs.RUN}/metrics.json")) for t in tags
    )
    assert {"loss", "elo", "score_vs_random"} <= set(new)
    assert set(changed) == {k for k in new if new[k] != old.get(k)}  # what changed, all of it
    shown = json.loads(sh(ran, DVC, "metrics", "show", "--json"))
    assert shown  # the workspace's metrics: the run's last iteration
    plots = json.loads(sh(ran, DVC, "plots", "show", "--json"))["data"]
    elo = next(v for k, v in plots.items() if k.endswith("Elo"))
    points = elo[0]["content"]["data"]["values"]
    assert [int(p["iteration"]) for p in points] == [1, 2]
    assert any(k.endswith("Training loss") for k in plots)
    assert "params.yaml" in sh(ran, DVC, "params", "diff", "--all")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_dvc_repro_loses_nothing(ran):
    """``init`` is redone exactly; ``selfplay`` replays and ``train`` retrains, each checked
    byte for byte; ``evaluate`` is frozen (its ``desc`` says why), so a forced ``dvc repro``
    verifies it. Every byte and lock stays as it was."""
    iteration = ran / "data" / runs.RUN / "iter-0001"
    before = {p: _files(p) for p in (ran / "data" / runs.RUN).glob("iter-*")}
    for stage in ("iter-0000/dvc.yaml:init", "iter-0001/dvc.yaml:evaluate",
                  "iter-0001/dvc.yaml:train", "iter-0002/dvc.yaml:selfplay"):  # fmt: skip
        out = sh(ran, DVC, "repro", "-f", "-s", f"data/{runs.RUN}/{stage}")
        assert ("MATCH" in out) == stage.endswith((":train", ":selfplay")), out
    assert {p: _files(p) for p in before} == before  # outputs, locks, markers: the same bytes
    assert "up to date" in sh(ran, DVC, "status")
    assert sh(ran, "git", "status", "--porcelain", "--untracked-files=all") == ""
    stages = yaml.safe_load((iteration / "dvc.yaml").read_text())["stages"]
    assert stages["train"]["cmd"].startswith("tabula stage train ")
    assert stages["train"]["outs"] == [{"model": {"persist": True}}]
    assert stages["selfplay"]["cmd"].startswith("tabula stage selfplay ")
    assert stages["selfplay"]["outs"] == [{"selfplay": {"persist": True}}]
    assert not any(stages[k].get("frozen") for k in ("selfplay", "train"))
    assert stages["evaluate"]["frozen"] and stages["evaluate"]["desc"].startswith("frozen: ")


def test_the_exact_stages_bring_back_lost_outputs(ran):
    """``dvc repro`` of a train stage whose checkpoint is gone retrains it, and of a selfplay
    stage whose games are gone replays them, byte for byte (the locks unchanged); the next
    iteration's stages stay valid."""
    iteration = ran / "data" / runs.RUN / "iter-0002"
    before = _files(iteration)
    for out, stage in (("model", "train"), ("selfplay", "selfplay")):
        shutil.rmtree(iteration / out)
        said = sh(ran, DVC, "repro", "-f", "-s", f"data/{runs.RUN}/iter-0002/dvc.yaml:{stage}")
        assert "MATCH" in said, said
    assert _files(iteration) == before
    assert "up to date" in sh(ran, DVC, "status")


def test_a_train_stage_that_does_not_reproduce_fails_and_writes_nothing(ran):
    marker = ran / "data" / runs.RUN / "iter-0001" / "state" / "train.json"
    recorded = marker.read_text()
    before = _files(ran / "data" / runs.RUN / "iter-0001")
    sha = json.loads(recorded)["weights_sha256"]
    marker.write_text(recorded.replace(sha, "0" * len(sha)))
    try:
        stage = f"data/{runs.RUN}/iter-0001/dvc.yaml:train"
        proc = subprocess.run([DVC, "repro", "-f", "-s", stage], cwd=ran, capture_output=True,
                              text=True, env=_venv_env())  # fmt: skip
        assert proc.returncode != 0 and "MISMATCH" in proc.stdout + proc.stderr
    finally:
        marker.write_text(recorded)
    assert _files(ran / "data" / runs.RUN / "iter-0001") == before
    assert "up to date" in sh(ran, DVC, "status")


def test_dvc_gc_with_the_readme_flags_and_checkout_keep_every_iteration(ran):
    """``dvc gc`` as the README gives it keeps every iteration's data in the cache: deleted
    outputs come back with ``dvc checkout``, byte for byte."""
    root = ran / "data" / runs.RUN
    before = {p: _files(p) for p in root.glob("iter-*")}
    sh(ran, DVC, "gc", "-f", "-q", "--workspace", "--all-branches", "--all-tags", "--all-commits")
    shutil.rmtree(root / "iter-0001" / "selfplay")
    (root / "iter-0002" / "model" / "model.pt").unlink()
    sh(ran, DVC, "checkout", "-q")
    assert {p: _files(p) for p in before} == before
    assert "up to date" in sh(ran, DVC, "status")


def test_tabula_push_publishes_data_branch_and_tags(ran, tmp_path):
    """To a new DVC remote (a machine-local setting) and a new git remote: the data first,
    then the run branch and its iteration tags."""
    origin, data = tmp_path / "origin.git", tmp_path / "dvc-remote"
    sh(tmp_path, "git", "init", "-q", "--bare", str(origin))
    sh(ran, "git", "remote", "add", "publish", str(origin))
    sh(ran, DVC, "remote", "modify", "--local", "tabula", "url", str(data))
    try:
        out = sh(ran, "tabula", "push", runs.RUN, "--remote", "publish")
        assert "in sync" in sh(ran, DVC, "status", "--cloud")
    finally:
        sh(ran, "git", "remote", "remove", "publish")
        (ran / ".dvc" / "config.local").unlink()
    pushed = int(out.split("dvc: ")[1].split()[0])
    assert pushed > 0 and "2 iteration tags" in out, out
    refs = sh(origin, "git", "for-each-ref", "--format=%(refname)").split()
    assert f"refs/heads/{BRANCH}" in refs
    assert {f"refs/tags/tabula/{runs.RUN}/iter-{i:04d}" for i in (1, 2)} <= set(refs)


def test_reproduce_with_no_data_in_the_remote_is_one_line(ran, tmp_path):
    fresh = tmp_path / "fresh"
    sh(tmp_path, "git", "clone", "-q", "--branch", BRANCH, str(ran), str(fresh))
    empty = tmp_path / "empty-remote"
    empty.mkdir()
    sh(fresh, DVC, "remote", "modify", "--local", "tabula", "url", str(empty))
    proc = subprocess.run(
        [
            "tabula",
            "reproduce",
            f"{runs.RUN}/2",
            "--set",
            f"pipeline.dvc_remote={empty}",
        ],  # fmt: skip
        cwd=fresh,
        capture_output=True,
        text=True,
        env=_venv_env(),
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = runs.error_line(proc.stderr)
    assert "dvc pull" in line and str(empty) in line, line


def _venv_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def test_one_elo_for_every_iteration(ran, prefect_server):
    """The finished run's closing table (``tabula run`` again prints it), ``tabula elo``,
    ``plots/elo.csv``, the points of ``elo.png`` and MLflow's ``elo`` give each iteration the
    same Elo: the run's latest fit. The fit each evaluation made at the time, which later games
    moved, is ``elo_then`` in ``plots/elo.csv`` and MLflow."""
    from tasks import tracking
    from tasks.run.layout import RunLayout
    from tasks.run.markers import finished
    from tasks.run.records import EvaluationRecord, Stage
    from tasks.watch import read_elo_curve

    layout = RunLayout(ran, "data", runs.RUN)
    curve = {i: elo for i, elo, _, _ in read_elo_curve(layout.elo_plot)}
    assert sorted(curve) == [0, 1, 2]  # 0: the random network, rated by its gate games
    png = {i: curve[i] for i in (1, 2)}
    printed = {i: f"{elo:.0f}" for i, elo in png.items()}
    csv = {int(r["iteration"]): r for r in _csv_rows(layout.plot("elo"))}
    assert {i: float(r["elo"]) for i, r in csv.items()} == pytest.approx(png, rel=1e-5)

    then = {i: finished(layout, i, Stage.EVALUATE, EvaluationRecord).elo.elo for i in (1, 2)}
    assert {i: float(r["elo_then"]) for i, r in csv.items()} == pytest.approx(then, rel=1e-5)
    assert then[1] != png[1] and then[2] == png[2]  # iteration 2's games moved iteration 1's

    args = [a for item in [*TINY, *runs.GATED] for a in ("--set", item)]
    env = {**_venv_env(), "COLUMNS": "250", "PREFECT_API_URL": prefect_server}
    closing = _table(sh_env(ran, env, "tabula", "run", "--iterations", "2", *args), "Elo ± 95%")
    assert {int(i): cell.split(" ± ")[0] for i, cell in closing.items()} == printed
    rated = _table(sh_env(ran, env, "tabula", "elo", *args), "Elo", key="player")
    assert {i: rated[layout.model_id(i)] for i in png} == printed

    client = tracking.connect("sqlite:///mlflow/mlflow.db", ran)
    exp = client.get_experiment_by_name(tracking.experiment_name())
    found = client.search_runs([exp.experiment_id], f"tags.`{tracking.TAG_RUN}` = '{runs.RUN}'")
    pipeline = next(r for r in found if r.data.tags[tracking.TAG_KIND] == "pipeline")
    history = client.get_metric_history(pipeline.info.run_id, "elo")  # (after two closes)
    assert sorted((m.step, m.value) for m in history) == sorted(curve.items())
    history = client.get_metric_history(pipeline.info.run_id, "elo_then")
    assert sorted((m.step, m.value) for m in history) == sorted(then.items())
    for child in (r for r in found if r.data.tags[tracking.TAG_KIND] == "iteration"):
        i = int(child.data.tags[tracking.TAG_ITERATION])
        assert (child.data.metrics["elo"], child.data.metrics["elo_then"]) == (png[i], then[i])


def sh_env(cwd: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr[-3000:]}"
    return proc.stdout


def _csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _table(stdout: str, column: str, key: str = "iteration") -> dict[str, str]:
    """A rich table's ``column`` by its ``key`` column, from a command's output."""
    lines = [line.replace("┃", "│") for line in stdout.splitlines()]  # (the header's rule)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if line[:1] == "│"]
    header = rows[0]
    assert column in header and key in header, stdout
    return {r[header.index(key)]: r[header.index(column)] for r in rows[1:]}


def test_two_runs_line_up_in_dvc_exp_show(ran, prefect_server, tmp_path):
    """Every run branch carries its params and metrics again in ``tabula-run/`` (the paths DVC
    keys them by, the same on every branch): ``dvc exp show --all-branches`` gives the two runs
    one row each under the same metric columns, and ``dvc params diff`` between the two run
    branches on ``tabula-run/params.yaml`` lists the changed setting and the run's name, nothing
    else. Run in a copy of the finished run, so that the other tests see one run."""
    project = tmp_path / "tabula"
    shutil.copytree(ran, project, symlinks=True)
    runs.run(project, 2, prefect_server, extra=["pipeline.name=other", "search.gumbel_c_scale=0.2"])
    assert sh(project, "git", "status", "--porcelain", "--untracked-files=all") == ""
    assert sh(project, "git", "symbolic-ref", "--short", "HEAD").strip() == "tabula/runs/other"
    assert not sh(project, "git", "ls-tree", "--name-only", "main", FIXED)  # only run branches

    shown = json.loads(sh(project, DVC, "exp", "show", "--all-branches", "--json"))
    assert not [row for row in shown if row.get("error")]  # main, without it, reads too
    rows = {row["rev"]: row["data"] for row in shown}
    tips = {run: sh(project, "git", "rev-parse", f"tabula/runs/{run}").strip() for run in RUNS}
    assert set(tips.values()) <= set(rows)  # one row per run
    for run, tip in tips.items():
        metrics = rows[tip]["metrics"][f"{FIXED}/metrics.json"]["data"]
        own = json.loads(sh(project, "git", "show", f"{tip}:data/{run}/metrics.json"))
        assert metrics == own and {"elo", "score_vs_random", "loss"} <= set(metrics)
        params = rows[tip]["params"][f"{FIXED}/params.yaml"]["data"]
        assert params["pipeline"]["name"] == run
    columns = [set(rows[tip]["metrics"][f"{FIXED}/metrics.json"]["data"]) for tip in tips.values()]
    assert columns[0] == columns[1]

    both = [f"tabula/runs/{run}" for run in RUNS]
    args = ["params", "diff", *both, "--targets", f"{FIXED}/params.yaml", "--json"]
    diff = json.loads(sh(project, DVC, *args))[f"{FIXED}/params.yaml"]
    assert {k: (v["old"], v["new"]) for k, v in diff.items()} == {
        "pipeline.name": (runs.RUN, "other"),
        "search.gumbel_c_scale": (0.1, 0.2),
    }


RUNS = (runs.RUN, "other")
FIXED = "tabula-run"  # as reproducing.md names it
