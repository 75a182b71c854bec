"""Pick a stack that exists and works: the compatibility engine's decision logic.

Pure: it reads the Matrix and the Request and nothing else (the host and the wheelhouse folder
are read by the caller), so every rule is tested table-driven. The rules, in the order they
apply (README "How the stack is chosen"):

- GPUs first: Jetson modules are refused (JetPack targets them), a driver older than the
  first branch that knows a GPU is refused under every rule, and so is a legacy GPU (Kepler)
  no build of the framework can run on, even on its last driver branch.
- CUDA rule: `--cuda X.Y` is the container's CUDA (base image, and the most the driver runs).
  The build CUDA is chosen first: the newest at or below X.Y within X's major, else the lowest
  above it (on the X.Y image by minor-version compatibility); then the newest release with that
  build. The wheels carry their own CUDA libraries (Cog's rule); a major is never crossed.
- Driver rule: without `--cuda`, the base image is one the driver runs natively and the build
  the newest of that major under minor-version compatibility (11.x from 450.80.02, 12.x from
  525.60.13); when no image of the major runs natively (CUDA 11 hosts), the image itself runs by
  minor-version compatibility. Not with `--strict-driver`.
- Kernels: SASS of the GPU's major at or below its minor, or PTX the driver JIT-compiles, which
  needs a driver that runs the build's CUDA natively (TensorFlow's from its build_info.py).
  The minimum driver is the highest of the image's, the build's, the PTX JIT's and the GPUs'.
- Default Python: the newest the release supports whose X.Y.0 is at least six months old.
- Wheelhouse: with wheels of the framework in it, only the releases, builds and Pythons it holds.

It prefers the newest framework release, then a confirmed build, then the newest build CUDA;
when nothing fits it names the constraint that emptied the candidates and fixes that are the
exact options to change, each resolved before it is printed.

This module runs the rules in that order, as the named steps in `STEPS`; each lives in
gpuenv/compat/rules/ (wishes, frameworks, wheelhouse, cuda, python, gpus, fixes, reasons), and the
names callers use are imported here.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from gpuenv.compat.matrix import Matrix, load_matrix
from gpuenv.compat.rules.cuda import apply_cuda_rule, keep_cpu_or_gpu, pick_build_cuda, place_on_driver
from gpuenv.compat.rules.fixes import command_for, describe
from gpuenv.compat.rules.frameworks import TORCH_INDEX, Candidate, framework_candidates, stack_of
from gpuenv.compat.rules.gpus import check_kernels, kernel_coverage, refuse_gpus
from gpuenv.compat.rules.python import DEFAULT_PYTHON_MIN_AGE_MONTHS, apply_python_pin, default_python, pick_python
from gpuenv.compat.rules.reasons import cuda_alternatives, reasons_for
from gpuenv.compat.rules.request import (
    Request,
    parse_cuda,
    parse_driver,
    parse_framework,
    parse_gpu_arch,
    parse_python,
    split_arch_list,
)
from gpuenv.compat.rules.wheelhouse import WheelBuild, framework_wheels, narrow_to_wheelhouse
from gpuenv.compat.rules.wishes import Wishes, read_wishes
from gpuenv.errors import BadInput, NoCompatibleStack
from gpuenv.stack import Stack

#: Imported here for callers that import them from gpuenv.compat.resolve.
__all__ = [
    "DEFAULT_PYTHON_MIN_AGE_MONTHS", "STEPS", "TORCH_INDEX", "Request", "WheelBuild", "command_for", "default_python",
    "describe", "framework_wheels", "kernel_coverage", "parse_cuda", "parse_driver", "parse_framework", "parse_gpu_arch",
    "parse_python", "resolve_stack", "split_arch_list",
]

#: tests/compat/test_resolve_rules.py reads the one-line summary under its old name.
_describe = describe

Step = Callable[[list[Candidate], Wishes], list[Candidate]]

#: The rules in the order they apply: each keeps the candidate builds that pass it, or raises
#: NoCompatibleStack naming the constraint that emptied them and re-resolved fixes.
STEPS: tuple[Step, ...] = (
    refuse_gpus,  # Jetson, a driver older than a GPU's first branch, a legacy GPU nothing runs on
    narrow_to_wheelhouse,  # only the builds a wheelhouse holds, when it holds the framework
    keep_cpu_or_gpu,  # --cuda cpu: the CPU builds; otherwise the GPU builds
    apply_cuda_rule,  # --cuda X.Y: the builds of X's major
    apply_python_pin,  # --python X.Y: the builds for it
    place_on_driver,  # a base image the driver runs, and its driver floor
    check_kernels,  # kernels for every GPU, and the driver branch each needs
    pick_build_cuda,  # --cuda X.Y: the newest build CUDA at or below X.Y, else the lowest above
)


def resolve_stack(request: Request, matrix: Matrix | None = None) -> Stack:
    """Choose the newest stack that satisfies the request; NoCompatibleStack says why none does.
    A refusal names where the values not typed as options came from (a config file and key, a
    variable, a capture), so that the user knows what to edit; its fixes change them there."""
    try:
        return _resolve(request, matrix)
    except (BadInput, NoCompatibleStack) as err:
        provenance = request.provenance() if request.explain else ""
        named = [part for part in provenance.split(", ") if part and part.split(" from ", 1)[1] not in err.message]
        if not named:
            raise
        raise type(err)(f"{err.message} ({', '.join(named)})", fix=err.fix) from None


def _resolve(request: Request, matrix: Matrix | None = None) -> Stack:
    matrix = matrix or load_matrix()
    w = read_wishes(request, matrix, resolve=resolve_stack)
    cands = framework_candidates(matrix, w.framework, w.pin)
    for step in STEPS:
        cands = step(cands, w)
    chosen, py_reason = pick_python(cands, w)
    stack = stack_of(matrix, chosen, w.framework, reasons_for(chosen, w, py_reason))
    if request.explain and w.cuda_version:
        stack = replace(stack, reasons=stack.reasons + tuple(cuda_alternatives(stack, chosen, w)))
    return stack
