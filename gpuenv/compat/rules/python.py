"""The Python rules: a --python pin keeps only the builds for it; otherwise the default Python is
the newest the chosen build supports whose X.Y.0 is at least six months old."""

from __future__ import annotations

from datetime import date
from typing import Iterable

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.matrix import version_key as V
from gpuenv.compat.rules.fixes import drop_pin, join_fixes
from gpuenv.compat.rules.frameworks import Candidate, build_name, version_list
from gpuenv.compat.rules.wishes import Wishes
from gpuenv.errors import NoCompatibleStack

#: How old a Python's X.Y.0 must be before it is the default (most packages support it by then).
DEFAULT_PYTHON_MIN_AGE_MONTHS = 6


def apply_python_pin(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """--python X.Y keeps the builds for that Python; none left is a refusal with the Pythons
    there are."""
    if not w.python:
        return cands
    kept = [c for c in cands if c.python == w.python]
    if not kept:
        have = version_list(c.python for c in cands)
        scope = f" for CUDA {w.cuda_version}" if w.cuda_version else ""
        tries = [{"python": p} for p in sorted({c.python for c in cands}, key=V, reverse=True)]
        unpinned = w.fixes.fix(**drop_pin(w.request)) if w.pin else None
        fix = join_fixes(
            [w.fixes.first(tries), unpinned],
            f"use --python with one of {have}, or pin another release",
        )
        raise NoCompatibleStack(
            f"Python {w.python} is not supported by {w.what}{scope} (supported: {have})", fix=fix
        )
    return kept


def pick_python(cands: list[Candidate], w: Wishes) -> tuple[Candidate, str]:
    """The best build (newest release, confirmed, newest CUDA) for the Python pinned, else for the
    default Python among those it supports; and why that Python."""
    best = max(cands, key=Candidate.sort_key)
    if w.python:
        return best, "requested with --python"
    best_key = best.sort_key()
    same_build = [
        c
        for c in cands
        if c.sort_key() == best_key
        and build_name(c) == build_name(best)
        and c.from_pypi == best.from_pypi
    ]
    today = w.request.today or date.today()
    py, why = default_python(w.matrix, (c.python for c in same_build), today)
    return next(c for c in same_build if c.python == py), why


def _add_months(day: date, months: int) -> date:
    month = day.month - 1 + months
    year, month = day.year + month // 12, month % 12 + 1
    for last in (31, 30, 29, 28):
        try:
            return date(year, month, min(day.day, last))
        except ValueError:
            continue
    raise AssertionError("unreachable")


def default_python(matrix: Matrix, pythons: Iterable[str], today: date) -> tuple[str, str]:
    """The default Python among `pythons` and the reason: the newest whose X.Y.0 is six months
    old."""
    offered = sorted(set(pythons), key=V)
    mature = []
    for py in offered:
        rel = matrix.python_release(py)
        if rel is not None and _add_months(rel.released, DEFAULT_PYTHON_MIN_AGE_MONTHS) <= today:
            mature.append(py)
    if mature:
        chosen = mature[-1]
        rel = matrix.python_release(chosen)
        newer = [p for p in offered if V(p) > V(chosen)]
        why = (
            f"the newest Python it supports whose {chosen}.0 is at least "
            f"{DEFAULT_PYTHON_MIN_AGE_MONTHS} months old (released {rel.released})"
        )
        if newer:
            why += f"; {', '.join(newer)} is newer than that, pick it with --python"
        return chosen, why
    chosen = offered[0]
    return (
        chosen,
        f"the oldest Python it supports: none of {', '.join(offered)} is "
        f"{DEFAULT_PYTHON_MIN_AGE_MONTHS} months old yet",
    )
