"""No module of the product uses another's `_private` names: what a module shares it names
without an underscore, so a reader sees its surface, and a change to a private name stays local.
Nor does a module rebind another module's attribute (`fixes.RESOLVER = resolve_stack`), nor its
own module-level names at run time (`global _HOST_FILE` in a setter): a value a module needs
arrives as an argument."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("gpuenv", "validate")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _product(module: str | None, level: int) -> bool:
    return level > 0 or (module or "").split(".")[0] in PRODUCT


def crossings(source: str, filename: str = "<planted>") -> list[str]:
    """Each use in `source` of another product module's private name, and each assignment to
    another module's attribute, as 'line: what'."""
    tree = ast.parse(source, filename=filename)
    modules: set[str] = set()  # local names bound to product modules
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _product(node.module, node.level):
            for alias in node.names:
                if _private(alias.name):
                    where = "." * node.level + (node.module or "")
                    out.append(f"{node.lineno}: from {where} import {alias.name}")
                else:
                    modules.add(alias.asname or alias.name)  # a module too: from gpuenv.x import y
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _product(alias.name, 0):
                    if any(_private(part) for part in alias.name.split(".")[1:]):
                        out.append(f"{node.lineno}: import {alias.name}")
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        owner = node.value if isinstance(node, ast.Attribute) else None
        if isinstance(owner, ast.Name) and owner.id in modules:
            assert isinstance(node, ast.Attribute)
            if _private(node.attr):
                out.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    out += _rebindings(tree, modules)
    return sorted(set(out), key=lambda line: int(line.split(":")[0]))


def _rebindings(tree: ast.AST, modules: set[str]) -> list[str]:
    """Each assignment to (or deletion of) an attribute of a product module bound in `modules`,
    however dotted, and each setattr/delattr on one."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in modules:
                out.append(f"{node.lineno}: assigns {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("setattr", "delattr"):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Name) and first.id in modules:
                out.append(f"{node.lineno}: assigns {first.id} through {node.func.id}")
    return out


def offenders(root: Path = ROOT) -> list[str]:
    found = []
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            found += [f"{rel}:{line}" for line in crossings(path.read_text(encoding="utf-8"), rel)]
    return found


def run_time_globals(source: str, filename: str = "<planted>") -> list[str]:
    """Each place in `source` that can rebind a module-level name at run time, as 'line: what':
    each name of a `global` statement, and each call of globals() (which can write any name).
    Such a name is a hidden parameter of every later call, shared by all else in the process."""
    out = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Global):
            out += [f"{node.lineno}: global {name}" for name in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "globals":
            out.append(f"{node.lineno}: globals()")
    return out


#: The run-time globals still in the product ('path: what'), each with the change that removes it.
#: A new one fails the guard; so does one listed here that is gone (then delete its line).
KNOWN_GLOBALS: dict[str, str] = {}


def hidden_globals(
    root: Path = ROOT, known: dict[str, str] = KNOWN_GLOBALS
) -> tuple[list[str], list[str]]:
    """(each run-time global of the product not in `known` as 'path:line: what', each entry of
    `known` no longer found)."""
    new, seen = [], set()
    paths = [root / "tasks.py"] + [p for top in PRODUCT for p in sorted((root / top).rglob("*.py"))]
    for path in (p for p in paths if p.is_file()):
        rel = path.relative_to(root).as_posix()
        for found in run_time_globals(path.read_text(encoding="utf-8"), rel):
            key = f"{rel}: {found.split(': ', 1)[1]}"
            if key in known:
                seen.add(key)
            else:
                new.append(f"{rel}:{found}")
    return new, sorted(set(known) - seen)


def test_no_module_uses_another_modules_private_names():
    assert offenders() == []


def test_the_check_sees_each_form(tmp_path):
    """The check can fail: every way of reaching into another module is named; a module's own
    private names, dunders and public names are not."""
    planted = {
        "from gpuenv.compat.rules.fixes import _describe": "import _describe",
        "from .cuda import _image_minors as minors": "import _image_minors",
        "from validate.host import nvml\nnvml._MODULE": "nvml._MODULE",
        "import gpuenv.compat.rules.fixes as fixes\nfixes._suggest(1)": "fixes._suggest",
        "from gpuenv.compat.rules import fixes\nfixes.RESOLVER = print": "assigns fixes.RESOLVER",
        "import validate._internal": "import validate._internal",
        "import gpuenv.compat.rules.fixes\ngpuenv.compat.rules.fixes.RESOLVER = print": "assigns",
        "from gpuenv.compat.rules import fixes\nsetattr(fixes, 'RESOLVER', print)": "setattr",
        "from validate.host import nvml\nnvml.MODULE: object = None": "assigns nvml.MODULE",
    }
    for text, seen in planted.items():
        assert any(seen in line for line in crossings(text)), text
    clean = (
        "import os\nos._exit\nfrom gpuenv import __version__\n_own = 1\n"
        "from gpuenv.stack import Stack\nStack.x\n"
    )
    assert crossings(clean) == []
    (tmp_path / "gpuenv").mkdir()
    (tmp_path / "gpuenv" / "m.py").write_text("from gpuenv.errors import _hidden\n")
    assert offenders(tmp_path) == ["gpuenv/m.py:1: from gpuenv.errors import _hidden"]


def test_no_module_rebinds_its_own_globals_at_run_time():
    """--host and --platform once travelled through `global _HOST_FILE` / `global _PLATFORM`
    setters in gpuenv/compat/host.py, and the suite's NVML module through `global _MODULE` in
    validate/host/nvml.py; they are arguments now (HostSource, Suite.nvml), and no new such setter
    comes back: the allow-list is empty."""
    assert KNOWN_GLOBALS == {}
    new, gone = hidden_globals()
    assert new == [], "pass the value as an argument instead"
    assert gone == [], "no longer in the product: delete it from KNOWN_GLOBALS"


def test_the_globals_check_can_fail(tmp_path):
    """A planted setter is named, as the old compat/host.py's and nvml.py's were; a listed one is
    let pass only for its own name and file, and a listed one that is gone is named."""
    (tmp_path / "gpuenv" / "compat").mkdir(parents=True)
    (tmp_path / "gpuenv" / "compat" / "host.py").write_text(
        "_HOST_FILE = None\n\n\ndef use_host_file(path):\n    global _HOST_FILE\n"
        "    _HOST_FILE = path\n\n\ndef use(**values):\n    globals().update(values)\n"
    )
    (tmp_path / "validate" / "host").mkdir(parents=True)
    (tmp_path / "validate" / "host" / "nvml.py").write_text(
        "def use_module(nv):\n    global _MODULE\n    _MODULE = nv\n"
    )
    assert hidden_globals(tmp_path) == (
        [
            "gpuenv/compat/host.py:5: global _HOST_FILE",
            "gpuenv/compat/host.py:10: globals()",
            "validate/host/nvml.py:2: global _MODULE",
        ],
        [],
    )
    known = {"validate/host/nvml.py: global _MODULE": "a planted entry"}
    (tmp_path / "validate" / "host" / "nvml.py").write_text(
        "def use_module(nv):\n    global _MODULE, _OTHER\n    _MODULE = nv\n"
    )
    (tmp_path / "gpuenv" / "compat" / "host.py").write_text("def f(x):\n    return x\n")
    assert hidden_globals(tmp_path, known) == (["validate/host/nvml.py:2: global _OTHER"], [])
    (tmp_path / "validate" / "host" / "nvml.py").write_text("def f(nv):\n    return nv\n")
    assert hidden_globals(tmp_path, known) == ([], ["validate/host/nvml.py: global _MODULE"])
