"""The GPU rules: the kernels a build has for a compute capability (SASS or PTX JIT), the driver
that needs, the GPUs refused outright (Jetson modules, a driver branch older than the GPU, a
legacy GPU no build of the request targets), and the refusal when no build has kernels for them."""

from __future__ import annotations

from dataclasses import replace

from gpuenv.compat.legacy import last_served
from gpuenv.compat.matrix import Matrix, TensorflowRelease, TorchVariant
from gpuenv.compat.matrix import version_key as V
from gpuenv.compat.rules.cuda import higher_driver, image_minors
from gpuenv.compat.rules.fixes import cuda_tries, drop_pin, join_fixes
from gpuenv.compat.rules.frameworks import Candidate, Placement, framework_candidates
from gpuenv.compat.rules.wishes import Wishes
from gpuenv.errors import NoCompatibleStack
from gpuenv.stack import CPU


def kernel_coverage(cc: str, variant: "TorchVariant | TensorflowRelease") -> str | None:
    """How a build runs on compute capability `cc`: 'sm_XY' (native), 'PTX JIT from compute_XY', or
    None.

    A cubin for sm_XY runs on the same major with an equal or higher minor; PTX for X.Y is
    JIT-compiled for any newer capability (slow first start, and only by a driver that runs the
    build's CUDA natively: see kernel_min_driver).
    """
    major, minor = (int(x) for x in cc.split("."))
    native = [
        a for a in variant.archs if int(a.split(".")[0]) == major and int(a.split(".")[1]) <= minor
    ]
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


def kernel_min_driver(
    matrix: Matrix, c: Candidate, archs: list[str], driver: str | None
) -> str | None:
    """The driver the build needs for these GPUs (its placement's, raised by PTX JIT and GPU
    families), or None when it cannot run them.

    A cubin of the GPU's major at or below its minor runs on any driver that runs the build; PTX
    is JIT-compiled by the driver, which can only compile PTX of a CUDA it runs natively (not
    under minor-version compatibility), so JIT needs the build CUDA's own driver floor. A GPU
    also needs a driver branch that knows it (driver_branches), whatever the CUDA, and both the
    build's and the container's CUDA must know its family (a CUDA 12.1 image predates Blackwell).
    """
    assert c.placement is not None
    need = c.placement.min_driver
    for cc in archs:
        if not (
            _cuda_supports_arch(matrix, c.release.minor, cc)
            and _cuda_supports_arch(matrix, c.placement.container.minor, cc)
        ):
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
                f"compute capability {cc} is {gpu.name}, an integrated Jetson GPU: gpuenv builds "
                "x86_64 nvidia/cuda images with download.pytorch.org/PyPI wheels, which do not "
                "target Jetson",
                fix=f"use {matrix.jetson_use} ({matrix.jetson_use_source[0]})",
            )


def check_driver_branches(
    matrix: Matrix, archs: list[str], driver: str | None, source: str
) -> None:
    """A driver older than the first branch that knows a GPU runs nothing on it, under every
    rule."""
    if driver is None:
        return
    for cc in archs:
        branch = matrix.driver_branch(cc)
        if branch is not None and int(driver.split(".")[0]) < int(branch.branch):
            raise NoCompatibleStack(
                f"driver {driver} ({source}) predates {branch.name} (compute capability {cc}): "
                f"the first driver branch that runs it is R{branch.branch}, and minor-version "
                "compatibility cannot make a driver run a GPU it predates",
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
    floor = (
        c.release.floor if how.startswith("PTX") or major is None else major.minor_compat_min_driver
    )
    return floor is not None and int(floor.split(".")[0]) <= branch


def refuse_legacy(w: Wishes) -> None:
    """A GPU past its last driver branch (Kepler) that no release of the framework can run on, even
    on that branch, is refused as `doctor` describes it (gpuenv/compat/legacy.py): its last driver
    branch and CUDA line, never a newer driver it cannot run; the other framework when it still has
    builds for it. When only the pinned release lacks them, the kernel rule's message names the
    releases that have them."""
    matrix, request, framework, name = w.matrix, w.request, w.framework, w.name
    for cc in w.archs:
        arch = matrix.architecture_of(cc)
        if arch is None or arch.last_driver_branch is None:
            continue
        last = int(arch.last_driver_branch)
        if any(
            _runs_on_branch(matrix, c, cc, last)
            for c in framework_candidates(matrix, framework, None, w.platform)
            if c.cuda is not None
        ):
            continue
        fix = join_fixes([w.fixes.fix(cuda=CPU)], "use --cuda cpu")
        other = "tensorflow" if framework == "torch" else "torch"
        if not (request.torch or request.tensorflow) and any(
            _runs_on_branch(matrix, c, cc, last)
            for c in framework_candidates(matrix, other, None, w.platform)
            if c.cuda is not None
        ):
            fix = (
                f"use --framework {other} on an R{last} driver (its CUDA {arch.last_cuda} or "
                f"older builds still target {arch.name}), or {fix}"
            )
        raise NoCompatibleStack(
            f"{last_served(arch, cc)}; no {name} build gpuenv knows has kernels for it that such "
            f"a driver runs, so no {name} stack gpuenv knows runs on it",
            fix=fix,
        )


def refuse_gpus(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """GPUs first: Jetson modules are refused (JetPack targets them), so is a driver older than the
    first branch that knows a GPU, and a legacy GPU no build of the framework runs on."""
    if w.gpu:
        refuse_integrated(w.matrix, w.archs)
        check_driver_branches(w.matrix, w.archs, w.driver, w.request.driver_source)
        refuse_legacy(w)
    return cands


def check_kernels(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """Kernels for every GPU's compute capability (SASS, or PTX the driver can JIT), and the
    driver branch each needs raised into the placement's minimum driver."""
    if not w.gpu:
        return cands
    kept = []
    plans: dict[
        tuple[int, int], Placement | None
    ] = {}  # per placement and build: the same for every Python
    for c in cands:
        key = (id(c.placement), id(c.kernels))
        if key not in plans:
            need = kernel_min_driver(w.matrix, c, w.archs, w.driver)
            if need is None:
                plans[key] = None
            elif need == c.placement.min_driver:  # type: ignore[union-attr]
                plans[key] = (
                    c.placement
                )  # the floor stays: no copies (thousands per --cuda resolve)
            else:
                plans[key] = replace(c.placement, min_driver=need)  # type: ignore[arg-type]
        plan = plans[key]
        if plan is not None:
            kept.append(c if plan is c.placement else c.placed(plan))
    if not kept:
        message, fix = arch_failure(cands, w)
        raise NoCompatibleStack(message, fix=fix)
    return kept


def arch_failure(cands: list[Candidate], w: Wishes) -> tuple[str, str]:
    """Why no build has kernels for these GPUs (that this driver can run), and re-resolved values
    that work."""
    matrix, request, archs, cuda_wish, what = w.matrix, w.request, w.archs, w.cuda, w.what
    scope = f" for CUDA {cuda_wish}" if cuda_wish else ""
    message = f"no {what} build{scope} has kernels for compute capability {', '.join(archs)}"
    jit = (
        f" that driver {request.driver} can run (PTX is JIT-compiled only by a driver that runs "
        "the build's CUDA natively)"
        if request.driver
        else ""
    )
    dropped = []
    for cc in archs:
        arch = matrix.architecture_of(cc)
        if arch and arch.last_cuda and cuda_wish and V(cuda_wish) > V(arch.last_cuda):
            dropped.append((cc, arch))
    early = [(cc, matrix.architecture_of(cc)) for cc in archs]
    early = [(cc, a) for cc, a in early if a and cuda_wish and V(cuda_wish) < V(a.first_cuda)]
    newest = max((c.release.minor for c in cands if c.cuda is not None), key=V, default=None)
    predates = [
        (cc, a)
        for cc, a in ((cc, matrix.architecture_of(cc)) for cc in archs)
        if newest and a and V(newest) < V(a.first_cuda)
    ]
    if early:
        cc, arch = early[0]
        message += f" (CUDA {cuda_wish} predates {arch.name}: its first CUDA is {arch.first_cuda})"  # type: ignore[union-attr]
    elif predates:
        cc, arch = predates[0]
        name, first = arch.name, arch.first_cuda  # type: ignore[union-attr]
        message += (
            f" (its newest build is for CUDA {newest}, which predates {name}: its first CUDA is "
            f"{first})"
        )
    else:
        message += jit
    if dropped:
        cc, arch = dropped[0]
        major = cuda_wish.split(".")[0]  # type: ignore[union-attr]
        message = (
            f"CUDA {major} dropped {arch.name} (compute capability {cc}): CUDA {arch.last_cuda} "
            "is the last CUDA for it"
        )
        usable = [m for m in image_minors(matrix) if V(m) <= V(arch.last_cuda)]
        return message, join_fixes([w.fixes.first(cuda_tries(usable))], "use --cuda cpu")
    tries: list[dict[str, object]] = []
    if cuda_wish:
        wish_major = int(cuda_wish.split(".")[0])
        # the nearest newer CUDA of the same major first (the first to know the GPU), then the
        # others, newest first
        above = sorted(
            (
                m
                for m in image_minors(matrix)
                if int(m.split(".")[0]) == wish_major and V(m) > V(cuda_wish)
            ),
            key=V,
        )
        rest = [m for m in image_minors(matrix) if m not in above and m != cuda_wish]
        tries = cuda_tries(above + rest)
    fixes = [w.fixes.first(tries)]
    if cuda_wish:
        fixes.append(w.fixes.fix(cuda=None))
    if drop_pin(request):
        fixes.append(w.fixes.fix(**drop_pin(request)))
        if cuda_wish:
            fixes.append(w.fixes.fix(cuda=None, **drop_pin(request)))
    fallback = "use --cuda cpu, or a GPU the data knows builds for"
    if any(c.placement and c.placement.minor_compat for c in cands):
        fallback = (
            "upgrade the driver (newer builds need a newer driver to run natively), or use "
            "--cuda cpu"
        )
    if not any(fixes):
        fixes.append(w.fixes.fix(cuda=CPU))
    return message, join_fixes(fixes, fallback)
