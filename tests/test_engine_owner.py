"""One package owns the Docker SDK: gpuenv/engine/ (and the SDK's SSH transport, paramiko)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWNED = ("docker", "paramiko")
OWNER = ROOT / "gpuenv" / "engine"


def _imports(path: Path) -> set[str]:
    """Top-level package names a module imports, read from its syntax (any depth, any form)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__"):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names.add(node.args[0].value.split(".")[0])
    return names


def test_only_the_engine_package_imports_docker():
    offenders = [
        f"{path.relative_to(ROOT)} imports {sorted(_imports(path) & set(OWNED))}"
        for folder in ("gpuenv", "validate")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if OWNER not in path.parents and _imports(path) & set(OWNED)
    ]
    assert offenders == []


def test_the_guard_sees_every_import_form(tmp_path):
    """The check must be able to fail: each way of importing docker is seen."""
    for text in ("import docker", "import docker.errors as e", "from docker.types import Ulimit", "def f():\n    from docker import errors",
                 "import importlib\nimportlib.import_module('docker.errors')", "import paramiko"):
        path = tmp_path / "m.py"
        path.write_text(text + "\n")
        assert _imports(path) & set(OWNED), text
    (tmp_path / "m.py").write_text("from gpuenv import engine\nimport dockerfile_parse\n")
    assert not _imports(tmp_path / "m.py") & set(OWNED)
