"""Where the test command's time goes: seconds per test folder from pytest's JUnit files.

    .venv/bin/python -m pytest -ra -n 2 --dist loadscope --junitxml=after.xml   # with a report
    .venv/bin/python benchmarks/suite_time.py after.xml        # per folder, the slowest tests
    .venv/bin/python benchmarks/suite_time.py before.xml after.xml   # before -> after

The goal (issue 37 item 4): the whole test command under 15 minutes on two cores, no test dropped.
pytest writes each test's setup, call and teardown seconds into its <testcase time>, so a module
fixture's work counts for the first test that asked for it; the folder sums are whole. The folder
is the one under tests/ (tests/validate/host/... counts for validate; files directly in tests/
count as "root"). The run's wall time is the <testsuite time>. The test command runs on two
workers (docs/testing.md), so the folders add up to more than the wall time: up to twice it, when
both workers are busy to the end. Compare runs only from the same machine under the same load.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

#: The issue's goal for the whole test command, in seconds.
GOAL_S = 15 * 60
FOLDERS = ("compat", "envs", "images", "engine", "fleet", "team", "validate", "gpu", "root")


def folder_of(classname: str) -> str:
    """tests.validate.test_x -> validate; tests.test_layers -> root."""
    parts = classname.split(".")
    if len(parts) >= 3 and parts[0] == "tests":
        return parts[1]
    return "root"


def read(path: Path) -> tuple[float, dict[str, float], dict[str, int], list[tuple[float, str]]]:
    """(wall seconds, seconds per folder, tests per folder, (seconds, test) of every test)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    wall = sum(float(s.get("time") or 0) for s in suites)
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    tests = []
    for case in root.iter("testcase"):
        classname = case.get("classname") or ""
        took = float(case.get("time") or 0)
        where = folder_of(classname)
        seconds[where] += took
        counts[where] += 1
        tests.append((took, f"{classname.replace('.', '/')}.py::{case.get('name')}"))
    return wall, seconds, counts, sorted(tests, reverse=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", nargs="+", type=Path, help="one JUnit file, or before and after")
    parser.add_argument("--slowest", type=int, default=15, help="how many slowest tests to list")
    args = parser.parse_args(argv)
    if len(args.junit) > 2:
        parser.error("give one JUnit file, or two: before and after")
    missing = [str(p) for p in args.junit if not p.is_file()]
    if missing:
        print(f"suite_time: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    runs = [read(p) for p in args.junit]
    names = [*FOLDERS, *sorted({f for run in runs for f in run[1]} - set(FOLDERS))]
    header = "folder" if len(runs) == 1 else "folder      before (tests)    after (tests)"
    print(header)
    for name in names:
        cells = [f"{run[1].get(name, 0.0):8.1f} s ({run[2].get(name, 0):4d})" for run in runs]
        print(f"{name:<10} " + "   ".join(cells))
    walls = "   ".join(f"{run[0]:8.1f} s" for run in runs)
    print(f"{'wall':<10} {walls}        goal: under {GOAL_S} s on two cores")
    took, _, _, tests = runs[-1]
    verdict = "meets" if took < GOAL_S else "misses"
    print(f"the last run {verdict} the goal ({took:.0f} s against {GOAL_S} s)")
    print(f"\nthe {args.slowest} slowest tests of {args.junit[-1]}:")
    for seconds, name in tests[: args.slowest]:
        print(f"{seconds:8.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
