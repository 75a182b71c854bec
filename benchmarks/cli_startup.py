"""Print how long `invoke --list` and `invoke resolve` take (target: well under a second each).

Also checks that the resolve path imports none of the heavy modules (torch, tensorflow, conda_lock,
docker), which is what keeps it fast. Run: .venv/bin/python benchmarks/cli_startup.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "invoke --list": ["--list"],
    "invoke resolve --cuda 12.1": ["resolve", "--cuda", "12.1"],
    "invoke resolve --json (detects host)": ["resolve", "--json"],
}
HEAVY = ("torch", "tensorflow", "conda_lock", "docker")


def time_cli(args: list[str], repeats: int = 5) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def heavy_imports() -> list[str]:
    code = (
        "import sys; from gpuenv.compat.host import request_for_host; from gpuenv.compat.resolve import resolve_stack;"
        "resolve_stack(request_for_host(cuda='12.1'));"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    return [m for m in out.stdout.strip().split(",") if m]


def main() -> None:
    print(f"{'command':40} {'median s':>9} {'min s':>7} {'max s':>7}")
    for label, args in CASES.items():
        t = time_cli(args)
        print(f"{label:40} {statistics.median(t):9.3f} {min(t):7.3f} {max(t):7.3f}")
    print("heavy modules imported on the resolve path:", ", ".join(heavy_imports()) or "none")


if __name__ == "__main__":
    main()
