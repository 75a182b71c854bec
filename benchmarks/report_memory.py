"""Peak memory of a fleet report over twenty hostile node reports of 15.75 MiB each
(docs/decisions.md, issue 29).

Each report is a valid suite report, just big, in one of four shapes: tens of thousands of
checks on one GPU, a few checks with long texts, a huge free-form `nvml` section, or as big as a
report may be and still be read (4,096 checks, 1 M characters of text). Read through
`--from-reports` (gpuenv.fleet.collected.read_report_folder), analysed and rendered in every
format, in a subprocess whose ru_maxrss is its own.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/report_memory.py [--reports 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SIZE = int(15.75 * 2**20)
UUID = "GPU-00000000-0000-4000-8000-000000000000"


def report(shape: str) -> bytes:
    """One report of about SIZE bytes in the given shape."""
    gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": UUID}
    check = {
        "check": "torch matmul bf16",
        "gpu": UUID,
        "measured": "700 TFLOPS",
        "threshold": ">= 500",
        "verdict": "pass",
        "seconds": 1.0,
        "value": 700.0,
        "reason": "",
        "test": "checks/test_05_speed.py::test_matmul",
    }
    data: dict = {
        "format": "gpuenv-validate-report/1",
        "host": {"checks": [], "nvml": {}},
        "summary": {"ok": True, "pytest_exit_status": 0},
    }
    if shape == "checks":
        one = len(json.dumps(check)) + 2
        data[UUID] = {
            "gpu": gpu,
            "checks": [dict(check, check=f"c{n}") for n in range(SIZE // one)],
        }
    elif shape == "texts":
        long = dict(
            check, reason="r" * 1990, measured="m" * 1990, threshold="t" * 1990, test="x" * 1990
        )
        data[UUID] = {
            "gpu": gpu,
            "checks": [dict(long, check=f"c{n}") for n in range(SIZE // 8200)],
        }
    elif (
        shape == "at-bounds"
    ):  # as big as a report may be and still be read: 4,096 checks, 1 M characters
        data[UUID] = {
            "gpu": gpu,
            "checks": [dict(check, check=f"c{n}", reason="r" * 40) for n in range(4_096)],
        }
    else:
        data[UUID] = {"gpu": gpu, "checks": [check]}
        data["host"]["nvml"] = {
            f"k{a}": {f"k{b}": "v" * 60 for b in range(500)} for a in range(SIZE // (500 * 76))
        }
    raw = json.dumps(data).encode()
    return raw + b" " * max(0, SIZE - len(raw))


def measure(folder: str) -> None:
    import resource

    from gpuenv.fleet.collected import read_report_folder
    from gpuenv.fleet.report import write_reports
    from gpuenv.fleet.report.analysis import analyse
    from gpuenv.fleet.report.terminal import render_table
    from validate.judge.peaks import load_peaks

    outcomes = read_report_folder(folder)
    fleet = analyse(outcomes, load_peaks(), None)
    out = Path(folder).parent / "out"
    out.mkdir(exist_ok=True)
    render_table(fleet)
    write_reports(
        fleet,
        json_path=str(out / "f.json"),
        junit_path=str(out / "f.xml"),
        html_path=str(out / "f.html"),
    )
    statuses = sorted({o.status for o in outcomes})
    print(
        json.dumps(
            {
                "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "statuses": statuses,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=20)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for shape in ("checks", "texts", "nvml", "at-bounds"):
            folder = Path(tmp) / shape / "reports"
            folder.mkdir(parents=True)
            body = report(shape)
            for n in range(args.reports):
                (folder / f"node{n:02d}.json").write_bytes(body)
            done = subprocess.run(
                [sys.executable, __file__, "--measure", str(folder)],
                capture_output=True,
                text=True,
                env={**os.environ},
                timeout=1800,
            )
            result = (
                json.loads(done.stdout.strip().splitlines()[-1])
                if done.returncode == 0
                else {"error": done.stderr[-500:]}
            )
            print(
                f"{args.reports} reports of {len(body) / 2**20:.2f} MiB, shape {shape}: {result}",
                flush=True,
            )


if __name__ == "__main__":
    main()
