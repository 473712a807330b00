"""What an install brings: every package the code imports (or runs as ``python -m``) is
declared in pyproject.toml, ``make run`` installs the runtime only, no test or lint tool, and
compiles self-play's kernels before the run (``tabula compile``), so that the run loads them."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from tests.helpers.numba import selfplay_warm_up_cache_use

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tabula", "model", "tasks", "flows", "cli")
# ``sys.executable, "-m", "uvicorn"``: a module run by the venv's Python (not pg_ctl's "-m fast")
RUN_AS_MODULE = re.compile(r"""sys\.executable,\s*["']-m["'],\s*["']([A-Za-z_][\w.]*)["']""")


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503)."""
    name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules() -> dict[str, str]:
    """Top-level third-party modules the code imports or runs, each with one file naming it."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            names = [m.group(1) for m in RUN_AS_MODULE.finditer(text)]
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Import):
                    names += [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.append(node.module)
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PACKAGES:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    owners = packages_distributions()
    undeclared = {
        module: where
        for module, where in _imported_modules().items()
        if not declared & {_name(d) for d in owners.get(module, [module])}
    }
    assert undeclared == {}, "imported but not in [project].dependencies"


def test_the_test_tools_are_not_runtime_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    dev_only = {"pytest", "pytest-xdist", "hypothesis", "ruff", "mypy", "playwright"}
    assert runtime.isdisjoint(dev_only)


def test_make_run_installs_the_runtime_only(tmp_path: Path) -> None:
    """``make -n`` on a fresh checkout (no .venv): the commands ``make run`` would run."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    plan = {
        target: subprocess.run(
            ["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout
        for target in ("run", "test")
    }
    installs = {t: [ln for ln in p.splitlines() if "pip install" in ln] for t, p in plan.items()}
    assert installs["run"] and all("[dev]" not in line for line in installs["run"]), plan["run"]
    assert any("-e ." in line for line in installs["run"]), plan["run"]
    assert any("[dev]" in line for line in installs["test"]), plan["test"]
    packages = [line for lines in installs.values() for line in lines if " -e " in line]
    assert packages and all("--no-compile" in line for line in packages), plan
    commands = [line.split()[1] for line in plan["run"].splitlines() if "bin/tabula " in line]
    assert commands == ["compile", "run"], plan["run"]


def test_tabula_compile_leaves_nothing_for_a_run_to_compile(tmp_path: Path) -> None:
    """``tabula compile`` (what ``make run`` runs first) fills numba's cache: a fresh process
    then warms up for self-play (`tasks.selfplay.compile_kernels`) from it, compiling nothing."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    tabula = [sys.executable, "-c", "import cli; cli.main()"]
    done = subprocess.run([*tabula, "compile"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("numba's kernels compiled or found in its cache ("), done.stdout
    used, misses, _ = selfplay_warm_up_cache_use(tmp_path / "cache")
    assert used > 20 and misses == 0
    bad = subprocess.run([*tabula, "compile", "--set", "rules.board_size=1"], cwd=ROOT, env=env,
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "rules.board_size: must be >= 5 (got 1)" in bad.stderr


def test_a_users_own_modules_named_like_ours_leave_the_command_working(tmp_path: Path) -> None:
    """A user's ``model.py`` (or ``tasks.py``, ``flows.py``, ``cli.py``) in the folder they run
    ``tabula`` from is not imported in place of the pipeline's: the installed command puts its
    own folder first on the path, never the working directory (docs/design.md, "Layout")."""
    for name in ("model", "tasks", "flows", "cli"):
        (tmp_path / f"{name}.py").write_text('raise ImportError("the user\'s own module")\n')
    tabula = Path(sys.executable).parent / "tabula"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [str(tabula), "gtp", "--model", "random"]
    done = subprocess.run(argv, input="genmove b\nquit\n", cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.match(r"= [A-HJ-T]\d|= pass", done.stdout), done.stdout
