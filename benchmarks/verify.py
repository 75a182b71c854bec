"""Print how long the environment judge (validate/intact.py, behind `invoke verify` and the
suite's "environment intact" row) takes on a real prefix: every file hashed, and the suite's
--quick sampling (files over 1 MiB by size only).

Run: .venv/bin/python benchmarks/verify.py PREFIX   (a prefix `invoke install` made)
The first pass reads from disk; the later ones from the page cache, as a second run does.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validate import intact  # noqa: E402
from validate.checks.test_01_environment import QUICK_HASH_LIMIT  # noqa: E402


def main(prefix: str) -> None:
    for label, limit in (("full", None), ("full again", None), ("--quick", QUICK_HASH_LIMIT)):
        start = time.perf_counter()
        verdict = intact.check(intact.FolderTree(prefix), prefix, hash_limit=limit)
        took = time.perf_counter() - start
        print(
            f"{label:>10}: {took:6.2f} s  {verdict.files_checked} files, {verdict.files_hashed} "
            f"hashed ({verdict.bytes_hashed / 2**20:.0f} MiB), {len(verdict.problems)} problems"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: benchmarks/verify.py PREFIX")
    main(sys.argv[1])
