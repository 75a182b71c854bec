"""README's Layout map says, per folder, what it may import: that column is the real import graph.
Every import from a folder's modules into another row of the map is named in its "may import"
cell, and every name there is imported (a stale permission is as untrue as a missing one).
tests/test_layers.py checks that those imports run down the stages and close no ring."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Folders whose modules the map's "may import" column speaks for (tests/ and benchmarks/ import anything).
CHECKED = ("gpuenv", "validate", "scripts", "tasks.py")


@dataclass
class MapRow:
    """One line of the map: the folder (or the files) it covers, and the names it may import."""

    folders: list[str] = field(default_factory=list)  # "gpuenv/cli/"
    files: list[str] = field(default_factory=list)  # "gpuenv/stack.py"
    may_import: list[str] = field(default_factory=list)  # module names, and "ground of PACKAGE"
    cell: str = ""
    ground: "MapRow | None" = None  # the ground row that "ground" names


def parse_map(readme: str) -> list[MapRow]:
    """The rows of README's Layout table. A path cell names a folder (`gpuenv/cli/`) or files, the
    first with its folder and the rest in it (`gpuenv/stack.py`, `errors.py`); a "may import" cell
    names modules in backticks, relative to the row's package unless they start with gpuenv or
    validate, and the word ground for that package's ground row."""
    section = readme.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    rows: list[tuple[MapRow, str, str]] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 3 or not cells[0].startswith("`") and not cells[0].startswith("ground"):
            continue
        row = MapRow(cell=cells[2])
        paths = re.findall(r"`([^`]+)`", cells[0])
        base = paths[0].rpartition("/")[0]
        for path in paths:
            if path.endswith("/"):
                row.folders.append(path)
            else:
                row.files.append(path if "/" in path or not base else f"{base}/{path}")
        rows.append((row, paths[0].split("/")[0].removesuffix(".py"), cells[2]))
    grounds = {
        pkg: row for row, pkg, _ in rows if any(f.endswith("/__init__.py") for f in row.files)
    }
    for row, pkg, cell in rows:
        package = "gpuenv" if pkg == "tasks" else pkg
        for name in re.findall(r"`([^`]+)`", cell):
            row.may_import.append(
                name if name.split(".")[0] in ("gpuenv", "validate") else f"{package}.{name}"
            )
        if re.search(r"\bground\b", cell) and package in grounds:
            row.may_import.append(f"ground of {package}")
            row.ground = grounds[package]
    return [row for row, _, _ in rows]


def _module(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _file_of(module: str) -> str | None:
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if (ROOT / candidate).is_file():
            return candidate
    return None


def row_of(path: str, rows: list[MapRow]) -> MapRow | None:
    """The row a file belongs to: the one naming it, else the one with the deepest folder holding it."""
    for row in rows:
        if path in row.files:
            return row
    holders = [
        (len(folder), row) for row in rows for folder in row.folders if path.startswith(folder)
    ]
    return max(holders, key=lambda pair: pair[0])[1] if holders else None


def _targets(path: Path) -> set[str]:
    """The project modules a file imports: `from a import b` is a.b when that is a module, else a."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.update(
                f"{node.module}.{a.name}" if _file_of(f"{node.module}.{a.name}") else node.module
                for a in node.names
            )
    return {
        name for name in found if name.split(".")[0] in ("gpuenv", "validate") and _file_of(name)
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
            theirs = row_of(_file_of(target) or "", rows)
            if theirs is mine:
                continue
            names = [
                n
                for n in mine.may_import
                if (target == n or target.startswith(n + "."))
                and row_of(_file_of(n) or "", rows) is theirs
            ]
            names += [
                n for n in mine.may_import if n.startswith("ground of ") and mine.ground is theirs
            ]
            if not names:
                problems.append(
                    f"{rel} imports {target}, which its row's 'may import' ({mine.cell}) does not name"
                )
            used.setdefault(id(mine), set()).update(names)
    for row in rows:
        for name in row.may_import:
            if _file_of(name) is None and not name.startswith("ground of "):
                problems.append(
                    f"the row of {(row.folders + row.files)[0]} names {name}, which is no module"
                )
            elif name not in used.get(id(row), set()) and any(
                f.startswith(CHECKED) for f in row.folders + row.files
            ):
                problems.append(
                    f"the row of {(row.folders + row.files)[0]} says it may import {name}, but nothing in it does"
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
    wrong = wrong.replace(ground_row, ground_row.rsplit("|", 2)[0] + "| `validate.files` |")
    problems = map_problems(wrong)
    assert [
        p for p in problems if p.startswith("gpuenv/engine/") and "imports validate.text" in p
    ], problems
    assert (
        "the row of gpuenv/__init__.py says it may import validate.files, but nothing in it does"
        in problems
    ), problems
    assert len(problems) == 1 + sum("imports validate.text" in p for p in problems), problems
