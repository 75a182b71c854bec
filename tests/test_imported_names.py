"""Every name the product imports from one of its own modules is defined there, and every
`module.name` it reads off one of its modules exists: a re-export that missed a name (the old
gpuenv/fleet/slurm.py lacked `check_env`, `srun_cpus`, `resource_options`) fails here, not on a
Slurm cluster. Read from the source: definitions at a module's top level, its imports, and its
submodules."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("gpuenv", "validate")


def _file(module: str, root: Path) -> Path | None:
    base = root / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=None)
def _defined(path: Path) -> frozenset[str] | None:
    """Names bound at a module's top level (anywhere outside functions and classes), or None when
    it may bind names it does not spell (a star import, globals())."""
    names: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return None
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "globals":
            return None
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return frozenset(names)


def _has(module: str, name: str, root: Path) -> bool:
    path = _file(module, root)
    if path is None or _file(f"{module}.{name}", root) is not None:
        return True  # not ours to judge, or a submodule
    names = _defined(path)
    return names is None or name in names


def missing(source: str, filename: str, root: Path = ROOT) -> list[str]:
    """'line: module.name' for each product name `source` imports or reads that does not exist."""
    tree = ast.parse(source, filename=filename)
    bound: dict[str, str] = {}  # local name -> product module
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in PRODUCT:
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _file(full, root) is not None:
                    bound[alias.asname or alias.name] = full
                elif not _has(node.module, alias.name, root):
                    out.append(f"{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.split(".")[0] in PRODUCT:
                    bound[alias.asname] = alias.name
    rebound = {  # a name also used for something else in this file is not judged
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    } | {
        a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs
    }
    for name in rebound:
        bound.pop(name, None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = bound.get(node.value.id)
            if module and isinstance(node.ctx, ast.Load) and not _has(module, node.attr, root):
                out.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return sorted(set(out))


def unknown_names(root: Path = ROOT) -> list[str]:
    found = []
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            found += [f"{rel}:{m}" for m in missing(path.read_text(encoding="utf-8"), rel, root)]
    return found


def test_every_imported_product_name_exists():
    assert unknown_names() == []


def test_a_missing_name_is_caught(tmp_path):
    """The check can fail: a name a module does not define, imported or read off the module."""
    (tmp_path / "gpuenv" / "fleet").mkdir(parents=True)
    (tmp_path / "gpuenv" / "__init__.py").write_text("")
    (tmp_path / "gpuenv" / "fleet" / "__init__.py").write_text("")
    (tmp_path / "gpuenv" / "fleet" / "slurm.py").write_text(
        "from gpuenv.fleet.slurm_job import submit\nX = 1\ndef run_job(): pass\n"
    )
    (tmp_path / "gpuenv" / "fleet" / "slurm_job.py").write_text("def submit(): pass\n")
    (tmp_path / "gpuenv" / "fleet" / "multinode.py").write_text(
        "from gpuenv.fleet import slurm\n"
        "from gpuenv.fleet.slurm import check_env, submit, X\n"
        "slurm.run_job()\nslurm.srun_cpus()\nslurm.X\n"
    )
    assert unknown_names(tmp_path) == [
        "gpuenv/fleet/multinode.py:2: from gpuenv.fleet.slurm import check_env",
        "gpuenv/fleet/multinode.py:4: slurm.srun_cpus",
    ]
