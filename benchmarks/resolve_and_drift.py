"""Print how long the resolver takes per rule (in process), and what the PyPI drift check costs.

The resolver target is tens of milliseconds per decision (failures resolve their suggested fix
too); the drift check reads METADATA with range requests, so its bytes stay far below one wheel.
Run: .venv/bin/python benchmarks/resolve_and_drift.py [--drift]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuenv.compat.matrix import load_matrix  # noqa: E402
from gpuenv.compat.resolve import resolve_stack  # noqa: E402
from gpuenv.compat.rules.request import Request  # noqa: E402
from gpuenv.errors import GpuenvError  # noqa: E402

CASES = {
    "no wishes": Request(),
    "--cuda 12.2 (CUDA rule)": Request(cuda="12.2"),
    "H100 on 550.54.15 (minor-version compat)": Request(driver="550.54.15", gpu_archs=("9.0",)),
    "V100 asks --cuda 13.0 (failure + checked fix)": Request(cuda="13.0", gpu_archs=("7.0",)),
    "--cuda cpu with /opt/wheels names": Request(
        cuda="cpu", wheelhouse=("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",)
    ),
    "T4 on 470.82.01 (CUDA 11 by minor-version compat)": Request(
        driver="470.82.01", gpu_archs=("7.5",)
    ),
    "H100 TensorFlow on 535.104.05 (PTX JIT rule)": Request(
        driver="535.104.05", gpu_archs=("9.0",), framework="tensorflow"
    ),
    "H100 on 535 asks --cuda 13.0 (failure + re-resolved fixes)": Request(
        driver="535.104.05", gpu_archs=("9.0",), cuda="13.0"
    ),
}


def main() -> None:
    started = time.perf_counter()
    matrix = load_matrix()
    print(f"load envs/compat.yaml: {(time.perf_counter() - started) * 1000:.1f} ms")
    for name, request in CASES.items():
        times = []
        for _ in range(10):
            t = time.perf_counter()
            try:
                resolve_stack(request, matrix)
            except GpuenvError:
                pass
            times.append((time.perf_counter() - t) * 1000)
        print(f"resolve {name}: median {statistics.median(times):.1f} ms")
    if "--drift" in sys.argv:
        from gpuenv.compat.drift import compare, gather
        from gpuenv.compat.pypi import PyPI

        client = PyPI()
        t = time.perf_counter()
        report = compare(matrix, gather(client, matrix))
        print(
            f"drift check: {time.perf_counter() - t:.1f} s, {client.requests} requests, "
            f"{client.bytes_fetched / 2**20:.1f} MiB, {len(report.findings)} findings"
        )


if __name__ == "__main__":
    main()
