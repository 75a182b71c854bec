"""No wall-clock assert under the project's hang bound (tests/hangbound.py): every `assert` that
compares a time taken (time.monotonic() / perf_counter() / time.time() arithmetic, or a name such
as `seconds`, `took`, `elapsed`) with a figure is read, and the figure, where it is a constant
expression, must be at least HANG_BOUND_S; a bound written with HANG_BOUND_S passes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hangbound import HANG_BOUND_S

ROOT = Path(__file__).resolve().parent.parent
#: What a time taken looks like on the measured side of a comparison.
CLOCK = re.compile(
    r"monotonic\(\)|perf_counter\(\)|time\.time\(\)|\b(seconds|took|elapsed|duration|wall)\b"
)
OPS = {ast.Add: lambda a, b: a + b, ast.Mult: lambda a, b: a * b, ast.Sub: lambda a, b: a - b}


def figure(node: ast.AST) -> float | None:
    """The value of a constant bound (numbers with + - *), infinity when it adds HANG_BOUND_S,
    None when it is no constant (a figure computed from the run)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.Name) and node.id == "HANG_BOUND_S":
        return float("inf")
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        left, right = figure(node.left), figure(node.right)
        if left is None or right is None:
            return None
        if float("inf") in (left, right):
            return float("inf")
        return OPS[type(node.op)](left, right)
    return None


def tight_bounds(source: str) -> list[str]:
    """Each assert of `source` that bounds a time taken below HANG_BOUND_S, as 'line N: text'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert):
            continue
        for compare in ast.walk(node.test):
            if not isinstance(compare, ast.Compare):
                continue
            sides = [compare.left, *compare.comparators]
            for op, low, high in zip(compare.ops, sides, sides[1:]):
                if isinstance(op, (ast.Gt, ast.GtE)):
                    low, high = high, low
                elif not isinstance(op, (ast.Lt, ast.LtE)):
                    continue
                measured = ast.get_source_segment(source, low) or ""
                bound = figure(high)
                if CLOCK.search(measured) and bound is not None and bound < HANG_BOUND_S:
                    text = ast.get_source_segment(source, compare)
                    found.append(f"line {compare.lineno}: {text}")
    return found


def test_no_test_asserts_a_wall_clock_bound_under_the_hang_bound():
    found = {
        str(path.relative_to(ROOT)): bounds
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if "captures" not in path.parts
        if (bounds := tight_bounds(path.read_text(encoding="utf-8")))
    }
    assert not found, "\n".join(f"{path}: {'; '.join(lines)}" for path, lines in found.items())


@pytest.mark.parametrize(
    "planted",
    [
        "assert time.monotonic() - started < 2\n",
        "assert time.perf_counter() - started <= 1.0, 'at once'\n",
        "assert ok and seconds < 3 + 6, seconds\n",
        "assert 5 > time.time() - t0\n",
        "def f():\n    assert took < 9.5\n",
    ],
)
def test_a_planted_tight_bound_is_caught(planted):
    assert tight_bounds(planted), planted


@pytest.mark.parametrize(
    "fine",
    [
        "assert time.monotonic() - started < HANG_BOUND_S\n",
        "assert seconds < 3 + HANG_BOUND_S, seconds\n",
        "assert took < 45\n",
        "assert gpu_seconds < 0.5 * (gpu_seconds + LAUNCH_SECONDS)\n",
        "assert len(rows) < 2\n",
    ],
)
def test_the_hang_bound_and_figures_from_the_run_pass(fine):
    assert tight_bounds(fine) == []
