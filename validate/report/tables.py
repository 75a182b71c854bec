"""Plain-text tables for people: fixed-width columns, no dependency, stable for tests to read.

Here rather than in gpuenv because the suite runs where only validate/ is copied; gpuenv's own
tables (doctor, matrix, images) use the same function.
"""

from __future__ import annotations

import textwrap
from typing import Sequence


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], max_width: int | None = None
) -> str:
    """Left-aligned columns separated by two spaces, a dashed rule under the header; cells cut at
    max_width."""
    cells = [[str(h) for h in headers]] + [
        ["" if v is None else str(v) for v in row] for row in rows
    ]
    if max_width is not None:
        cells = [[v[:max_width] for v in row] for row in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths).rstrip())
    return "\n".join(lines)


def wrap_rows(rows: Sequence[Sequence[object]], widths: Sequence[int]) -> list[list[str]]:
    """Rows as printed lines, each cell wrapped within its column's width (at spaces; a longer
    word is broken), so a long cell takes more lines instead of losing its end."""
    out: list[list[str]] = []
    for row in rows:
        cells = [
            textwrap.wrap("" if v is None else str(v), w, break_on_hyphens=False) or [""]
            for v, w in zip(row, widths)
        ]
        out += [
            [c[n] if n < len(c) else "" for c in cells] for n in range(max(len(c) for c in cells))
        ]
    return out
