"""Matmul TFLOPS by matrix size and precision on each GPU: how large the speed check's matrices
must be to reach a stable figure, beside the datasheet and the measured reference (the check uses
n = 8192 in both modes, the size of the like-for-like references in gpu_peaks.yaml). Each GPU is
timed inside its own torch.cuda.device context (validate.measure.bench), so GPUs 1..7 are not timed
on GPU 0's stream.

    .venv/bin/python benchmarks/validate_matmul_sizes.py --sizes 1024 2048 4096 8192

Needs PyTorch with CUDA and an NVIDIA GPU; says why and exits 0 when there is none.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # run from a checkout, installed or not

from validate.host import nvml  # noqa: E402
from validate.judge.peaks import load_peaks, peaks_for  # noqa: E402
from validate.measure import bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "tf32", "bf16"])
    args = parser.parse_args()
    try:
        import torch
    except ImportError as err:
        print(f"skipped: PyTorch is not installed ({err})")
        return 0
    if not torch.cuda.is_available():
        print(
            "skipped: no CUDA GPU for PyTorch "
            f"({nvml.read_host().error or 'torch.cuda.is_available() is False'})"
        )
        return 0
    table = load_peaks()
    for index in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(index)
        entry = peaks_for(name, table)
        print(f"GPU {index}: {name}")
        for precision in args.precisions:
            for n in args.sizes:
                tflops = bench.matmul_tflops(torch, f"cuda:{index}", precision, n)
                peak = entry.peak(f"{precision}_tflops") if entry else None
                reference = entry.reference_for(f"{precision}_tflops") if entry else None
                share = (
                    f"{tflops / peak:6.1%} of datasheet {peak:g}" if peak else "no datasheet figure"
                )
                if reference is not None:
                    kind = "reference" if reference.confirmed else "unconfirmed reference"
                    share += f", {tflops / reference.value:6.1%} of {kind} {reference.value:g}"
                print(f"  {precision:5s} n={n:5d}  {tflops:8.1f} TFLOPS  {share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
