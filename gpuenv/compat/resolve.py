"""Pick a stack that exists and works: the compatibility engine's decision.

Pure: it reads the Matrix and the Request and nothing else (the host and the wheelhouse folder
are read by the caller), so every rule is tested table-driven. The rules are written out once, in
docs/stack-rules.md; here each is a named public step of gpuenv/compat/rules/, run in the order
of `STEPS` over the candidate builds, then the best build, its Python and its reasons. When
nothing fits, the step that emptied the candidates names its constraint and fixes that are the
exact options to change, each re-resolved (by the resolver it is given) before it is printed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from gpuenv.compat.matrix import Matrix, load_matrix
from gpuenv.compat.rules.cuda import (
    apply_cuda_rule,
    keep_cpu_or_gpu,
    pick_build_cuda,
    place_on_driver,
)
from gpuenv.compat.rules.frameworks import Candidate, framework_candidates, stack_of
from gpuenv.compat.rules.gpus import check_kernels, refuse_gpus
from gpuenv.compat.rules.platform import keep_platform_builds
from gpuenv.compat.rules.python import (
    apply_python_pin,
    pick_python,
)
from gpuenv.compat.rules.reasons import cuda_alternatives, reasons_for
from gpuenv.compat.rules.request import (
    Request,
)
from gpuenv.compat.rules.wheelhouse import narrow_to_wheelhouse
from gpuenv.compat.rules.wishes import Wishes, read_wishes
from gpuenv.errors import BadInput, NoCompatibleStack
from gpuenv.stack import Stack

Step = Callable[[list[Candidate], Wishes], list[Candidate]]

#: The rules in the order they apply: each keeps the candidate builds that pass it, or raises
#: NoCompatibleStack naming the constraint that emptied them and re-resolved fixes.
STEPS: tuple[Step, ...] = (
    refuse_gpus,  # Jetson, a driver older than a GPU's first branch, a legacy GPU nothing runs on
    keep_platform_builds,  # aarch64 (Grace): why none of the platform's builds fits, if none does
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
        named = [
            part
            for part in provenance.split(", ")
            if part and part.split(" from ", 1)[1] not in err.message
        ]
        if not named:
            raise
        raise type(err)(f"{err.message} ({', '.join(named)})", fix=err.fix) from None


def _resolve(request: Request, matrix: Matrix | None = None) -> Stack:
    matrix = matrix or load_matrix()
    w = read_wishes(request, matrix, resolve=resolve_stack)
    cands = framework_candidates(matrix, w.framework, w.pin, w.platform)
    for step in STEPS:
        cands = step(cands, w)
    chosen, py_reason = pick_python(cands, w)
    stack = stack_of(matrix, chosen, w.framework, reasons_for(chosen, w, py_reason))
    if request.explain and w.cuda_version:
        stack = replace(stack, reasons=stack.reasons + tuple(cuda_alternatives(stack, chosen, w)))
    return stack
