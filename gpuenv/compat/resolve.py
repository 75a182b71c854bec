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

This module applies the rules in that order; each lives in gpuenv/compat/rules/ (request,
frameworks, wheelhouse, cuda, gpus, fixes, reasons), and the names callers use are imported here.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import date

from gpuenv.compat.matrix import Matrix, load_matrix, version_key as V
from gpuenv.compat.rules.cuda import cuda_rule, image_minors, place_build
from gpuenv.compat.rules import fixes
from gpuenv.compat.rules.fixes import _cuda_tries, _describe, _drop_pin, _first_fix, _fix, _join_fixes, command_for
from gpuenv.compat.rules.frameworks import (
    DEFAULT_PYTHON_MIN_AGE_MONTHS,
    build_name,
    Candidate,
    framework_candidates,
    version_list,
    pick_patch,
    Placement,
    default_python,
)
from gpuenv.compat.rules.gpus import check_driver_branches, kernel_min_driver, refuse_integrated, refuse_legacy, kernel_coverage
from gpuenv.compat.rules.reasons import TORCH_INDEX, arch_failure, cuda_alternatives, driver_failure, to_stack
from gpuenv.compat.rules.request import (
    FRAMEWORK_NAMES,
    Request,
    parse_cuda,
    parse_driver,
    parse_framework,
    parse_gpu_arch,
    parse_python,
    split_arch_list,
)
from gpuenv.compat.rules.wheelhouse import WheelBuild, wheelhouse_filter, framework_wheels
from gpuenv.errors import BadInput, NoCompatibleStack
from gpuenv.stack import CPU, Stack

#: Imported here for callers (and other branches) that import them from gpuenv.compat.resolve.
__all__ = [
    "DEFAULT_PYTHON_MIN_AGE_MONTHS", "TORCH_INDEX", "Request", "WheelBuild", "command_for", "default_python",
    "framework_wheels", "kernel_coverage", "parse_cuda", "parse_driver", "parse_framework", "parse_gpu_arch",
    "parse_python", "resolve_stack", "split_arch_list",
    "_describe",  # the one-line stack summary fixes print (tests check it)
]


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
    cuda_wish = parse_cuda(request.cuda, matrix, request.blame("cuda"))
    driver = parse_driver(request.driver, request.driver_source)
    python = parse_python(request.python, request.blame("python"))
    archs = [parse_gpu_arch(a, matrix, request.blame("gpu_archs")) for a in split_arch_list(request.gpu_archs)]
    framework = parse_framework(request.framework)
    for pin, label, releases, key in ((request.torch, "PyTorch", matrix.torch_releases, "torch"),
                                      (request.tensorflow, "TensorFlow", matrix.tensorflow_releases, "tensorflow")):
        if pin:  # an unknown release, blamed on where it came from (candidates are listed later)
            pick_patch(pin, label, list(releases), request.blame(key))
    if request.torch and request.tensorflow:
        raise BadInput(f"{request.blame('torch')} and {request.blame('tensorflow')} were both given",
                       fix="a stack has one framework: build one image per framework")
    implied = "torch" if request.torch else "tensorflow" if request.tensorflow else None
    if framework and implied and framework != implied:
        raise BadInput(f"--{implied} was given with --framework {framework}", fix=f"drop one, or use --framework {implied}")
    framework = framework or implied or "torch"
    name = FRAMEWORK_NAMES[framework]
    pin = request.torch if framework == "torch" else request.tensorflow
    what = f"{name} {pin}" if pin else name
    strict = request.strict_driver

    cands = framework_candidates(matrix, framework, pin)
    notes: list[str] = []
    if cuda_wish != CPU:
        refuse_integrated(matrix, archs)
        check_driver_branches(matrix, archs, driver, request.driver_source)
        refuse_legacy(matrix, request, framework, archs)

    # 0. the wheelhouse: only what it holds, when it holds the framework at all
    if request.wheelhouse is not None:
        cands, note = wheelhouse_filter(matrix, request, framework, cands, what, python)
        notes.append(note)

    # 1. CPU or GPU, and the CUDA rule's major
    if cuda_wish == CPU:
        kept = [c for c in cands if c.cuda is None]
        if not kept:
            fix = _join_fixes([_fix(request, matrix, **_drop_pin(request)) if pin else None, _fix(request, matrix, cuda=None)], "drop the version pin or use a CUDA version")
            raise NoCompatibleStack(f"{what} has no CPU build in the data", fix=fix)
        cands = kept
    else:
        gpu = [c for c in cands if c.cuda is not None]
        if not gpu:
            series = sorted({c.framework_version for c in framework_candidates(matrix, framework, None) if c.cuda}, key=V)
            tries: list[dict[str, object]] = [{"cuda": CPU}]
            if series and request.wheelhouse is None:
                tries.append({framework: series[-1]})
            fix = _join_fixes((_fix(request, matrix, **t) for t in tries), "use --cuda cpu")
            if request.wheelhouse is not None:
                fix += f", or add the wheel of a {name} CUDA build to {request.wheelhouse_dir or 'the wheelhouse'}"
            raise NoCompatibleStack(f"{what} has only a CPU build{' in the wheelhouse' if request.wheelhouse is not None else ' in the data'}", fix=fix)
        cands = gpu
        if cuda_wish:
            cands = cuda_rule(matrix, request, framework, cands, cuda_wish, what)

    # 2. the Python pin
    if python:
        kept = [c for c in cands if c.python == python]
        if not kept:
            have = version_list(c.python for c in cands)
            scope = f" for CUDA {cuda_wish}" if cuda_wish and cuda_wish != CPU else ""
            tries = [{"python": p} for p in sorted({c.python for c in cands}, key=V, reverse=True)]
            fix = _join_fixes([_first_fix(request, matrix, tries), _fix(request, matrix, **_drop_pin(request)) if pin else None],
                              f"use --python with one of {have}, or pin another release")
            raise NoCompatibleStack(f"Python {python} is not supported by {what}{scope} (supported: {have})", fix=fix)
        cands = kept

    # 3. the driver: a base image it runs, and the build under the CUDA or minor-version rule
    if cuda_wish != CPU:
        # a placement depends only on the build's CUDA and whether it needs a cuDNN image: compute each once
        memo: dict[tuple[str, bool], Placement | None] = {}
        placed = []
        for c in cands:
            key = (c.release.minor, c.tf is not None and not c.tf.and_cuda)
            if key not in memo:
                memo[key] = place_build(matrix, c, cuda_wish, driver, strict)
            if memo[key] is not None:
                placed.append(replace(c, placement=memo[key]))
        if not placed:
            if driver is None:
                minors = version_list(c.release.minor for c in cands)
                fix = _join_fixes([_first_fix(request, matrix, _cuda_tries(image_minors(matrix))), _fix(request, matrix, cuda=None)],
                                  "use --cuda with a release `invoke matrix` lists with images")
                raise NoCompatibleStack(f"no nvidia/cuda image with a known driver floor is in the data for CUDA {cuda_wish or minors}", fix=fix)
            message, fix = driver_failure(matrix, request, cands, driver, cuda_wish, strict, archs)
            raise NoCompatibleStack(message, fix=fix)
        cands = placed

    # 4. the GPUs: kernels for every compute capability (SASS, or PTX the driver can JIT), and the driver branch each needs
    if cuda_wish != CPU:
        kept = []
        plans: dict[tuple[int, int], Placement | None] = {}  # per placement and build: the same for every Python
        for c in cands:
            key = (id(c.placement), id(c.kernels))
            if key not in plans:
                need = kernel_min_driver(matrix, c, archs, driver)
                plans[key] = None if need is None else replace(c.placement, min_driver=need)  # type: ignore[arg-type]
            if plans[key] is not None:
                kept.append(replace(c, placement=plans[key]))
        if not kept:
            message, fix = arch_failure(matrix, request, cands, archs, cuda_wish, what)
            raise NoCompatibleStack(message, fix=fix)
        cands = kept

    # 5. --cuda X.Y: the build CUDA newest at or below X.Y within X's major, else the lowest above it
    if cuda_wish and cuda_wish != CPU:
        minors = {c.release.minor for c in cands}
        below = [m for m in minors if V(m) <= V(cuda_wish)]
        target = max(below, key=V) if below else min(minors, key=V)
        cands = [c for c in cands if c.release.minor == target]

    best = max(cands, key=Candidate.sort_key)
    same_build = [c for c in cands if c.sort_key() == best.sort_key() and build_name(c) == build_name(best) and c.from_pypi == best.from_pypi]
    if python:
        chosen, py_reason = best, "requested with --python"
    else:
        today = request.today or date.today()
        py, why = default_python(matrix, (c.python for c in same_build), today)
        chosen = next(c for c in same_build if c.python == py)
        py_reason = why
    stack = to_stack(matrix, chosen, framework, request, driver, cuda_wish, archs, py_reason, notes)
    if request.explain and cuda_wish and cuda_wish != CPU:
        stack = replace(stack, reasons=stack.reasons + tuple(cuda_alternatives(matrix, request, stack, chosen, name)))
    return stack


fixes.RESOLVER = resolve_stack  # a fix re-runs the whole resolver (the rules cannot import this module)
