"""How long `python -m validate --quick` takes on this host, and where the time goes.

The issue's budget: the quick suite finishes within 60 s on a one-GPU server. Run this on the
server (or in CI) to see the wall time and each check's share, e.g.

    .venv/bin/python benchmarks/validate_quick_budget.py --repeats 3 --json /tmp/budget.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_SECONDS = 60.0
REPO = Path(__file__).resolve().parents[1]


def one_run(extra: list[str]) -> tuple[float, int, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "validate", "--quick", "--json", str(report), *extra],
            cwd=REPO, capture_output=True, text=True,
        )
        wall = time.perf_counter() - started
        return wall, done.returncode, json.loads(report.read_text()) if report.exists() else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the timings here")
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for the suite")
    args = parser.parse_args()
    walls, slowest = [], {}
    for _ in range(args.repeats):
        wall, code, report = one_run(args.pytest_args)
        walls.append(wall)
        for section in report.values():
            for check in section.get("checks", []) if isinstance(section, dict) else []:
                key = f"{check['check']} [{(check['gpu'] or 'host')[:12]}]"
                slowest[key] = max(slowest.get(key, 0.0), check["seconds"] or 0.0)
        print(f"run: {wall:.1f}s wall, exit {code}")
    median = statistics.median(walls)
    print(f"median wall time of the quick suite: {median:.1f}s (budget {BUDGET_SECONDS:.0f}s)")
    for name, seconds in sorted(slowest.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {seconds:6.2f}s  {name}")
    if args.json:
        Path(args.json).write_text(json.dumps({"walls": walls, "median": median, "checks": slowest}, indent=2))
    return 0 if median <= BUDGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
