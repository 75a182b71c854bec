"""One module (or package) owns each outside system: nothing else in the product imports it.

The table is the rule (README "Layout", docs/STYLE habit 2): Docker and its SSH transport in
gpuenv/engine/, py-rattler in gpuenv/envs/conda.py, NVML in validate/host/nvml.py, conda-lock's
models in the two modules that read and write its files, PyYAML in gpuenv/ only (the suite reads
its tables with validate/simpleyaml.py, the same in an image without PyYAML). Every import form
counts: `import x`, `from x import y` (also inside a function), `importlib.import_module("x")`
and `__import__("x")`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("gpuenv", "validate", "tasks.py")

#: outside library (top-level import name) -> the paths that may import it (a folder ends with /).
OWNERS: dict[str, tuple[str, ...]] = {
    "docker": ("gpuenv/engine/",),
    "paramiko": ("gpuenv/engine/",),
    "rattler": ("gpuenv/envs/conda.py",),
    "pynvml": ("validate/host/nvml.py",),
    "conda_lock": ("gpuenv/envs/condalock.py",),
    "yaml": ("gpuenv/",),
}


def _called(call: ast.Call) -> str:
    """The function a call names: `import_module` for importlib.import_module(...) too."""
    return getattr(call.func, "attr", getattr(call.func, "id", ""))


def imported_names(source: str, filename: str = "<planted>") -> set[str]:
    """Top-level package names a module imports, read from its syntax (any depth, any form)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__"):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value.split(".")[0])
    return names


def _owns(owner: str, rel: str) -> bool:
    return rel.startswith(owner) if owner.endswith("/") else rel == owner


def trespassers(root: Path = ROOT) -> list[str]:
    """'path imports lib' for each product module importing an outside library it does not own."""
    out = []
    for top in PRODUCT:
        paths = [root / top] if top.endswith(".py") else sorted((root / top).rglob("*.py"))
        for path in paths:
            if not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            libs = imported_names(path.read_text(encoding="utf-8"), rel) & OWNERS.keys()
            for lib in sorted(libs):
                if not any(_owns(owner, rel) for owner in OWNERS[lib]):
                    out.append(f"{rel} imports {lib}: only {', '.join(OWNERS[lib])} may")
    return out


def test_each_outside_system_is_imported_only_by_its_owner():
    assert trespassers() == []


def test_every_owner_in_the_table_exists():
    for lib, owners in OWNERS.items():
        for owner in owners:
            assert (ROOT / owner).exists(), f"{lib}: the owner {owner} is not in the product"


FORMS = (
    "import {lib}",
    "import {lib}.sub as s",
    "from {lib} import thing",
    "from {lib}.sub import thing",
    "def f():\n    from {lib} import thing",
    "import importlib\nimportlib.import_module('{lib}')",
    "from importlib import import_module\nimport_module('{lib}.sub')",
    "__import__('{lib}')",
)


@pytest.mark.parametrize("lib", sorted(OWNERS))
def test_a_planted_import_of_each_library_elsewhere_fails_the_guard(lib, tmp_path):
    """The guard can fail: each form of importing `lib`, planted in a module that does not own
    it, is named; the same text in its owner is not."""
    rel = next(
        r
        for r in ("gpuenv/stack_helpers.py", "validate/stack_helpers.py")
        if not any(_owns(owner, r) for owner in OWNERS[lib])
    )
    elsewhere = tmp_path / rel
    elsewhere.parent.mkdir(parents=True)
    owner = OWNERS[lib][0]
    owned = tmp_path / (owner + "inside.py" if owner.endswith("/") else owner)
    owned.parent.mkdir(parents=True, exist_ok=True)
    for form in FORMS:
        text = form.format(lib=lib) + "\n"
        elsewhere.write_text(text)
        owned.write_text(text)
        named = f"{rel} imports {lib}: only {', '.join(OWNERS[lib])} may"
        assert trespassers(tmp_path) == [named], form
        elsewhere.write_text(
            "import dockerfile_parse\nfrom gpuenv import engine\nimport pynvml_utils\n"
        )  # names that only begin like an owned one
        assert trespassers(tmp_path) == [], form
