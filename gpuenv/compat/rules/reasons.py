"""What the resolver says about the stack it chose: the reason for each of its parts, and under
--cuda what a newer CUDA or the driver rule would give instead."""

from __future__ import annotations

import re
from dataclasses import replace

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.matrix import version_key as V
from gpuenv.compat.rules.cuda import image_driver_floor
from gpuenv.compat.rules.fixes import command_for, describe
from gpuenv.compat.rules.frameworks import Candidate, build_name, image_require_cuda
from gpuenv.compat.rules.gpus import kernel_coverage
from gpuenv.compat.rules.platform import platform_reasons
from gpuenv.compat.rules.wishes import Wishes
from gpuenv.stack import Stack


def cuda_alternatives(stack: Stack, chosen: Candidate, w: Wishes) -> list[str]:
    """Under --cuda: what a newer CUDA of the major, and the driver rule (no --cuda), give instead,
    each re-resolved."""
    matrix, request, name = w.matrix, w.request, w.name
    out = []
    major = chosen.release.major
    best: tuple[str, Stack] | None = None
    for minor in sorted(
        (c.minor for c in matrix.cuda_releases if c.major == major and V(c.minor) > V(stack.cuda)),
        key=V,
    ):
        found = w.fixes.fix(cuda=minor)
        if found and V(found[1].framework_version) > V(
            (best[1] if best else stack).framework_version
        ):
            best = found  # the lowest CUDA that gives the newest release
    if best is not None:
        out.append(f"newer {name} releases need a newer CUDA {major}.x build: {best[0]}")
    alt = w.fixes.suggest(cuda=None)
    if alt is not None and not alt.is_cpu and V(alt.framework_version) > V(stack.framework_version):
        on = f"on driver {request.driver}" if request.driver else "for a driver that runs it"
        out.append(
            f"without --cuda the driver rule gives a newer release {on}: "
            f"`{command_for(replace(request, cuda=None))}` gives {describe(alt)}"
        )
    return out


def reasons_for(c: Candidate, w: Wishes, py_reason: str) -> list[str]:
    """Why each part of the stack of build `c` is what it is, one line a part, in the order the
    stack is read: the release, the CUDA and image, the driver, the flavour, the GPUs, Python."""
    matrix, request, framework, name = w.matrix, w.request, w.framework, w.name
    driver, cuda_wish, archs = w.driver, w.cuda, w.archs
    reasons: list[str] = []
    pinned = request.torch if framework == "torch" else request.tensorflow
    reasons.append(
        f"{name} {c.framework_version}: "
        + (
            f"matches --{framework} {pinned}"
            if pinned
            else "the newest release that fits every other constraint"
        )
    )
    reasons += w.notes
    place = c.placement
    if c.cuda is None:
        reasons.append("CPU only: requested with --cuda cpu")
    else:
        assert place is not None
        image_cuda = place.container.minor
        if cuda_wish and not place.minor_compat:
            if c.release.minor == cuda_wish:
                reasons.append(
                    f"CUDA {cuda_wish} (image {place.image.version}): requested with --cuda; "
                    f"{name} has a build for exactly it ({build_name(c)})"
                )
            else:
                reasons.append(
                    f"CUDA {cuda_wish} (image {place.image.version}): requested with --cuda, the "
                    f"container's CUDA; {name} {c.framework_version} has no CUDA {cuda_wish} "
                    f"build, so the newest CUDA {c.release.major}.x build at most {cuda_wish} "
                    f"({build_name(c)}, CUDA {c.release.minor}) runs on it: the wheels carry "
                    "their own CUDA libraries and an older runtime runs on a newer driver "
                    "(Cog's rule); never across a CUDA major"
                )
        elif place.image_minor_compat:
            major = matrix.cuda_major(c.release.major)
            assert major is not None
            own = image_driver_floor(matrix, place.image)
            require = image_require_cuda(c)
            reasons.append(
                f"CUDA {image_cuda} (image {place.image.version}): no CUDA {c.release.major}.x "
                f"image in the data runs natively on driver {driver} ({place.image.version} "
                f"needs {own}), so the image and the {build_name(c)} build run by CUDA "
                f"minor-version compatibility (CUDA {c.release.major}.x from "
                f"{major.minor_compat_min_driver}); its limits: {major.limits}; the image's "
                f"driver gate and NVIDIA_REQUIRE_CUDA ({require}) say the same"
            )
        elif place.minor_compat:
            major = matrix.cuda_major(c.release.major)
            assert major is not None
            picked = (
                f"requested with --cuda, and no {name} build has a CUDA {c.release.major}.x at "
                f"most {cuda_wish}, so the lowest above it"
                if cuda_wish
                else f"the newest CUDA {c.release.major}.x image driver {driver} runs natively"
            )
            reasons.append(
                f"CUDA {image_cuda} (image {place.image.version}): {picked}; the {build_name(c)} "
                f"build (CUDA {c.release.minor}) runs on it by CUDA minor-version compatibility "
                f"(CUDA {c.release.major}.x wheels run on any driver from "
                f"{major.minor_compat_min_driver}); its limits: {major.limits}; use "
                "--strict-driver to require a build the driver runs natively"
            )
        else:
            how = f"the CUDA of the newest {name} build" + (
                " this driver runs natively" if driver else ""
            )
            reasons.append(f"CUDA {image_cuda} (image {place.image.version}): {how}")
        if driver:
            reasons.append(
                f"driver {driver} ({request.driver_source}) >= {place.min_driver}, the highest "
                "of the image's, the build's, its PTX JIT's and the GPUs' minimum"
            )
        else:
            reasons.append(
                "driver not checked: none given and none detected on this host; the server "
                f"needs >= {place.min_driver} (the highest of the image's, the build's, its PTX "
                "JIT's and the GPUs' minimum)"
            )
        if c.tf is not None and not c.tf.and_cuda:
            reasons.append(
                f"cudnn runtime flavour of nvidia/cuda: TensorFlow {c.tf.series} has no and-cuda "
                f"extra, so cuDNN {c.tf.cudnn} comes from the image"
            )
        else:
            reasons.append(
                "base flavour of nvidia/cuda: the framework wheels carry their own CUDA "
                "libraries (cuBLAS, cuDNN, NCCL), so runtime/devel layers would only add size"
            )
    if c.cuda is not None:
        reasons += _gpu_reasons(matrix, c, archs, name)
    reasons += platform_reasons(c, w)
    reasons.append(f"Python {c.python}: {py_reason}")
    if c.variant is not None and not c.variant.confirmed:
        reasons.append(
            f"{c.variant.name} of {name} {c.framework_version} is marked unconfirmed in the data "
            "(see envs/compat.yaml)"
        )
    if c.from_pypi and c.variant is not None:
        reasons.append(
            f"the wheelhouse holds the PyPI wheel of torch {c.framework_version}, a "
            f"{c.variant.name} build (its Requires-Dist pins CUDA {c.variant.cuda})"
        )
    if c.tf is not None and c.cuda and c.tf.and_cuda:
        reasons.append(
            f"cuDNN {c.tf.cudnn}: TensorFlow {c.tf.series}'s tested build configuration "
            "(installed by tensorflow[and-cuda])"
        )
    # a value pinned in invoke.yaml or a variable is named there, not as an option nobody typed
    return [
        re.sub(r"--(python|cuda|torch|tensorflow)\b", lambda m: request.blame(m.group(1)), r)
        for r in reasons
    ]


def _gpu_reasons(matrix: Matrix, c: Candidate, archs: list[str], name: str) -> list[str]:
    """One line per GPU: the SASS it runs, or that it runs only by JIT (and what that costs); never
    SASS that is not there."""
    out = []
    build = f"{name} {c.framework_version} {build_name(c)}"
    for cc in archs:
        how = kernel_coverage(cc, c.kernels)
        assert how is not None
        if how.startswith("PTX"):
            ptx = how.rsplit(" ", 1)[1]
            line = (
                f"GPU compute capability {cc}: {build} has no SASS for it and runs only by "
                f"JIT-compiling its {ptx} PTX, which needs a driver that runs CUDA "
                f"{c.release.minor} natively (>= {c.release.floor}); the first start compiles "
                "kernels for minutes (then cached in ~/.nv/ComputeCache; raise "
                "CUDA_CACHE_MAXSIZE so the cache holds them)"
            )
        else:
            line = f"GPU compute capability {cc}: {build} has SASS for it ({how})"
        branch = matrix.driver_branch(cc)
        if (
            branch is not None
            and c.placement is not None
            and int(branch.branch) >= int(c.placement.min_driver.split(".")[0])
        ):
            line += f"; {branch.name} needs a driver of branch R{branch.branch} or newer"
        out.append(line)
    return out
