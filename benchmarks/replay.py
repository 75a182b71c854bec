"""Print how long replaying an 8-GPU capture takes, against its goal (issue 37 item 3): under a
second, the capture parsed once.

Each capture is replayed `--repeats` times both ways a user runs it, `python -m validate --replay
FILE` and `invoke validate --replay FILE`, interleaved with a bare Python start so that a loaded
machine stretches them alike. The task judges the replay in its own process
(gpuenv/cli/replay.py: the suite's main, no second Python start and import of the suite), so its
figure is the direct command's plus Invoke's and gpuenv's start. The figures are medians of wall
seconds and of CPU seconds (the child's user + system time). As in benchmarks/cli_startup.py, the
goal is judged on CPU seconds: the command's CPU less the bare start's in the same run, plus
0.03 s for the bare start of a calm machine, because wall time on a loaded machine says more about
the load than about the replay. That the capture is parsed once is proven by
tests/validate/test_validate_replay.py::test_a_replayed_capture_is_parsed_once and, in the task's
process, by tests/validate/test_suite_options.py::
test_invoke_validate_replay_parses_the_capture_once_in_its_own_process; it is not timed here.

Bytecode is cached, as for an installed gpuenv (PYTHONDONTWRITEBYTECODE is dropped).
Run: .venv/bin/python benchmarks/replay.py
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
CAPTURES = ROOT / "tests/validate/captures/nvidia-smi-xml"
EIGHT_GPU = ("h100x8-580.105.08.xml", "b200x8-580.105.08.xml")
GOAL_S = 1.0
INVOKE = Path(sys.executable).with_name("invoke")


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ARGV from the repository root."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's gpuenv and validate
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cases: dict[str, list[str]] = {"python -c pass (bare start)": [sys.executable, "-c", "pass"]}
    for name in EIGHT_GPU:
        capture = str(CAPTURES / name)
        cases[f"python -m validate --replay {name}"] = [
            sys.executable,
            "-m",
            "validate",
            "--replay",
            capture,
        ]
        cases[f"invoke validate --replay {name}"] = [str(INVOKE), "validate", "--replay", capture]
    for argv in cases.values():  # one untimed run each: bytecode written, files in the page cache
        run_once(argv)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in cases}
    for _ in range(args.repeats):
        for label, argv in cases.items():
            times[label].append(run_once(argv))
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; medians of {args.repeats}"
        " interleaved runs; CPU s: the child's user + system seconds"
    )
    print(
        f"{'command':58} {'wall s':>7} {'CPU s':>7}  goal (judged on CPU s - bare CPU s + 0.03 s)"
    )
    bare_cpu = statistics.median(c for _, c in times[next(iter(cases))])
    for label, runs in times.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        verdict = ""
        if "--replay" in label:
            judged = cpu - bare_cpu + 0.03
            verdict = f"< {GOAL_S:g} s: {judged:.3f} s, {'met' if judged < GOAL_S else 'NOT met'}"
        print(f"{label:58} {wall:7.3f} {cpu:7.3f}  {verdict}")


if __name__ == "__main__":
    main()
