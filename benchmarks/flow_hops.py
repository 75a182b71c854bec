"""How far the two main flows travel through the product: the modules they enter and the calls
that cross from one module (or stage folder) to another, traced with sys.setprofile.

    python benchmarks/flow_hops.py build    # invoke build --dry (lock missing): choose, plan
    python benchmarks/flow_hops.py replay   # python -m validate --replay <H100 capture>
    python benchmarks/flow_hops.py resolve  # a refusal with fixes (H100, 535, --cuda 13.0), a stack

Prints per flow: product modules entered, distinct module-to-module call edges, distinct
stage-to-stage call edges (a stage is a folder: gpuenv/compat, validate/host, ...), and the pairs
of modules that call each other both ways (a ping-pong, or a ring closed at run time).
The style review (../shared/reviews/style-review.md, Flow A and B) counted the same by reading.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's gpuenv, not an installed one
CAPTURE = ROOT / "tests/validate/captures/nvidia-smi-xml/h100x8-580.105.08.xml"


def _module(filename: str) -> str | None:
    """'gpuenv/compat/rules/cuda' for a product file, None for anything else."""
    if not filename.endswith(".py"):
        return None
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if rel.parts[0] not in ("gpuenv", "validate", "tasks.py"):
        return None
    return rel.with_suffix("").as_posix()


def _stage(module: str) -> str:
    parts = module.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def trace(run) -> tuple[set[str], set[tuple[str, str]]]:
    entered: set[str] = set()
    edges: set[tuple[str, str]] = set()
    cache: dict[str, str | None] = {}

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        callee = cache.setdefault(code.co_filename, _module(code.co_filename))
        if callee is None or code.co_name == "<module>":
            return
        entered.add(callee)
        back = frame.f_back
        while back is not None:
            caller = cache.setdefault(back.f_code.co_filename, _module(back.f_code.co_filename))
            if caller is not None:
                if caller != callee:
                    edges.add((caller, callee))
                return
            back = back.f_back

    sys.setprofile(profile)
    try:
        run()
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    return entered, edges


def build() -> None:
    import tempfile

    from invoke import Program

    from gpuenv.cli import namespace

    # an empty locks folder: the build takes the "no lock yet" path
    os.environ["GPUENV_LOCKS_DIR"] = tempfile.mkdtemp(prefix="flow-hops-")
    Program(namespace=namespace()).run(
        ["invoke", "build", "--dry", "--driver", "550.54.15", "--gpu-arch", "9.0"], exit=False
    )


def replay() -> None:
    from validate.cli import main

    main(["--replay", str(CAPTURE)])


def resolve() -> None:
    from gpuenv.compat.resolve import resolve_stack
    from gpuenv.compat.rules.request import Request
    from gpuenv.errors import GpuenvError

    for request in (
        Request(driver="535.104.05", cuda="13.0", gpu_archs=("9.0",)),
        Request(driver="550.54.15", gpu_archs=("9.0",)),
    ):
        try:
            resolve_stack(request)
        except GpuenvError:
            pass


def main() -> None:
    flows = {"build": build, "replay": replay, "resolve": resolve}
    if len(sys.argv) != 2 or sys.argv[1] not in flows:
        sys.exit(f"usage: python benchmarks/flow_hops.py {{{','.join(flows)}}}")
    flow = sys.argv[1]
    entered, edges = trace(flows[flow])
    stages = {(_stage(a), _stage(b)) for a, b in edges if _stage(a) != _stage(b)}
    both_ways = {tuple(sorted(edge)) for edge in edges if (edge[1], edge[0]) in edges}
    print(
        f"{flow}: {len(entered)} modules entered, {len(edges)} module edges, "
        f"{len(stages)} stage edges, {len(both_ways)} two-way pairs",
        file=sys.stderr,
    )


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
