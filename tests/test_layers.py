"""The folders are the product's stages, and imports run one way down them: a module may import
its own stage or a lower one, never a higher one (README: Layout). Read from the source's own
import statements (top-level and inside functions), so a new upward import fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Stage of each part of gpuenv/, lowest first. A dotted prefix names the part; the longest wins.
GPUENV_RANK = {
    "gpuenv": 0,  # the package face (PROJECT_ROOT, VALIDATE_DIR)
    "gpuenv.stack": 0,
    "gpuenv.errors": 0,
    "gpuenv.progress": 0,
    # the Docker owner, its parts in the order they build on each other; `Engine` composes them
    "gpuenv.engine.common": 1,
    "gpuenv.engine.buildkit": 1,
    "gpuenv.engine.causes": 2,
    "gpuenv.engine.connection": 3,
    "gpuenv.engine.images": 4,
    "gpuenv.engine.build": 5,
    "gpuenv.engine.containers": 5,
    "gpuenv.engine": 6,
    "gpuenv.envs": 7,
    "gpuenv.compat": 8,
    "gpuenv.images": 9,
    "gpuenv.fleet": 9,
    "gpuenv.cli": 10,
}
#: validate/ is copied alone into images: it never imports gpuenv, and its own parts stack up too.
VALIDATE_RANK = {
    "validate": 0,
    "validate.files": 0,
    "validate.simpleyaml": 0,
    "validate.host": 1,
    "validate.judge": 2,
    "validate.report": 3,
    "validate.measure": 4,
    "validate.session": 5,
    "validate.conftest": 5,
    "validate.checks": 6,
    "validate.cli": 6,
    "validate.__main__": 7,
}


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
    """Every absolute module an import statement names (`from a import b` counts a.b too, since b may be a module)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def upward_imports(package: str, table: dict[str, int], forbidden: tuple[str, ...] = (), root: Path = ROOT) -> list[str]:
    problems = []
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        me = _module_name(path, root)
        my_stage = _rank(me, table)
        assert my_stage is not None, f"{path} belongs to no stage: add it to the table in tests/test_layers.py"
        above: set[str] = set()
        for target in _imported(ast.parse(path.read_text(encoding="utf-8"))):
            if target.startswith(forbidden):
                above.add(target.split(".")[0])
                continue
            other = _rank(target, table) if target.split(".")[0] == package else None
            if other and other[0] != my_stage[0] and other[1] > my_stage[1]:
                above.add(other[0])
        problems += [f"{me} ({my_stage[0]}) imports {stage}, a higher stage or a forbidden package" for stage in sorted(above)]
    return problems


def test_gpuenv_imports_run_down_the_stages():
    assert upward_imports("gpuenv", GPUENV_RANK) == []


def test_validate_never_imports_gpuenv_and_runs_down_its_parts():
    assert upward_imports("validate", VALIDATE_RANK, forbidden=("gpuenv",)) == []


@pytest.mark.parametrize("source, expected", [
    ("from gpuenv.cli import common\n", "gpuenv.envs.x (gpuenv.envs) imports gpuenv.cli"),
    ("def f():\n    from gpuenv.images import plan\n", "gpuenv.envs.x (gpuenv.envs) imports gpuenv.images"),
])
def test_an_upward_import_is_caught(tmp_path, source, expected):
    """The check itself can fail: a module of envs/ that reaches up into cli/ or images/."""
    fake = tmp_path / "gpuenv" / "envs"
    fake.mkdir(parents=True)
    (fake / "x.py").write_text(source)
    problems = upward_imports("gpuenv", GPUENV_RANK, root=tmp_path)
    assert len(problems) == 1 and problems[0].startswith(expected), problems
