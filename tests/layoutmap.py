"""README's Layout map, read: its rows (the folders or files each covers, what each may import)
and the row a file belongs to. tests/test_layout_map.py checks the "may import" column against the
imports; tests/test_layers.py reads the stages from the rows' order."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def file_of(module: str) -> str | None:
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if (ROOT / candidate).is_file():
            return candidate
    return None


def row_of(path: str, rows: list[MapRow]) -> MapRow | None:
    """The row a file belongs to: the one naming it, else the one with the deepest folder
    holding it."""
    for row in rows:
        if path in row.files:
            return row
    holders = [
        (len(folder), row) for row in rows for folder in row.folders if path.startswith(folder)
    ]
    return max(holders, key=lambda pair: pair[0])[1] if holders else None
