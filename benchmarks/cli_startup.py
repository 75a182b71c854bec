"""Print how long `invoke --list` and `invoke resolve` take against a bare Python start in the same
run, and their goals (docs/decisions.md, issue 37): `invoke --list` under 0.15 s, `invoke resolve`
under 0.2 s.

Each command runs `--repeats` times, interleaved with the bare start and with `import invoke`
alone, so that a loaded machine stretches them alike; the figures are medians of wall seconds and
of CPU seconds (the child's user + system time). A goal is judged on CPU seconds, not wall: the
command's CPU less the bare start's in the same run, plus 0.03 s for the bare start of a calm
machine (its CPU time here, measured on this 2-core machine: 0.028 s). `import invoke` is the floor
gpuenv cannot go below (Invoke's own package: its config, its vendored YAML, unittest.mock), so
each command also shows what gpuenv adds over it. With --compare DIR the same commands run from
another checkout (e.g. `git worktree add /tmp/base main`), interleaved too, so that a before/after
is side by side. gpuenv's parsed-data cache (gpuenv/datacache.py) is warm, as after a first run,
and each checkout's bytecode is compiled first (`compileall`), as an installed gpuenv's is: Invoke
turns off writing .pyc files (its --write-pyc option), so an untimed run alone would leave a
checkout's modules to be compiled again at every timed start.

Also checks that the resolve path imports none of the heavy modules (torch, tensorflow, conda_lock,
docker), which is what keeps it fast. Run: .venv/bin/python benchmarks/cli_startup.py
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "python -c pass (bare start)": (None, ["-c", "pass"]),
    "python -c 'import invoke' (floor)": (None, ["-c", "import invoke"]),
    "invoke --list": (0.15, ["-m", "invoke", "--list"]),
    "invoke resolve --cuda 12.1": (0.2, ["-m", "invoke", "resolve", "--cuda", "12.1"]),
    "invoke resolve --json (detects host)": (0.2, ["-m", "invoke", "resolve", "--json"]),
}
HEAVY = ("torch", "tensorflow", "conda_lock", "docker")


def run_once(root: Path, args: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `python ARGS` in `root`, its modules first on the path."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # as an installed gpuenv runs: its bytecode cached (PYTHONDONTWRITEBYTECODE would compile every
    # module each time)
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPATH": str(root),
    }
    subprocess.run([sys.executable, *args], cwd=root, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compile_bytecode(root: Path) -> None:
    """Write the .pyc files of `root`'s gpuenv, validate and tasks.py, as `pip install` does: a
    command started by Invoke writes none (sys.dont_write_bytecode), so a run alone would not."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "gpuenv", "validate", "tasks.py"],
        cwd=root,
        check=True,
        capture_output=True,
        env=env,
    )


def heavy_imports() -> list[str]:
    code = (
        "import sys; from gpuenv.compat.host import request_for_host; from "
        "gpuenv.compat.resolve import "
        "resolve_stack;resolve_stack(request_for_host(cuda='12.1'));print(','.join(m for m in "
        f"{HEAVY!r} if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's gpuenv, not an installed one
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True, env=env
    )
    return [m for m in out.stdout.strip().split(",") if m]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--compare", metavar="DIR", help="also time the checkout in DIR, interleaved with this one"
    )
    args = parser.parse_args()
    roots = ([("before", Path(args.compare).resolve())] if args.compare else []) + [("this", ROOT)]
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _, root in roots:  # bytecode compiled, one untimed run each: the files in the page cache
        compile_bytecode(root)
        for _, argv in CASES.values():
            run_once(root, argv)
    for _ in range(args.repeats):
        for label, (_, argv) in CASES.items():
            for code, root in roots if argv[0] == "-m" else roots[-1:]:
                times.setdefault((label, code), []).append(run_once(root, argv))
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; medians of {args.repeats}"
        " interleaved runs; CPU s: the child's user + system seconds"
    )
    print(
        f"{'command':38} {'code':6} {'wall s':>7} {'CPU s':>7} {'x bare':>7} {'+ invoke':>8}"
        "  goal (judged on CPU s - bare CPU s + 0.03 s)"
    )
    labels = list(CASES)
    bare_wall = statistics.median(w for w, _ in times[(labels[0], "this")])
    bare_cpu = statistics.median(c for _, c in times[(labels[0], "this")])
    floor_cpu = statistics.median(c for _, c in times[(labels[1], "this")])
    for (label, code), runs in times.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        goal = CASES[label][0]
        # the goal is a calm machine's; here a command's own cost (less the bare start, which the
        # load stretches alike) is judged by CPU seconds on top of a calm bare start
        judged = cpu - bare_cpu + 0.03
        verdict = (
            ""
            if goal is None
            else f"< {goal:g} s: {judged:.3f} s, {'met' if judged < goal else 'NOT met'}"
        )
        over = "" if goal is None else f"{cpu - floor_cpu:+.3f}"
        ratio = wall / bare_wall
        print(f"{label:38} {code:6} {wall:7.3f} {cpu:7.3f} {ratio:7.1f} {over:>8}  {verdict}")
    floor = floor_cpu - bare_cpu + 0.03
    print(
        f"Invoke's own import alone is {floor:.3f} s judged the same way: gpuenv's code cannot"
        " take a command below it"
    )
    print("heavy modules imported on the resolve path:", ", ".join(heavy_imports()) or "none")


if __name__ == "__main__":
    main()
