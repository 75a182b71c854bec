"""One way to do each small thing in the product, so a reader learns it once:
- one signal block: only validate/signals.py saves a signal handler to put it back (`handling`,
  `held_signals`); the fleet's shield, the tasks' SIGTERM and the atomic swaps are built on it;
- one device order: the text "PCI_BUS_ID" is written once, as `DEVICE_ORDER`
  (validate/host/masking.py); every child and check that needs it imports the name."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("gpuenv", "validate", "tasks.py")

#: what may appear once -> the one module where it may.
ONCE = {
    "signal.getsignal": "validate/signals.py",
    "PCI_BUS_ID": "validate/host/masking.py",
}


def uses(source: str, filename: str = "<planted>") -> set[str]:
    """Which of ONCE's things a module's code does: a call of signal.getsignal (however imported)
    or the string constant PCI_BUS_ID (docstrings and comments may name it)."""
    tree = ast.parse(source, filename=filename)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            if node.value == "PCI_BUS_ID":
                found.add("PCI_BUS_ID")
        elif isinstance(node, ast.Attribute) and node.attr == "getsignal":
            found.add("signal.getsignal")
        elif isinstance(node, ast.ImportFrom) and node.module == "signal":
            if any(alias.name == "getsignal" for alias in node.names):
                found.add("signal.getsignal")
    return found


def second_ways(root: Path = ROOT) -> list[str]:
    out = []
    for top in PRODUCT:
        paths = [root / top] if top.endswith(".py") else sorted((root / top).rglob("*.py"))
        for path in (p for p in paths if p.is_file()):
            rel = path.relative_to(root).as_posix()
            for thing in sorted(uses(path.read_text(encoding="utf-8"), rel)):
                if ONCE[thing] != rel:
                    out.append(f"{rel} uses {thing}: only {ONCE[thing]} may")
    return out


def test_each_small_thing_is_done_in_one_place():
    assert second_ways() == []


def test_every_place_in_the_table_exists_and_does_its_thing():
    for thing, rel in ONCE.items():
        assert thing in uses((ROOT / rel).read_text(encoding="utf-8"), rel), (thing, rel)


def test_a_second_way_is_caught(tmp_path):
    """The check can fail: each form planted elsewhere is named; docstrings are not counted."""
    planted = {
        "import signal\nbefore = signal.getsignal(signal.SIGINT)\n": "signal.getsignal",
        "from signal import getsignal\n": "signal.getsignal",
        'env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}\n': "PCI_BUS_ID",
    }
    module = tmp_path / "gpuenv" / "helpers.py"
    module.parent.mkdir()
    for text, thing in planted.items():
        module.write_text(text)
        assert second_ways(tmp_path) == [f"gpuenv/helpers.py uses {thing}: only {ONCE[thing]} may"]
    module.write_text('"""Children run with CUDA_DEVICE_ORDER=PCI_BUS_ID."""\nimport signal\n')
    assert second_ways(tmp_path) == []
