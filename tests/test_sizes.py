"""Functions stay readable in one sitting (STYLE.md, principle 4): beside the layering rule,
no function of the code's layers takes more than ``MAX_PARAMS`` parameters or runs to more than
``MAX_LINES`` lines.

A function that needs more inputs takes a record (`tabula.plan.TrainSpec`, a ``MatchSpec``);
one that grows longer is split along its steps. The few exceptions are listed in
``EXCEPTIONS`` with their reason; an exception that no longer needs to be one fails too, so the
list stays true.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["tabula", "model", "tasks", "flows", "cli"]
MAX_PARAMS = 8
MAX_LINES = 60

_NUMBA_KERNEL = (
    "a numba kernel over the board's flat arrays: nopython code takes arrays, not records "
    "(a jitclass would not be cached to disk), and the superko state (game_set, path, "
    "n_path) and the rules' tables (nbr, zob) are each an input of its own"
)
_TYPER_COMMAND = (
    "a Typer command: each parameter is one documented option of the command line "
    "(`tabula COMMAND --help`), and the body hands them to the code underneath at once"
)

#: "path:qualified name" -> why it may exceed the limits.
EXCEPTIONS: dict[str, str] = {
    "tabula/go/board.py:legal_mask": _NUMBA_KERNEL,
    "tabula/go/board.py:play_checked": _NUMBA_KERNEL,
    "tabula/go/board.py:move_status": _NUMBA_KERNEL,
    "cli/games.py:gtp": _TYPER_COMMAND,
    "cli/games.py:analysis": _TYPER_COMMAND,
}


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, node  # type: ignore[misc]
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def _params(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    return count - 1 if names and names[0].arg in ("self", "cls") else count


def _lines(fn: ast.FunctionDef) -> int:
    """From the ``def`` line (decorators not counted) to the last line of the body."""
    assert fn.end_lineno is not None
    return fn.end_lineno - fn.lineno + 1


def sizes() -> dict[str, tuple[int, int]]:
    """Every function of the layers, "path:qualified name" -> (parameters, lines)."""
    out: dict[str, tuple[int, int]] = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            rel = path.relative_to(ROOT).as_posix()
            for name, fn in _functions(tree):
                out[f"{rel}:{name}"] = (_params(fn), _lines(fn))
    return out


def _too_big(params: int, lines: int) -> bool:
    return params > MAX_PARAMS or lines > MAX_LINES


def test_functions_are_small() -> None:
    big = {
        where: size
        for where, size in sizes().items()
        if _too_big(*size) and where not in EXCEPTIONS
    }
    assert not big, (
        f"functions over {MAX_PARAMS} parameters or {MAX_LINES} lines (take a record, or split "
        "along the steps; a real exception goes into EXCEPTIONS with its reason):\n"
        + "\n".join(f"{w}: {p} parameters, {n} lines" for w, (p, n) in sorted(big.items()))
    )


def test_every_exception_is_still_needed() -> None:
    found = sizes()
    stale = [w for w in EXCEPTIONS if w not in found or not _too_big(*found[w])]
    assert not stale, "EXCEPTIONS lists functions that are gone or within the limits: " + str(stale)


def test_the_counts_are_what_a_reader_counts() -> None:
    tree = ast.parse(
        "class C:\n"
        "    def m(self, a, b=1, *args, c, **kw):\n"
        "        def inner(x):\n"
        "            return x\n"
        "        return inner\n"
    )
    found = {name: (_params(fn), _lines(fn)) for name, fn in _functions(tree)}
    assert found == {"C.m": (5, 4), "C.m.inner": (1, 2)}
