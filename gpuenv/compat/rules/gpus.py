"""The GPU rules: the kernels a build has for a compute capability (SASS or PTX JIT), the driver
that needs, and the GPUs refused outright (Jetson modules, a driver branch older than the GPU, a
legacy GPU no build of the request targets)."""
from __future__ import annotations

from gpuenv.compat.legacy import last_served
from gpuenv.compat.matrix import Matrix, TensorflowRelease, TorchVariant, version_key as V
from gpuenv.compat.rules.cuda import higher_driver
from gpuenv.compat.rules.fixes import _fix, _join_fixes
from gpuenv.compat.rules.frameworks import Candidate, framework_candidates
from gpuenv.compat.rules.request import FRAMEWORK_NAMES, Request
from gpuenv.stack import CPU
from gpuenv.errors import NoCompatibleStack


def kernel_coverage(cc: str, variant: "TorchVariant | TensorflowRelease") -> str | None:
    """How a build runs on compute capability `cc`: 'sm_XY' (native), 'PTX JIT from compute_XY', or None.

    A cubin for sm_XY runs on the same major with an equal or higher minor; PTX for X.Y is
    JIT-compiled for any newer capability (slow first start, and only by a driver that runs the
    build's CUDA natively: see kernel_min_driver).
    """
    major, minor = (int(x) for x in cc.split("."))
    native = [a for a in variant.archs if int(a.split(".")[0]) == major and int(a.split(".")[1]) <= minor]
    if native:
        best = max(native, key=V)
        return "sm_" + best.replace(".", "")
    if variant.ptx and V(variant.ptx) <= V(cc):
        return "PTX JIT from compute_" + variant.ptx.replace(".", "")
    return None


def _cuda_supports_arch(matrix: Matrix, minor: str, cc: str) -> bool:
    arch = matrix.architecture_of(cc)
    if arch is None:
        return False
    if V(minor) < V(arch.first_cuda):
        return False
    return arch.last_cuda is None or V(minor) <= V(arch.last_cuda)


def kernel_min_driver(matrix: Matrix, c: Candidate, archs: list[str], driver: str | None) -> str | None:
    """The driver the build needs for these GPUs (its placement's, raised by PTX JIT and GPU families), or None when it cannot run them.

    A cubin of the GPU's major at or below its minor runs on any driver that runs the build; PTX
    is JIT-compiled by the driver, which can only compile PTX of a CUDA it runs natively (not
    under minor-version compatibility), so JIT needs the build CUDA's own driver floor. A GPU
    also needs a driver branch that knows it (driver_branches), whatever the CUDA, and both the
    build's and the container's CUDA must know its family (a CUDA 12.1 image predates Blackwell).
    """
    assert c.placement is not None
    need = c.placement.min_driver
    for cc in archs:
        if not (_cuda_supports_arch(matrix, c.release.minor, cc) and _cuda_supports_arch(matrix, c.placement.container.minor, cc)):
            return None
        how = kernel_coverage(cc, c.kernels)
        if how is None:
            return None
        if how.startswith("PTX"):
            floor = c.release.floor
            if floor is None or (driver is not None and V(driver) < V(floor)):
                return None
            need = higher_driver(need, floor)
        branch = matrix.driver_branch(cc)
        if branch is not None:
            need = higher_driver(need, branch.branch + ".0")  # the lowest version of that branch
    return need


def refuse_integrated(matrix: Matrix, archs: list[str]) -> None:
    """Jetson modules are not servers: say what does target them."""
    for cc in archs:
        gpu = matrix.integrated_gpu(cc)
        if gpu is not None:
            raise NoCompatibleStack(
                f"compute capability {cc} is {gpu.name}, an integrated Jetson GPU: gpuenv builds x86_64 nvidia/cuda images "
                f"with download.pytorch.org/PyPI wheels, which do not target Jetson",
                fix=f"use {matrix.jetson_use} ({matrix.jetson_use_source[0]})",
            )


def check_driver_branches(matrix: Matrix, archs: list[str], driver: str | None, source: str) -> None:
    """A driver older than the first branch that knows a GPU runs nothing on it, under every rule."""
    if driver is None:
        return
    for cc in archs:
        branch = matrix.driver_branch(cc)
        if branch is not None and int(driver.split(".")[0]) < int(branch.branch):
            raise NoCompatibleStack(
                f"driver {driver} ({source}) predates {branch.name} (compute capability {cc}): the first driver branch that runs it is "
                f"R{branch.branch}, and minor-version compatibility cannot make a driver run a GPU it predates",
                fix=f"install a driver of branch R{branch.branch} or newer",
            )


def _runs_on_branch(matrix: Matrix, c: Candidate, cc: str, branch: int) -> bool:
    """Whether build `c` could run on compute capability `cc` under a driver of `branch` at best:
    its CUDA knows the family, it has SASS (run from the CUDA major's minor-version floor) or PTX
    (JIT-compiled only by a driver that runs its CUDA natively) for it. Generous on purpose: the
    other rules decide the rest, this one only refuses when nothing could run."""
    if not _cuda_supports_arch(matrix, c.release.minor, cc):
        return False
    how = kernel_coverage(cc, c.kernels)
    if how is None:
        return False
    major = matrix.cuda_major(c.release.major)
    floor = c.release.floor if how.startswith("PTX") or major is None else major.minor_compat_min_driver
    return floor is not None and int(floor.split(".")[0]) <= branch


def refuse_legacy(matrix: Matrix, request: Request, framework: str, archs: list[str]) -> None:
    """A GPU past its last driver branch (Kepler) that no release of the framework can run on, even
    on that branch, is refused as `doctor` describes it (gpuenv/compat/legacy.py): its last driver
    branch and CUDA line, never a newer driver it cannot run; the other framework when it still has
    builds for it. When only the pinned release lacks them, the kernel rule's message names the
    releases that have them."""
    name = FRAMEWORK_NAMES[framework]
    for cc in archs:
        arch = matrix.architecture_of(cc)
        if arch is None or arch.last_driver_branch is None:
            continue
        last = int(arch.last_driver_branch)
        if any(_runs_on_branch(matrix, c, cc, last) for c in framework_candidates(matrix, framework, None) if c.cuda is not None):
            continue
        fix = _join_fixes([_fix(request, matrix, cuda=CPU)], "use --cuda cpu")
        other = "tensorflow" if framework == "torch" else "torch"
        if not (request.torch or request.tensorflow) and any(
            _runs_on_branch(matrix, c, cc, last) for c in framework_candidates(matrix, other, None) if c.cuda is not None
        ):
            fix = f"use --framework {other} on an R{last} driver (its CUDA {arch.last_cuda} or older builds still target {arch.name}), or {fix}"
        raise NoCompatibleStack(
            f"{last_served(arch, cc)}; no {name} build gpuenv knows has kernels for it that such a driver runs, "
            f"so no {name} stack gpuenv knows runs on it",
            fix=fix,
        )
