"""How long `python -m validate --quick` takes on this host, where the time goes, and an estimate
for an 8-GPU server.

The budgets (validate/measure/budget.py): the quick suite finishes within 60 s on a one-GPU
server, and within QUICK_BUDGET_SECONDS_CPU on a host without GPUs (the quickstart, CI). Run this
on the server (or in CI, or on a machine without GPUs) to see the wall time against the budget
that applies, the CPU seconds the suite's processes used (wall time on a shared machine grows
with the other load; the load average is printed beside it) and each check's share, e.g.

    .venv/bin/python benchmarks/validate_quick_budget.py --repeats 3 --json /tmp/budget.json
    .venv/bin/python benchmarks/validate_quick_budget.py --from-report one-gpu-report.json --wall 48

The 8-GPU estimate scales a one-GPU run: per-GPU checks (records with a GPU UUID) run once per
GPU; host checks once; masking children grow with the case list and run in parallel waves; the
sustained load runs on all GPUs at once (same time); the all-reduce adds one probe that spawns a
worker per GPU, and the multi-GPU training check a DDP launcher with a rank per GPU and a
TensorFlow MirroredStrategy probe (a one-GPU host skips them). Processes that import PyTorch or
TensorFlow are counted from the case lists.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from validate.measure.budget import (  # noqa: E402
    QUICK_BUDGET_SECONDS_CPU,
    QUICK_BUDGET_SECONDS_ONE_GPU,
    framework_processes,
    masking_waves,
)

BUDGET_SECONDS = QUICK_BUDGET_SECONDS_ONE_GPU


def children_cpu_seconds() -> float:
    """User + system seconds of every finished child process so far (the suite and its probes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(extra: list[str]) -> tuple[float, int, dict, float]:
    """(wall seconds, exit code, the JSON report, CPU seconds of the suite's processes)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cpu_before = children_cpu_seconds()
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "validate", "--quick", "--json", str(report), *extra],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
        cpu = children_cpu_seconds() - cpu_before
        return wall, done.returncode, json.loads(report.read_text()) if report.exists() else {}, cpu


def records(report: dict) -> list[dict]:
    return [
        c
        for section in report.values()
        if isinstance(section, dict)
        for c in section.get("checks", [])
    ]


def estimate(wall_one_gpu: float, report: dict, gpus: int, cpus: int) -> dict[str, float]:
    """Seconds for `gpus` GPUs from a one-GPU quick run (see the module docstring)."""
    checks = records(report)
    per_gpu = sum(
        c["seconds"] or 0.0
        for c in checks
        if c.get("gpu")
        and not c["check"].startswith(("sustained", "clock events", "pcie generation"))
    )
    masking = [
        c["seconds"] or 0.0
        for c in checks
        if c["check"].startswith(("torch CUDA_VISIBLE_DEVICES", "tensorflow CUDA_VISIBLE_DEVICES"))
        and (c["seconds"] or 0) > 0
    ]
    child = statistics.median(masking) if masking else 8.0  # a framework import + CUDA start-up
    extra_waves = 2 * (
        masking_waves(gpus, True, cpus) - masking_waves(1, True, cpus)
    )  # two frameworks
    allreduce = 2 * child if gpus >= 2 else 0.0  # spawn + NCCL init; the transfer itself is short
    # DDP: the launcher's start, then the ranks' start and NCCL init (its steps take about a
    # second); MirroredStrategy: one TensorFlow start. A one-GPU host skips both.
    multigpu = 3 * child if gpus >= 2 else 0.0
    return {
        "one GPU (measured)": wall_one_gpu,
        "per-GPU checks x extra GPUs": per_gpu * (gpus - 1),
        "extra masking waves": extra_waves * child,
        "all-reduce": allreduce,
        "multi-GPU training (DDP, MirroredStrategy)": multigpu,
        "total": wall_one_gpu + per_gpu * (gpus - 1) + extra_waves * child + allreduce + multigpu,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the timings here")
    parser.add_argument(
        "--from-report", help="estimate from a saved one-GPU --quick JSON report instead of running"
    )
    parser.add_argument("--wall", type=float, help="wall seconds of that run (with --from-report)")
    parser.add_argument("--gpus", type=int, default=8, help="GPU count to estimate for")
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for the suite")
    args = parser.parse_args()
    cpus = os.cpu_count() or 2
    for count in (0, 1, args.gpus):  # 0: a host without GPUs (the CPU budget)
        processes = framework_processes(count, quick=True)
        print(
            f"processes importing torch/tensorflow with --quick on {count} GPU(s): "
            f"{sum(processes.values())}"
        )
        for name, n in processes.items():
            print(f"  {n:3d}  {name}")
    if args.from_report:
        walls, report = [args.wall or 0.0], json.loads(Path(args.from_report).read_text())
    else:
        walls, report, slowest = [], {}, {}
        for _ in range(args.repeats):
            wall, code, report, cpu = one_run(args.pytest_args)
            walls.append(wall)
            for check in records(report):
                key = f"{check['check']} [{(check['gpu'] or 'host')[:12]}]"
                slowest[key] = max(slowest.get(key, 0.0), check["seconds"] or 0.0)
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(
                f"run: {wall:.1f}s wall, {cpu:.1f}s CPU (user+system of its processes), exit "
                f"{code}; load average {load} on {cpus} CPUs"
            )
        for name, seconds in sorted(slowest.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {seconds:6.2f}s  {name}")
    median = statistics.median(walls)
    gpus_in_report = len([k for k in report if k.startswith("GPU-")])
    budget = QUICK_BUDGET_SECONDS_CPU if gpus_in_report == 0 else BUDGET_SECONDS
    if gpus_in_report == 0:
        verdict = "within" if median <= budget else "OVER"
        print(
            f"median wall time of the quick suite on this host without GPUs: {median:.1f}s, "
            f"{verdict} the CPU budget of {budget:.0f}s"
        )
    else:
        print(
            f"median wall time of the quick suite: {median:.1f}s on {gpus_in_report} GPU(s) "
            f"(budget {BUDGET_SECONDS:.0f}s on one GPU)"
        )
    guess: dict[str, float] = {}
    if gpus_in_report == 0:
        print(
            f"no GPU in this run: the {args.gpus}-GPU estimate needs a one-GPU --quick report "
            "(--from-report R --wall S)"
        )
    else:
        guess = estimate(median, report, args.gpus, cpus)
        if gpus_in_report != 1:
            print(
                f"  (the estimate scales a one-GPU run; this one saw {gpus_in_report} GPUs, so "
                "it overestimates)"
            )
        print(f"estimated quick suite on {args.gpus} GPUs ({cpus} CPUs):")
        for name, seconds in guess.items():
            print(f"  {seconds:7.1f}s  {name}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"walls": walls, "median": median, "budget": budget, "estimate": guess}, indent=2
            )
        )
    return 0 if median <= budget else 1


if __name__ == "__main__":
    sys.exit(main())
