"""The facts about files that are written down once: the run folder's drawing in
`tasks.run.layout` holds every `RunLayout` path, no other module builds a path under a run's
root, and docs/design.md's listing of ``tasks/`` names the modules on disk."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import get_type_hints

import tasks.run.layout
from tasks.run.layout import RunLayout

ROOT = Path(__file__).resolve().parents[2]

#: The drawing's placeholders: what a member's arguments become in it.
PLACEHOLDERS = {"curve": "CURVE", "anchor": "ANCHOR", "stage": "STAGE"}
SAMPLE = {"i": 7, "w": 3}
NUMBERED = [(r"iter-0007", "iter-NNNN"), (r"worker-03", "worker-WW")]

#: A drawn line: its indent, its name (up to two spaces), and the member on its right.
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>\S+)(?: {2,}(?:(?P<member>[a-z_]+)\b)?.*)?$")


def _block(text: str, first: str) -> list[str]:
    """The lines of the fenced block in ``text`` that starts by drawing ``first``."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    found = [b.splitlines() for b in blocks if b.split(maxsplit=1)[:1] == [first]]
    assert found, f"no drawing starting with {first!r}"
    return found[0]


def _drawn(lines: list[str]) -> dict[str, str | None]:
    """Each drawn path (a folder's ends in a slash) and the member named on its line."""
    out: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in lines:
        m = ENTRY.match(line)
        if m is None or not line.strip():
            continue
        indent = len(m["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (stack[-1][1] if stack else "") + m["name"]
        out[path] = m["member"]
        if path.endswith("/"):
            stack.append((indent, path))
    return out


def _member_paths() -> dict[str, str]:
    """Each public `RunLayout` member that gives a path, with the path it gives as drawn."""
    layout = RunLayout(Path("/project"), "data", "<run>")
    fields = set(RunLayout.__dataclass_fields__)
    out = {}
    for name, member in inspect.getmembers(RunLayout):
        if name.startswith("_") or name in fields:
            continue
        func = member.fget if isinstance(member, property) else member
        if get_type_hints(func).get("return") is not Path:
            continue
        if isinstance(member, property):
            path = getattr(layout, name)
        else:
            params = list(inspect.signature(func).parameters)[1:]
            unknown = [p for p in params if p not in SAMPLE and p not in PLACEHOLDERS]
            assert not unknown, f"RunLayout.{name}: give {unknown} a placeholder in this test"
            path = func(layout, *(SAMPLE.get(p, PLACEHOLDERS.get(p)) for p in params))
        drawn = str(path.relative_to(layout.project))
        for number, placeholder in NUMBERED:
            drawn = drawn.replace(number, placeholder)
        out[name] = drawn
    return out


def test_every_layout_member_is_drawn_where_it_points() -> None:
    lines = _block(tasks.run.layout.__doc__ or "", "data/<run>/")
    drawn = {path.rstrip("/"): member for path, member in _drawn(lines).items()}
    members = _member_paths()
    assert {"root", "model", "marker", "plot"} <= members.keys()
    missing = {n: p for n, p in members.items() if p not in drawn}
    assert not missing, f"RunLayout members missing from tasks/run/layout.py's drawing: {missing}"
    misnamed = {p: drawn[p] for n, p in members.items() if drawn[p] != n}
    assert not misnamed, (
        f"drawn paths naming another member than the one that builds them: {misnamed}"
    )
    unknown = {m for m in drawn.values() if m is not None} - set(dir(RunLayout))
    assert not unknown, f"the drawing names members RunLayout lacks: {sorted(unknown)}"


def test_the_drawing_parser_reads_nested_folders() -> None:
    lines = ["data/<run>/   root", "  iter-NNNN/   iteration(i)", "    model/", "      a.pt   x(i)"]
    assert _drawn(lines) == {
        "data/<run>/": "root",
        "data/<run>/iter-NNNN/": "iteration",
        "data/<run>/iter-NNNN/model/": None,
        "data/<run>/iter-NNNN/model/a.pt": "x",
    }


def test_no_module_builds_a_run_path_by_hand() -> None:
    """A path under a run's root is a `RunLayout` member (``root / "..."`` nowhere else)."""
    by_hand = re.compile(r"\broot / f?[\"']")
    layout = ROOT / "tasks" / "run" / "layout.py"
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for layer in ("tasks", "flows", "cli")
        for path in sorted((ROOT / layer).rglob("*.py"))
        if path != layout
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_hand.search(line)
    ]
    assert not found, "run paths built outside RunLayout:\n" + "\n".join(found)


def _listed_modules(lines: list[str]) -> set[str]:
    """The modules (``NAME.py``) and packages (``NAME/``) a ``tasks/`` listing names, relative
    to ``tasks/``; any other line (a description carried over) is not a module."""
    module = re.compile(r"tasks/((?:\w+/)*(?:\w+\.py|\w+/))")
    found = (module.fullmatch(path) for path in _drawn(lines))
    return {m.group(1).removesuffix("/") for m in found if m}


def _modules_on_disk() -> set[str]:
    tasks = ROOT / "tasks"
    found = set()
    for path in tasks.rglob("*.py"):
        rel = path.relative_to(tasks)
        if "__pycache__" in rel.parts:
            continue
        found.add(str(rel.parent) if rel.name == "__init__.py" else str(rel))
    return found - {"."}


def test_design_lists_the_tasks_modules_on_disk() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    listed = _listed_modules(_block(design, "tasks/"))
    on_disk = _modules_on_disk()
    unlisted, gone = sorted(on_disk - listed), sorted(listed - on_disk)
    assert not unlisted and not gone, (
        "docs/design.md's tasks/ listing is out of date:"
        f" modules not listed {unlisted}; listed but not on disk {gone}"
    )


def test_the_listing_parser_sees_packages_and_their_modules() -> None:
    lines = [
        "tasks/",
        "  run/            the run on disk:",
        "    layout.py       where a run's files live,",
        "                    and the run lock",
        "  a.py            what a holds",
    ]
    assert _listed_modules(lines) == {"run", "run/layout.py", "a.py"}
