"""The one-way import rule (docs/design.md): tabula <- model <- tasks <- flows <- cli, and no
import circle anywhere, inside a layer too (function-level imports counted).

Also: the run on disk (``tasks/run/``) loads none of the heavy systems, so ``tabula status``
and whatever reads a marker imports no torch; no module does work at import time (importing
everything creates no file or folder).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["tabula", "model", "tasks", "flows", "cli"]

# Third-party packages a layer must not import (on top of every layer above it).
FORBIDDEN_LIBS = {
    "tabula": {
        "torch",
        "pytorch_lightning",
        "lightning",
        "pyarrow",
        "prefect",
        "prefect_dask",
        "mlflow",
        "dvc",
        "dask",
        "distributed",
        "matplotlib",
    },
    "model": {"prefect", "prefect_dask", "mlflow", "dvc", "dask", "distributed"},
    "tasks": set(),
    "flows": {"mlflow", "dvc"},  # only tasks/ touches MLflow (`MLFLOW_HOME`) and DVC
    "cli": set(),
}
#: The one package that imports MLflow, Lightning's MLflow logger included, so that
#: a store's connection, identity and tags are handled in one place.
MLFLOW_HOME = ROOT / "tasks" / "tracking"
#: What the run on disk (tasks/run/) never loads, directly or through what it imports.
HEAVY = {"torch", "pytorch_lightning", "lightning", "prefect", "mlflow", "dvc", "dask"}


def _modules(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_point_one_way(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    violations = []
    for path in _modules(layer):
        bad = _imported_roots(path) & (above | FORBIDDEN_LIBS[layer])
        if bad:
            violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not violations, "layering broken:\n" + "\n".join(violations)


def test_only_the_tracking_package_imports_mlflow() -> None:
    outside = [
        str(path.relative_to(ROOT))
        for layer in [*LAYERS, "bench"]
        for path in _modules(layer)
        if MLFLOW_HOME not in path.parents
        and ("mlflow" in _imported_roots(path) or "MLFlowLogger" in path.read_text())
    ]
    assert not outside, "MLflow imported outside tasks/tracking/:\n" + "\n".join(outside)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _project_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports anywhere in it (functions included): for
    ``from a.b import c`` the module ``a.b.c`` when it is one, else ``a.b``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            names = [n for n in names[:-1] if n in known] or [node.module]
        else:
            continue
        found.update(n for n in names if n in known)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module, or a module
    that imports itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for layer in LAYERS for p in _modules(layer)}
    paths.update({_module_name(p): p for p in sorted((ROOT / "bench").glob("*.py"))})
    known = set(paths)
    return {name: _project_imports(path, known) - {name} for name, path in paths.items()}


def test_no_import_circles() -> None:
    circles = _circles(_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_sees_a_circle_inside_a_layer() -> None:
    graph = {"tasks.a": {"tasks.b"}, "tasks.b": {"tasks.c"}, "tasks.c": {"tasks.a"}, "x": set()}
    assert _circles(graph) == [["tasks.a", "tasks.b", "tasks.c"]]
    known = {"tasks.run.records", "tasks.selfplay"}
    code = "def f():\n    from tasks.selfplay import run_worker\n"
    probe = ROOT / "tests" / ".probe_imports.py"
    try:
        probe.write_text(code)
        assert _project_imports(probe, known) == {"tasks.selfplay"}  # a function-level import
    finally:
        probe.unlink()


def test_the_run_on_disk_imports_nothing_heavy() -> None:
    bad = []
    for path in sorted((ROOT / "tasks" / "run").glob("*.py")):
        direct = _imported_roots(path) & HEAVY
        inside = {m for m in _project_imports(path, set(_graph())) if not m.startswith("tasks.run")}
        if direct or inside - {"model.files", "tabula.elo", "tabula.errors", "tabula.arena",
                               "tabula.gating"}:  # fmt: skip
            bad.append(f"{path.relative_to(ROOT)} imports {sorted(direct | inside)}")
    assert not bad, "\n".join(bad)


def test_layers_exist() -> None:
    for layer in LAYERS:
        assert _modules(layer), f"{layer}/ has no modules"


def test_mlflow_folder_does_not_shadow_the_library() -> None:
    assert not (ROOT / "mlflow" / "__init__.py").exists()


def test_importing_everything_creates_nothing(tmp_path: Path) -> None:
    """Importing every module (the layers and ``bench``) creates no file or folder and leaves
    the environment as it was: defaults for the tools are set where a program starts (the
    `tabula` command, a benchmark's ``main``), never at import. The third-party libraries are
    imported first, so what they set at import (Lightning does) is not counted."""
    paths = [p for layer in LAYERS for p in _modules(layer)] + sorted(ROOT.glob("bench/*.py"))
    names = [_module_name(path) for path in paths]
    ours = {*LAYERS, "bench"}
    libraries = sorted(
        set().union(*map(_imported_roots, paths)) - ours - set(sys.stdlib_module_names)
    )
    script = (
        "import importlib, os, sys\n"
        "split = sys.argv.index('--')\n"
        "for n in sys.argv[1:split]:\n"
        "    try:\n"
        "        importlib.import_module(n)\n"
        "    except ImportError:\n"
        "        pass  # an optional library (the bench extra's)\n"
        "before = dict(os.environ)\n"
        "for n in sys.argv[split + 1 :]:\n"
        "    importlib.import_module(n)\n"
        "for k in sorted(before.keys() | os.environ.keys()):\n"
        "    if before.get(k) != os.environ.get(k):\n"
        "        print(f'{k}: {before.get(k)!r} -> {os.environ.get(k)!r}')\n"
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", script, *libraries, "--", *names],
        cwd=cwd,
        env={
            "PYTHONPATH": str(ROOT),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path / "home"),
            "PREFECT_HOME": str(tmp_path / "prefect-home"),
            "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache"),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    created = sorted(p.name for p in cwd.iterdir())
    assert created == [], f"importing the modules created {created}"
    assert proc.stdout == "", f"importing the modules changed the environment:\n{proc.stdout}"
