"""The folders are the product's stages, and imports run one way down them: a module may import
its own stage or a lower one, never a higher one (README: Layout, whose rows are the stages),
and no modules import each other in a ring, within a stage or across. Read from the source's own
import statements (top-level and inside functions), so a new upward import or a new cycle fails
here.
No module is over 1000 lines; ruff's complexity rule bounds each function (tests/test_ruff.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from layoutmap import ROOT, parse_map, row_of

#: README's Layout map is the one list of stages: its rows run from the top stage down, and a
#: stage folder's subfolder (`compat/rules/`, `fleet/report/`) is one stage with it.
README = ROOT / "README.md"


def stage_table(package: str, readme: str | None = None, root: Path = ROOT) -> dict[str, int]:
    """Each module of `package` (its files under `root`) -> its stage, higher runs first: the
    number of the map's rows of `package` below its own row, a subfolder's row counted as its
    folder's. A module no row holds is left out (the check then names it)."""
    rows = parse_map(readme if readme is not None else README.read_text(encoding="utf-8"))
    mine = [row for row in rows if (row.folders + row.files)[0].startswith(package + "/")]
    stage = {id(row): len(mine) - i for i, row in enumerate(mine)}
    for row in mine:
        for folder in row.folders:
            parent = folder.rstrip("/").rpartition("/")[0] + "/"
            holder = [r for r in mine if parent in r.folders and parent.count("/") > 1]
            if holder:
                stage[id(row)] = stage[id(holder[0])]
    table = {}
    for path in sorted((root / package).rglob("*.py")):
        row = row_of(path.relative_to(root).as_posix(), rows)
        if row is not None and id(row) in stage:
            table[_module_name(path, root)] = stage[id(row)]
    return table


def _rank(module: str, table: dict[str, int]) -> tuple[str, int] | None:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in table:
            return prefix, table[prefix]
    return None


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(tree: ast.AST) -> set[str]:
    """Every absolute module an import statement names (`from a import b` counts a.b too, since b
    may be a module)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def upward_imports(
    package: str, table: dict[str, int], forbidden: tuple[str, ...] = (), root: Path = ROOT
) -> list[str]:
    problems = []
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        me = _module_name(path, root)
        my_stage = _rank(me, table)
        assert my_stage is not None, (
            f"{path} belongs to no stage: add its folder to README's Layout map"
        )
        above: set[str] = set()
        for target in _imported(ast.parse(path.read_text(encoding="utf-8"))):
            if target.startswith(forbidden):
                above.add(target.split(".")[0])
                continue
            other = _rank(target, table) if target.split(".")[0] == package else None
            if other and other[0] != my_stage[0] and other[1] > my_stage[1]:
                above.add(other[0])
        shown = {s for s in above if not any(s.startswith(o + ".") for o in above)}
        problems += [
            f"{me} ({my_stage[0]}) imports {stage}, a higher stage or a forbidden package"
            for stage in sorted(shown)  # a package, not each of its modules again
        ]
    return problems


def test_gpuenv_imports_run_down_the_stages():
    assert upward_imports("gpuenv", stage_table("gpuenv")) == []


def test_validate_never_imports_gpuenv_and_runs_down_its_parts():
    assert upward_imports("validate", stage_table("validate"), forbidden=("gpuenv",)) == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from gpuenv.cli import settings\n", "gpuenv.envs.x (gpuenv.envs) imports gpuenv.cli"),
        (
            "def f():\n    from gpuenv.images import plan\n",
            "gpuenv.envs.x (gpuenv.envs) imports gpuenv.images",
        ),
    ],
)
def test_an_upward_import_is_caught(tmp_path, source, expected):
    """The check itself can fail: a module of envs/ that reaches up into cli/ or images/."""
    fake = tmp_path / "gpuenv" / "envs"
    fake.mkdir(parents=True)
    (fake / "x.py").write_text(source)
    problems = upward_imports("gpuenv", stage_table("gpuenv"), root=tmp_path)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


# ---------------------------------------------------------------- cycles


def _module_files(package: str, root: Path) -> dict[str, Path]:
    return {
        _module_name(p, root): p
        for p in sorted((root / package).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def _targets(tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` an import statement names: `from a import b` is a.b when b is a
    module, else a. A parent package a module's import runs anyway is no edge: every submodule would
    otherwise ring with a package that re-exports it."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in modules else node.module)
    return found & set(modules)


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    modules = _module_files(package, root)
    return {
        me: _targets(ast.parse(path.read_text(encoding="utf-8")), modules) - {me}
        for me, path in modules.items()
    }


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every ring of modules that import each other (Tarjan's strongly connected components), each
    as one path that closes on its first module: "a -> b -> a"."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    rings: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            ring = []
            while not ring or ring[-1] != node:
                ring.append(stack.pop())
            if len(ring) > 1:
                rings.append(_closed_path(sorted(ring), graph))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return rings


def _closed_path(ring: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One path through the ring from its first module back to it (breadth first: the shortest)."""
    start, members = ring[0], set(ring)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for other in sorted(graph[node] & members):
                if other == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if other not in came:
                    came[other] = node
                    nxt.append(other)
        frontier = nxt
    return ring


@pytest.mark.parametrize("package", ["gpuenv", "validate"])
def test_no_modules_import_each_other_in_a_ring(package):
    assert [" -> ".join(ring) for ring in import_cycles(import_graph(package))] == []


def test_a_ring_within_a_stage_is_caught(tmp_path):
    """The check itself can fail: two modules of envs/ that import each other (one lazily), and a
    package that imports its own submodule, which is no ring."""
    fake = tmp_path / "gpuenv" / "envs"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("from gpuenv.envs import a\n")
    (fake / "a.py").write_text("from gpuenv.envs.b import thing\n")
    (fake / "b.py").write_text("def thing():\n    from gpuenv.envs import a\n")
    (fake / "c.py").write_text("from gpuenv.envs import b\n")
    assert import_cycles(import_graph("gpuenv", root=tmp_path)) == [
        ["gpuenv.envs.a", "gpuenv.envs.b", "gpuenv.envs.a"]
    ]


# ---------------------------------------------------------------- size

#: A loose bound on a module's length, as ruff formats it: past it, a module holds more than one
#: job. Functions are bounded by ruff's complexity rule (pyproject.toml, tests/test_ruff.py).
MAX_MODULE_LINES = 1000
#: Modules that are pure data tables (no logic), which may be longer; none today.
DATA_TABLES: frozenset[str] = frozenset()


def long_modules(root: Path = ROOT) -> list[str]:
    """Every Python module of the checkout over MAX_MODULE_LINES lines, outside DATA_TABLES."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if (
            any(
                part.startswith(".") or part in ("__pycache__", "node_modules")
                for part in rel.parts
            )
            or rel.as_posix() in DATA_TABLES
        ):
            continue
        lines = len(path.read_text(encoding="utf-8", errors="replace").splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{rel.as_posix()}: {lines} lines")
    return found


def test_no_module_is_over_1000_lines():
    assert long_modules() == []


def test_a_long_module_is_caught(tmp_path):
    (tmp_path / "gpuenv").mkdir()
    (tmp_path / "gpuenv" / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "gpuenv" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules(tmp_path) == [f"gpuenv/long.py: {MAX_MODULE_LINES + 1} lines"]


def test_the_stages_are_the_rows_of_the_readme_map_in_order():
    """The stages are read from README's map, not kept here: its rows in order, a subfolder one
    stage with its folder; a map whose rows are swapped makes the real imports run up."""
    table = stage_table("gpuenv")
    assert (
        table["gpuenv.cli.settings"]
        > table["gpuenv.images.plan"]
        > table["gpuenv.compat.resolve"]
        > table["gpuenv.envs.spec"]
        > table["gpuenv.engine.build"]
        > table["gpuenv.stack"]
    )
    assert table["gpuenv.compat.rules.cuda"] == table["gpuenv.compat.matrix"]
    assert table["gpuenv.fleet.report.analysis"] == table["gpuenv.fleet.outcome"]
    checks = stage_table("validate")
    assert checks["validate.cli"] > checks["validate.checks.world"] > checks["validate.host.nvml"]
    lines = README.read_text(encoding="utf-8").splitlines()
    cli = next(i for i, line in enumerate(lines) if line.startswith("| `gpuenv/cli/` |"))
    envs = next(i for i, line in enumerate(lines) if line.startswith("| `gpuenv/envs/` |"))
    lines[cli], lines[envs] = lines[envs], lines[cli]
    problems = upward_imports("gpuenv", stage_table("gpuenv", "\n".join(lines)))
    assert any(p.startswith("gpuenv.cli.") and "imports gpuenv.envs" in p for p in problems)
