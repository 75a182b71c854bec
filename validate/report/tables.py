"""Plain-text tables for people: fixed-width columns, no dependency, stable for tests to read.

Here rather than in gpuenv because the suite runs where only validate/ is copied; gpuenv's own
tables (doctor, matrix, images) use the same function.
"""

from __future__ import annotations

from typing import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], max_width: int | None = None) -> str:
    """Left-aligned columns separated by two spaces, a dashed rule under the header; cells cut at max_width."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    if max_width is not None:
        cells = [[v[:max_width] for v in row] for row in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths).rstrip())
    return "\n".join(lines)
