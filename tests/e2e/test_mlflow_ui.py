"""The MLflow UI, in a real headless browser, shows what the mission promises.

On the store a pipeline run leaves (``conftest.ui_store``), served by the same server that
``tabula ui`` starts, a user finds: the run with its iteration children, the Elo and loss charts,
the dataset inputs (name, DVC digest and path), and the registered model with its ``champion``
alias. Every expected name, id and digest is read back from the store, so the test holds for
the built store and for a real pipeline's. Screenshots go to ``TABULA_SCREENSHOTS`` (kept) or
a temporary folder.

A newcomer's first screens: the links that ``tabula ui`` and ``tabula run`` print, followed in
a fresh browser (where MLflow 3 starts in its GenAI view), open on the runs table and on the charts,
not on the experiment's GenAI overview ("Traces 0").

Waits are on visible text and elements (Playwright's auto-waiting ``expect``), never sleeps.
Routes are those of the MLflow 3 UI (hash routes: ``#/experiments/ID/runs``, ``#/models/NAME``).
"""

from __future__ import annotations

import json
import re
import shlex
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from playwright.sync_api import expect

from cli.ui import (
    PIPELINE_RUNS,
    UiError,
    experiment_lines,
    experiment_links,
    start_ui,
    ui_command,
)
from tasks.tracking import TAG_KIND


@dataclass(frozen=True)
class Expected:
    """What the store holds, as the UI should show it."""

    experiment_id: str
    experiment: str  # tabula (one per project)
    parent_id: str
    parent: str  # the parent run's name
    children: tuple[tuple[str, str], ...]  # (run id, run name) per iteration, in order
    loss_run: tuple[str, str]  # the last child with losses by global step
    dataset: tuple[str, str, str]  # (name, digest, DVC path) of one input of loss_run
    model: str
    champion: str  # the version the champion alias points at
    pipelines: tuple[str, ...] = ()  # the names of every pipeline run in the experiment
    elo_curves: int = 0  # how many different Elo histories they logged (equal ones overlap)
    gated: bool = False  # the parent run logged gate win rates (evaluation.gating)


def read_expected(tracking_uri: str) -> Expected:
    """The project's experiment (or the newest ``tabula/<run>`` one of a store written before
    one experiment held every run), its newest pipeline run, children, a dataset, the
    champion."""
    from tasks import tracking

    client = tracking.connect(tracking_uri)
    exps = client.search_experiments(order_by=["creation_time DESC"])
    exps = [e for e in exps if e.name == tracking.EXPERIMENT or e.name.startswith("tabula/")]
    assert exps, "the store holds no tabula experiment"
    exp = exps[0]
    kind = f"tags.`{tracking.TAG_KIND}`"
    parents = client.search_runs(
        [exp.experiment_id], f"{kind} = 'pipeline'", max_results=1, order_by=["start_time DESC"]
    )
    assert parents, f"{exp.name} holds no pipeline run"
    parent = parents[0]
    children = client.search_runs(
        [exp.experiment_id],
        f"{kind} = 'iteration' and tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
    )
    children.sort(key=lambda r: int(r.data.tags[tracking.TAG_ITERATION]))
    assert children, f"{parent.info.run_name} has no iteration runs"
    trained = [r for r in children if "loss" in r.data.metrics]
    assert trained, f"no iteration run of {parent.info.run_name} logged its training loss"
    loss_run = trained[-1]
    assert loss_run.inputs.dataset_inputs, f"{loss_run.info.run_name} has no dataset inputs"
    ds = loss_run.inputs.dataset_inputs[0].dataset
    every = client.search_runs([exp.experiment_id], f"{kind} = 'pipeline'")
    curves = {
        tuple((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "elo"))
        for r in every
    }
    models = [m for m in client.search_registered_models() if "champion" in m.aliases]
    assert models, "no registered model has a champion alias"
    return Expected(
        experiment_id=exp.experiment_id,
        experiment=exp.name,
        parent_id=parent.info.run_id,
        parent=parent.info.run_name,
        children=tuple((r.info.run_id, r.info.run_name) for r in children),
        loss_run=(loss_run.info.run_id, loss_run.info.run_name),
        dataset=(ds.name, ds.digest, json.loads(ds.source).get("uri", "")),
        model=models[0].name,
        champion=str(models[0].aliases["champion"]),
        pipelines=tuple(sorted(r.info.run_name for r in every)),
        elo_curves=len(curves),
        gated="eval/win_rate" in parent.data.metrics,
    )


@pytest.fixture(scope="module")
def expected(ui_store) -> Expected:
    return read_expected(ui_store.tracking_uri)


@pytest.fixture(scope="module")
def ui(browser, mlflow_url: str) -> Iterator[object]:
    """One tab for the whole visit, of a user who chose the "Model training" view.

    MLflow 3 opens on its GenAI view; the toggle (remembered in the browser's local storage)
    switches to runs, charts and the model registry, as a user of a training pipeline would.
    The tests then move by the UI's hash routes, which the single-page app follows without
    reloading (a reload costs seconds on a small machine).
    """
    # A loaded 2-core CI machine renders the UI slowly: wait up to 30 s for anything.
    expect.set_options(timeout=30_000)
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, base_url=mlflow_url)
    context.set_default_timeout(30_000)
    page = context.new_page()
    # The assistant side panel takes a third of the screen; the registry's "new UI" dialog
    # blocks clicks. A user closes both; these handlers do it whenever they show.
    page.add_locator_handler(
        page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]'),
        lambda close: close.click(),
    )
    page.add_locator_handler(
        page.get_by_role("dialog").filter(has_text="new Model Registry UI"),
        lambda dialog: dialog.get_by_role("button", name="Try it now").click(),
    )
    page.goto("/#/")
    page.get_by_role("button", name="Model training", exact=True).click()
    expect(page.get_by_role("link", name="Model registry")).to_be_visible()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def fresh(browser, mlflow_url: str) -> Iterator[object]:
    """A tab in a browser profile of its own, as a newcomer's: nothing remembered, so MLflow 3
    shows its GenAI view (its "Model training" toggle never clicked)."""
    expect.set_options(timeout=30_000)
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.add_locator_handler(
        page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]'),
        lambda close: close.click(),
    )
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(scope="module")
def printed(ui_store, mlflow_url: str, expected: Expected) -> tuple[str, str]:
    """The runs and charts URLs as ``tabula ui`` and the end of ``tabula run`` print them."""
    lines = experiment_lines(ui_store.tracking_uri, mlflow_url, run=expected.parent)
    assert len(lines) == 2, lines
    runs, charts = (line.rsplit(" ", 1)[1] for line in lines)
    for url in (runs, charts):
        assert url.startswith(f"{mlflow_url}/#/experiments/{expected.experiment_id}/runs?"), url
    return runs, charts


def shot(page, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    # Finish CSS transitions first: a dialog closed a moment ago still fades its grey mask.
    page.screenshot(path=str(path), animations="disabled")
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path


@pytest.mark.slow
@pytest.mark.chromium
def test_experiment_lists_the_run_and_its_iterations(
    ui, expected: Expected, screenshots: Path
) -> None:
    ui.goto("/#/")
    ui.get_by_role("link", name=expected.experiment, exact=True).click()
    grid = ui.locator(".ag-root")  # the runs table
    parent_cell = grid.get_by_role("gridcell").filter(
        has=ui.get_by_role("link", name=expected.parent, exact=True)
    )
    expect(parent_cell).to_be_visible()
    for _, name in expected.children:  # nested under the parent, hidden until expanded
        expect(grid.get_by_role("link", name=name, exact=True)).to_be_hidden()
    parent_cell.get_by_role("button").click()  # the row's expand (+) control
    for _, name in expected.children:
        expect(grid.get_by_role("link", name=name, exact=True)).to_be_visible()
    name, digest, _ = expected.dataset
    expect(grid.get_by_text(f"{name} ({digest})").first).to_be_visible()
    shot(ui, screenshots, "1-runs-with-iterations")


def _chart(page, metric: str, run_name: str, title: str | None = None):
    """The chart card of ``metric`` for ``run_name``, with a drawn line.

    A run with dozens of metrics renders only the charts in view, so the user's way in is the
    page's chart search. Metrics named SECTION/NAME are grouped in a section, the chart titled
    NAME; its legend reads "RUN (SECTION/NAME)". The search matches substrings: "loss" also
    shows every loss/NAME chart, above the section of plain names, so the user scrolls down to
    it as far as it takes (charts out of view are not rendered). The experiment's chart view
    titles a chart by the full name (``title``).
    """
    page.get_by_role("searchbox", name="Search metric charts").fill(metric)
    title, legend = title or metric.rpartition("/")[2], f"{run_name} ({metric})"
    card = (
        page.get_by_test_id("experiment-view-compare-runs-card")
        .filter(has=page.get_by_role("heading", name=title, exact=True))
        .filter(has_text=legend)
    )
    page.mouse.move(800, 600)  # over the charts
    for _ in range(12):
        try:
            expect(card).to_be_visible(timeout=5_000)
            break
        except AssertionError:
            page.mouse.wheel(0, 500)
    expect(card).to_be_visible()
    expect(card.locator(".js-plotly-plot .scatterlayer path.js-line").first).to_be_attached()
    return card


@pytest.mark.slow
@pytest.mark.chromium
def test_run_pages_chart_elo_and_loss(ui, expected: Expected, screenshots: Path) -> None:
    exp = expected.experiment_id
    ui.goto(f"/#/experiments/{exp}/runs/{expected.parent_id}")
    expect(ui.get_by_role("heading", name=expected.parent, exact=True)).to_be_visible()
    expect(ui.get_by_role("link", name="elo", exact=True)).to_be_visible()  # metrics table
    ui.get_by_role("tab", name="Model metrics").click()
    expect(ui).to_have_url(re.compile(r"/model-metrics"))
    # By iteration on the parent: the Elo fit, the score against random, the gate's win rate
    # when the run gates (the built store's does), each stage's final loss.
    gate = ("eval/win_rate",) if expected.gated else ()
    for metric in (*gate, "eval/score_vs_random", "train/loss", "elo_low", "elo_high", "elo"):
        _chart(ui, metric, expected.parent)
    shot(ui, screenshots, "2-elo-charts")

    run_id, run_name = expected.loss_run
    ui.goto(f"/#/experiments/{exp}/runs/{run_id}/model-metrics")
    # By global step on an iteration: the loss, its policy and value terms, the learning rate.
    for metric in ("lr", "loss/policy", "loss/value", "loss"):  # the shot: the loss charts
        _chart(ui, metric, run_name)
    shot(ui, screenshots, "3-loss-charts")


@pytest.mark.slow
@pytest.mark.chromium
def test_two_runs_compared_in_one_elo_chart(ui, expected: Expected, screenshots: Path) -> None:
    """The experiment's chart view, its runs filtered to the pipeline runs as a user would
    (the iteration runs log Elo too): one Elo chart with a line per pipeline run."""
    if len(expected.pipelines) < 2:
        pytest.skip("the store holds one pipeline run")
    search = quote(f"tags.`{TAG_KIND}` = 'pipeline'")
    ui.goto(
        f"/#/experiments/{expected.experiment_id}/runs?compareRunsMode=CHART&searchFilter={search}"
    )
    ui.get_by_role("searchbox", name="Search metric charts").fill("elo")
    card = ui.get_by_test_id("experiment-view-compare-runs-card").filter(
        has=ui.get_by_role("heading", name="elo", exact=True)
    )
    expect(card).to_be_visible()
    lines = card.locator(".js-plotly-plot .scatterlayer path.js-line")
    expect(lines.first).to_be_attached()
    for name in expected.pipelines:  # the legend: "RUN (elo)"
        expect(card.get_by_text(f"{name} (elo)", exact=True)).to_be_visible()
    # One drawn line per Elo history (MLflow draws each trace twice: the same path in two
    # layers); two runs whose gates went the same way share one.
    assert len({line.get_attribute("d") for line in lines.all()}) == expected.elo_curves
    shot(ui, screenshots, "7-two-runs-elo")


def _not_the_genai_overview(page) -> None:
    """The "Model training" view (its sidebar links the model registry), not the GenAI one
    whose experiment overview counts traces ("Traces 0": the only "Traces" outside a link)."""
    expect(page.get_by_role("link", name="Model registry")).to_be_visible()
    expect(page.get_by_text("Traces", exact=True).and_(page.locator(":not(a)"))).to_have_count(0)


def _runs_table(page, expected: Expected) -> None:
    """The experiment's runs table: every pipeline run, the newest with its iterations."""
    expect(page).to_have_url(re.compile(rf"#/experiments/{expected.experiment_id}/runs\?"))
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    grid = page.locator(".ag-root")
    for name in expected.pipelines:
        expect(grid.get_by_role("link", name=name, exact=True)).to_be_visible()
    _not_the_genai_overview(page)
    parent = grid.get_by_role("gridcell").filter(
        has=page.get_by_role("link", name=expected.parent, exact=True)
    )
    parent.get_by_role("button").click()  # expand: the iterations, nested under their run
    for _, name in expected.children:
        expect(grid.get_by_role("link", name=name, exact=True).first).to_be_visible()


@pytest.mark.slow
@pytest.mark.chromium
def test_printed_runs_link_opens_the_runs_table_in_a_fresh_browser(
    fresh, printed: tuple[str, str], expected: Expected, screenshots: Path
) -> None:
    fresh.goto(printed[0])
    _runs_table(fresh, expected)
    shot(fresh, screenshots, "8-printed-runs-link")


@pytest.mark.slow
@pytest.mark.chromium
def test_printed_charts_link_opens_the_charts_in_a_fresh_browser(
    fresh, printed: tuple[str, str], expected: Expected, screenshots: Path
) -> None:
    runs, charts = printed
    fresh.goto(charts)
    expect(fresh).to_have_url(re.compile(r"compareRunsMode=CHART"))
    cards = fresh.get_by_test_id("experiment-view-compare-runs-card")
    expect(cards.first.locator(".js-plotly-plot .scatterlayer path.js-line").first).to_be_attached()
    _not_the_genai_overview(fresh)
    shot(fresh, screenshots, "9-printed-charts-link")
    # Each pipeline run by iteration: its loss, its Elo, a line per run and none per iteration.
    _chart(fresh, "train/loss", expected.parent, title="train/loss")
    elo = _chart(fresh, "elo", expected.parent)
    for name in expected.pipelines:
        expect(elo.get_by_text(f"{name} (elo)", exact=True)).to_be_visible()
    for _, name in expected.children:
        expect(elo.get_by_text(f"{name} (elo)", exact=True)).to_have_count(0)
    shot(fresh, screenshots, "10-printed-charts-link-elo")
    # The charts' run filter stays with them: the runs link still shows every run.
    fresh.goto(runs)
    _runs_table(fresh, expected)


@pytest.mark.slow
@pytest.mark.chromium
def test_run_page_shows_its_dataset_inputs(ui, expected: Expected, screenshots: Path) -> None:
    run_id, run_name = expected.loss_run
    name, digest, path = expected.dataset
    ui.goto(f"/#/experiments/{expected.experiment_id}/runs/{run_id}")
    expect(ui.get_by_role("heading", name=run_name, exact=True)).to_be_visible()
    ui.get_by_text(f"{name} ({digest})", exact=True).first.click()
    drawer = ui.get_by_role("dialog").filter(has_text="Data details for")
    expect(drawer).to_be_visible()
    expect(drawer.get_by_text(f"Digest: {digest}")).to_be_visible()
    if path:
        expect(drawer.get_by_text(f"Path: {path}")).to_be_visible()
    shot(ui, screenshots, "4-dataset-inputs")
    ui.keyboard.press("Escape")
    expect(drawer).to_be_hidden()


@pytest.mark.slow
@pytest.mark.chromium
def test_model_registry_shows_the_champion(ui, expected: Expected, screenshots: Path) -> None:
    ui.goto("/#/")
    ui.get_by_role("link", name="Model registry").click()
    row = ui.get_by_role("row").filter(has=ui.get_by_role("link", name=expected.model, exact=True))
    expect(row).to_contain_text("champion")
    expect(row).to_contain_text(f"Version {expected.champion}")
    shot(ui, screenshots, "5-registered-models")

    row.get_by_role("link", name=expected.model, exact=True).click()
    expect(ui).to_have_url(re.compile(rf"#/models/{re.escape(expected.model)}$"))
    version = ui.get_by_role("row").filter(
        has=ui.get_by_role("link", name=f"Version {expected.champion}", exact=True)
    )
    expect(version).to_contain_text("champion")
    for other in ui.get_by_role("row").filter(has_not_text=f"Version {expected.champion}").all():
        assert "champion" not in other.inner_text(), "the alias names one version only"
    shot(ui, screenshots, "6-model-champion")


def test_ui_command_serves_the_project_store_on_localhost(tmp_path: Path) -> None:
    line = ui_command("sqlite:///mlflow/mlflow.db", "mlflow/artifacts", port=5123, project=tmp_path)
    assert "\n" not in line
    words = shlex.split(line)
    assert words[:3] == [
        "MLFLOW_DISABLE_TELEMETRY=true",
        "DO_NOT_TRACK=1",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false",
    ]
    argv = words[3:]
    assert argv[1:4] == ["-m", "mlflow", "server"]
    options = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert options == {
        "--backend-store-uri": f"sqlite:///{tmp_path.resolve()}/mlflow/mlflow.db",
        "--default-artifact-root": str(tmp_path.resolve() / "mlflow" / "artifacts"),
        "--host": "127.0.0.1",
        "--port": "5123",
        "--workers": "1",
    }


def test_start_ui_refuses_a_missing_store(tmp_path: Path) -> None:
    with pytest.raises(UiError, match=r"no MLflow store at .*nothing\.db: run the pipeline"):
        start_ui(f"sqlite:///{tmp_path}/nothing.db")


def test_start_ui_refuses_a_busy_port(tmp_path: Path) -> None:
    (tmp_path / "mlflow.db").touch()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UiError, match=rf"127\.0\.0\.1:{port} .*choose another --port"):
            start_ui(f"sqlite:///{tmp_path}/mlflow.db", port=port)


def test_experiment_links_open_the_runs_and_charts_of_the_training_view() -> None:
    links = experiment_links("7", "http://127.0.0.1:5123/")
    view = "workflowType=machine_learning"
    assert links.runs == f"http://127.0.0.1:5123/#/experiments/7/runs?searchFilter=&{view}"
    assert links.charts == (
        "http://127.0.0.1:5123/#/experiments/7/runs?compareRunsMode=CHART"
        f"&searchFilter=tags.%60tabula.kind%60%20%3D%20%27pipeline%27&{view}"
    )
    route, _, query = urlsplit(links.charts).fragment.partition("?")
    assert route == "/experiments/7/runs"
    assert parse_qs(query) == {
        "compareRunsMode": ["CHART"],
        "searchFilter": [f"tags.`{TAG_KIND}` = 'pipeline'"],
        "workflowType": ["machine_learning"],
    }
    assert PIPELINE_RUNS == parse_qs(query)["searchFilter"][0]
    assert experiment_links("7").runs.startswith("http://127.0.0.1:5000/#/experiments/7/runs?")


def test_experiment_lines_link_the_project_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks import tracking
    from tasks.tracking import store

    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert experiment_lines(uri) == [
        "no experiment 'tabula' in the store yet: run the pipeline first"
    ]
    assert not (tmp_path / "mlflow.db").exists()  # looking creates no store
    client = tracking.connect(uri)
    project = store.experiment(client, "tabula", tmp_path / "artifacts")
    legacy = store.experiment(client, "tabula/old", tmp_path / "artifacts")
    base = "http://127.0.0.1:5123"
    for run, (name, exp) in {
        None: ("tabula", project),
        "new": ("tabula", project),
        "old": ("tabula/old", legacy),  # a run begun in its own experiment stays there
    }.items():
        links = experiment_links(exp, base)
        assert experiment_lines(uri, base, run=run) == [
            f"runs of experiment {name!r}:  {links.runs}",
            f"their charts (Elo, losses by iteration):  {links.charts}",
        ]
    assert experiment_lines(uri)[0].endswith(experiment_links(project).runs)
