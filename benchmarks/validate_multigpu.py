"""Wall time of the multi-GPU training check on the CPU, as CI runs it: the DDP probe (a launcher
process, one gloo rank per process, DataParallel after it) and the MirroredStrategy probe (logical
CPU devices), each for 2 and 4 processes/replicas, run the way the suite runs them (a fresh
probe child through validate.measure.subproc). Prints the wall time, where it goes (the ranks'
join time, the training itself) and the figures measured.

    .venv/bin/python benchmarks/validate_multigpu.py --worlds 2 4 --repeats 1

On a GPU server the same probes run NCCL over the GPUs (--backend nccl, --worlds N with N GPUs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # run from a checkout, installed or not

from validate.measure.subproc import run_probe  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument(
        "--full", action="store_true", help="the full suite's sizes instead of --quick's"
    )
    parser.add_argument("--skip-tensorflow", action="store_true")
    parser.add_argument("--json", help="write the timings here")
    args = parser.parse_args()
    size = "full" if args.full else "quick"
    out: dict[str, dict[str, float]] = {}
    for world in args.worlds:
        jobs = {
            f"ddp {world} ranks ({args.backend}) + DataParallel": [
                "ddp",
                str(world),
                args.backend,
                size,
                "--dataparallel",
            ]
        }
        if not args.skip_tensorflow:
            jobs[f"mirrored {world} replicas"] = ["tf-mirrored", str(world), size] + (
                [] if args.backend == "nccl" else ["--cpu"]
            )
        for name, probe in jobs.items():
            walls = []
            for _ in range(args.repeats):
                result = run_probe(probe, {}, timeout=900)
                if result.error:
                    print(f"{name}: failed: {result.error}")
                    return 1
                walls.append(result.seconds)
                data = result.data or {}
            figures = {
                "wall_s": statistics.median(walls),
                "efficiency": data.get("efficiency"),
                "samples_per_s": data.get("samples_per_s"),
            }
            if "wall_seconds" in data:
                figures["ranks_wall_s"] = data["wall_seconds"]  # spawn to the last rank's exit
                figures["slowest_join_s"] = max(s or 0 for s in data["join_seconds"])
            out[name] = figures
            extra = ", ".join(
                f"{k} {v:.2f}" for k, v in figures.items() if isinstance(v, float) and k != "wall_s"
            )
            print(f"{name:45s} {figures['wall_s']:7.1f} s wall ({extra})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
