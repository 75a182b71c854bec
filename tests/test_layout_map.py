"""README's Layout map says, per folder, what it may import: that column is the real import graph.
Every import from a folder's modules into another row of the map is named in its "may import"
cell, and every name there is imported (a stale permission is as untrue as a missing one).
tests/test_layers.py reads the stages from the same map and checks that those imports run down
them and close no ring."""

from __future__ import annotations

import ast
from pathlib import Path

from layoutmap import ROOT, file_of, parse_map, row_of

#: Folders whose modules the map's "may import" column speaks for (tests/ and benchmarks/ import
#: anything).
CHECKED = ("gpuenv", "validate", "scripts", "tasks.py")


def _module(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _targets(path: Path) -> set[str]:
    """The project modules a file imports: `from a import b` is a.b when that is a module, else
    a."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.update(
                f"{node.module}.{a.name}" if file_of(f"{node.module}.{a.name}") else node.module
                for a in node.names
            )
    return {
        name for name in found if name.split(".")[0] in ("gpuenv", "validate") and file_of(name)
    }


def map_problems(readme: str, root: Path = ROOT) -> list[str]:
    rows = parse_map(readme)
    problems: list[str] = []
    used: dict[int, set[str]] = {}
    files = [
        p
        for top in CHECKED
        for p in ([root / top] if top.endswith(".py") else sorted((root / top).rglob("*.py")))
        if "__pycache__" not in p.parts
    ]
    for path in files:
        rel = path.relative_to(root).as_posix()
        mine = row_of(rel, rows)
        if mine is None:
            problems.append(f"{rel} belongs to no row of README's Layout")
            continue
        for target in sorted(_targets(path)):
            theirs = row_of(file_of(target) or "", rows)
            if theirs is mine:
                continue
            names = [
                n
                for n in mine.may_import
                if (target == n or target.startswith(n + "."))
                and row_of(file_of(n) or "", rows) is theirs
            ]
            names += [
                n for n in mine.may_import if n.startswith("ground of ") and mine.ground is theirs
            ]
            if not names:
                problems.append(
                    f"{rel} imports {target}, which its row's 'may import' ({mine.cell}) does "
                    "not name"
                )
            used.setdefault(id(mine), set()).update(names)
    for row in rows:
        for name in row.may_import:
            if file_of(name) is None and not name.startswith("ground of "):
                problems.append(
                    f"the row of {(row.folders + row.files)[0]} names {name}, which is no module"
                )
            elif name not in used.get(id(row), set()) and any(
                f.startswith(CHECKED) for f in row.folders + row.files
            ):
                problems.append(
                    f"the row of {(row.folders + row.files)[0]} says it may import {name}, but "
                    "nothing in it does"
                )
    return problems


def test_the_layout_map_names_exactly_the_imports_each_folder_makes():
    assert map_problems((ROOT / "README.md").read_text(encoding="utf-8")) == []


def test_a_map_that_is_not_the_imports_is_caught():
    """The check itself can fail: the engine's row without the one validate module it imports, and
    the ground row of gpuenv claiming an import it does not make."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    engine_row = next(
        line for line in readme.splitlines() if line.startswith("| `gpuenv/engine/` |")
    )
    ground_row = next(
        line for line in readme.splitlines() if line.startswith("| ground: `gpuenv/__init__.py`")
    )
    wrong = readme.replace(
        engine_row, engine_row.replace(", `validate.text` (terminal-safe text)", "")
    )
    wrong = wrong.replace(ground_row, ground_row.rsplit("|", 2)[0] + "| `validate.writing` |")
    problems = map_problems(wrong)
    assert [
        p for p in problems if p.startswith("gpuenv/engine/") and "imports validate.text" in p
    ], problems
    assert (
        "the row of gpuenv/__init__.py says it may import validate.writing, but nothing in it does"
        in problems
    ), problems
    assert len(problems) == 1 + sum("imports validate.text" in p for p in problems), problems
