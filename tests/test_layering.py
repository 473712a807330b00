"""The one-way import rule of DESIGN.md: tabula <- model <- tasks <- flows <- cli.

Also: no module does work at import time (importing everything creates no file or folder).
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
    "flows": {"mlflow", "dvc"},  # only tasks/ touches MLflow and DVC
    "cli": set(),
}


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


def test_layers_exist() -> None:
    for layer in LAYERS:
        assert _modules(layer), f"{layer}/ has no modules"


def test_mlflow_folder_does_not_shadow_the_library() -> None:
    assert not (ROOT / "mlflow" / "__init__.py").exists()


def test_importing_everything_creates_nothing(tmp_path: Path) -> None:
    names = []
    for layer in LAYERS:
        for path in _modules(layer):
            rel = path.relative_to(ROOT).with_suffix("")
            names.append(".".join(rel.parts).removesuffix(".__init__"))
    script = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", script, *names],
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
