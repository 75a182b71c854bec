"""One way to import test helpers: by bare module name from the folders pyproject.toml lists in
[tool.pytest.ini_options] pythonpath. A test module never imports another test module (or a
conftest: pytest loads those itself), nothing imports tests/ as a package (`tests.validate.X`), and
no test edits sys.path or loads a file by path to reach a folder of tests/. Every import form is
read, at any depth (a function's own import too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
#: Folders of tests/ that hold data, not Python the tests import.
NOT_PYTHON = ("captures", "recipes", "fixtures")


def pythonpath() -> set[Path]:
    """The folders pytest puts on sys.path before it collects (pyproject.toml)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {ROOT / folder for folder in config["tool"]["pytest"]["ini_options"]["pythonpath"]}


def python_files() -> list[Path]:
    return sorted(
        p for p in TESTS.rglob("*.py") if not set(p.relative_to(TESTS).parts) & set(NOT_PYTHON)
    )


def is_test_module(path: Path) -> bool:
    return path.name.startswith("test_") or path.name == "conftest.py"


def _reaches_tests(node: ast.AST, source: str) -> bool:
    """Whether an argument's text names a folder of tests/ (a "tests" part or this file's place)."""
    text = ast.get_source_segment(source, node) or ""
    return '"tests"' in text or "'tests'" in text or "__file__" in text or "/tests" in text


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [("." * node.level) + (node.module or "")]
    return []


def _path_edit(node: ast.AST, source: str) -> str | None:
    """What is wrong with a call that edits sys.path or loads a file into tests/, or None."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    if node.func.attr not in ("insert", "append", "spec_from_file_location"):
        return None
    target = ast.get_source_segment(source, node.func) or ""
    reaches = any(_reaches_tests(arg, source) for arg in node.args)
    if target in ("sys.path.insert", "sys.path.append") and reaches:
        return (
            "edits sys.path to reach a folder of tests/: list the folder in pyproject's pythonpath"
        )
    if target.endswith("spec_from_file_location") and reaches:
        return "loads a test helper by its path: import it by its bare name"
    return None


def wrong_imports(source: str, test_modules: set[str], helpers: dict[str, Path]) -> list[str]:
    """Each import of `source` that is not the one way, as 'line N: why'."""
    listed = pythonpath()
    problems = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        edit = _path_edit(node, source)
        if edit:
            problems.append(f"line {node.lineno}: {edit}")
        for name in _imported(node):
            top = name.split(".")[0]
            if name.startswith("."):
                problems.append(
                    f"line {node.lineno}: relative import {name} (tests/ is no package)"
                )
            elif top == "tests":
                problems.append(
                    f"line {node.lineno}: imports {name}: import the helper by its bare name"
                )
            elif top in test_modules:
                problems.append(
                    f"line {node.lineno}: imports the test module {top}: move what it shares "
                    "into a helper module"
                )
            elif top in helpers and helpers[top].parent not in listed:
                where = helpers[top].parent.relative_to(ROOT)
                problems.append(
                    f"line {node.lineno}: imports {top}, whose folder {where} is not in "
                    "pyproject's pythonpath"
                )
    return problems


def _names() -> tuple[set[str], dict[str, Path]]:
    files = python_files()
    tests = {p.stem for p in files if is_test_module(p)}
    helpers = {p.stem: p for p in files if not is_test_module(p)}
    return tests, helpers


def test_every_test_file_imports_helpers_the_one_way():
    tests, helpers = _names()
    found = {
        str(path.relative_to(ROOT)): problems
        for path in python_files()
        if (problems := wrong_imports(path.read_text(encoding="utf-8"), tests, helpers))
    }
    assert not found, "\n".join(f"{path}: {'; '.join(why)}" for path, why in found.items())


def test_every_helper_name_is_unique_and_on_the_path():
    """A bare name means one file: no two helpers (or a helper and a test module) share a name."""
    stems: dict[str, list[str]] = {}
    for path in python_files():
        if path.name != "conftest.py":
            stems.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {stem: paths for stem, paths in stems.items() if len(paths) > 1} == {}
    assert all(folder.is_dir() for folder in pythonpath())


@pytest.mark.parametrize(
    "planted, why",
    [
        (
            "from test_validate_suite import MISSING\n",
            "imports the test module test_validate_suite",
        ),
        ("def f():\n    import test_resolve\n", "imports the test module test_resolve"),
        ("from conftest import BASE_IMAGE\n", "imports the test module conftest"),
        ("from tests.validate import host_variants as v\n", "imports tests.validate"),
        ("import tests.validate.host_variants\n", "imports tests.validate.host_variants"),
        ("from . import host_variants\n", "relative import ."),
        (
            "import sys\nfrom pathlib import Path\n"
            "sys.path.insert(0, str(Path(__file__).parent))\n",
            "edits sys.path",
        ),
        (
            'import sys\nsys.path.append(str(ROOT / "tests" / "gpu"))\n',
            "edits sys.path",
        ),
        (
            "import importlib.util\n"
            'spec = importlib.util.spec_from_file_location("b", ROOT / "tests" / "x" / "b.py")\n',
            "loads a test helper by its path",
        ),
        ("import stray_helper\n", "tests/engine is not in pyproject's pythonpath"),
    ],
)
def test_a_planted_import_is_caught(planted, why):
    tests, helpers = _names()
    helpers = {**helpers, "stray_helper": TESTS / "engine" / "stray_helper.py"}
    problems = wrong_imports(planted, tests, helpers)
    assert any(why in problem for problem in problems), problems


def test_the_one_way_passes():
    tests, helpers = _names()
    clean = (
        "import host_variants as v\n"
        "from lockcases import TORCH_CPU\n"
        "from condachannel import build\n"
        "import sys\n"
        'sys.path.insert(0, str(ROOT / "scripts"))\n'
    )
    assert wrong_imports(clean, tests, helpers) == []
