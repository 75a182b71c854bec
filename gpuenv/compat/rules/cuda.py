"""The CUDA and driver rules: the base image a build runs on (natively, or by minor-version
compatibility) and its driver floor, and the builds `--cuda X.Y` keeps."""

from __future__ import annotations

import re

from gpuenv.compat.legacy import last_served
from gpuenv.compat.matrix import CudaImage, Matrix
from gpuenv.compat.matrix import version_key as V
from gpuenv.compat.rules.fixes import cuda_tries, describe, drop_pin, join_fixes
from gpuenv.compat.rules.frameworks import Candidate, Placement, framework_candidates, version_list
from gpuenv.compat.rules.wishes import Wishes
from gpuenv.errors import NoCompatibleStack
from gpuenv.stack import CPU, Stack


def runnable_images(matrix: Matrix, minor: str, driver: str | None, cudnn: bool) -> list[CudaImage]:
    """Images of a CUDA minor (oldest first) whose update's floor the driver meets (all when no
    driver)."""
    out = []
    release = matrix.cuda_release(minor)
    for image in matrix.images_of(minor):
        if cudnn and image.cudnn is None:
            continue
        floor = release.update(image.version).min_driver  # type: ignore[union-attr]
        if driver is None or V(driver) >= V(floor):
            out.append(image)
    return out


def image_driver_floor(matrix: Matrix, image: CudaImage) -> str:
    update = matrix.cuda_release(image.minor).update(image.version)  # type: ignore[union-attr]
    assert update is not None and update.min_driver is not None
    return update.min_driver


def higher_driver(a: str, b: str | None) -> str:
    return a if b is None or V(a) >= V(b) else b


def place_build(
    matrix: Matrix, c: Candidate, cuda_wish: str | None, driver: str | None, strict: bool
) -> Placement | None:
    """Choose the container CUDA and base image for a GPU build, or None when this driver runs
    none."""
    build = c.release
    cudnn = c.tf is not None and not c.tf.and_cuda
    if cuda_wish:
        container = matrix.cuda_release(cuda_wish)
        assert container is not None
        images = runnable_images(matrix, cuda_wish, driver, cudnn)
        if not images:
            return _place_by_minor_compat(matrix, c, cuda_wish, driver, strict, cudnn)
        image = images[-1]
        if V(build.minor) > V(
            cuda_wish
        ):  # only newer builds of this major exist (see apply_cuda_rule)
            major = matrix.cuda_major(build.major)
            assert major is not None
            return Placement(
                container,
                image,
                higher_driver(image_driver_floor(matrix, image), major.minor_compat_min_driver),
                minor_compat=True,
            )
        return Placement(
            container, image, higher_driver(image_driver_floor(matrix, image), build.floor)
        )
    images = runnable_images(matrix, build.minor, driver, cudnn)
    if images:
        image = images[-1]
        return Placement(
            build,
            image,
            higher_driver(
                image_driver_floor(matrix, image), build.floor if driver is None else None
            ),
        )
    if driver is None or strict:
        return None
    major = matrix.cuda_major(build.major)
    if major is None or V(driver) < V(major.minor_compat_min_driver):
        return None
    # Minor-version compatibility: an image of the same major the driver runs natively, older than
    # the build.
    older = sorted(
        (r for r in matrix.cuda_releases if r.major == build.major and V(r.minor) < V(build.minor)),
        key=lambda r: V(r.minor),
        reverse=True,
    )
    for release in older:
        images = runnable_images(matrix, release.minor, driver, cudnn)
        if images:
            image = images[-1]
            return Placement(
                release,
                image,
                higher_driver(image_driver_floor(matrix, image), major.minor_compat_min_driver),
                minor_compat=True,
            )
    return _place_by_minor_compat(matrix, c, None, driver, strict, cudnn)


def _place_by_minor_compat(
    matrix: Matrix,
    c: Candidate,
    cuda_wish: str | None,
    driver: str | None,
    strict: bool,
    cudnn: bool,
) -> Placement | None:
    """The image itself under minor-version compatibility, when no image of the build's major runs
    natively.

    CUDA 11 hosts: a driver from 450.80.02 runs CUDA 11.x, but the only CUDA 11 image in the data
    (11.8.0) needs 520.61.05 natively. When the major has an image the driver runs natively, that
    one is used instead (never a newer image by compatibility over an older one natively).
    """
    build = c.release
    major = matrix.cuda_major(build.major)
    if driver is None or strict or major is None or V(driver) < V(major.minor_compat_min_driver):
        return None
    same_major = [r for r in matrix.cuda_releases if r.major == build.major]
    if any(runnable_images(matrix, r.minor, driver, False) for r in same_major):
        return None
    if cuda_wish:
        wanted = [matrix.cuda_release(cuda_wish)]
    else:  # the build's own CUDA, else the newest older one of its major that has an image
        wanted = sorted(
            (r for r in same_major if V(r.minor) <= V(build.minor)),
            key=lambda r: V(r.minor),
            reverse=True,
        )
    for release in wanted:
        assert release is not None
        images = [i for i in matrix.images_of(release.minor) if not cudnn or i.cudnn]
        if images:
            return Placement(
                release,
                images[-1],
                major.minor_compat_min_driver,
                minor_compat=True,
                image_minor_compat=True,
            )
    return None


def image_minors(matrix: Matrix) -> list[str]:
    """CUDA minors that have an image with a known driver floor, newest first."""
    return sorted(
        (c.minor for c in matrix.cuda_releases if matrix.images_of(c.minor)), key=V, reverse=True
    )


def keep_cpu_or_gpu(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """--cuda cpu keeps the CPU builds; any other wish (none included) the GPU builds."""
    request, name = w.request, w.name
    if not w.gpu:
        kept = [c for c in cands if c.cuda is None]
        if not kept:
            fix = join_fixes(
                [w.fixes.fix(**drop_pin(request)) if w.pin else None, w.fixes.fix(cuda=None)],
                "drop the version pin or use a CUDA version",
            )
            raise NoCompatibleStack(f"{w.what} has no CPU build in the data", fix=fix)
        return kept
    gpu = [c for c in cands if c.cuda is not None]
    if not gpu:
        series = sorted(
            {
                c.framework_version
                for c in framework_candidates(w.matrix, w.framework, None, w.platform)
                if c.cuda
            },
            key=V,
        )
        tries: list[dict[str, object]] = [{"cuda": CPU}]
        if series and request.wheelhouse is None:
            tries.append({w.framework: series[-1]})
        fix = join_fixes((w.fixes.fix(**t) for t in tries), "use --cuda cpu")
        if request.wheelhouse is not None:
            fix += (
                f", or add the wheel of a {name} CUDA build to "
                f"{request.wheelhouse_dir or 'the wheelhouse'}"
            )
        where = " in the wheelhouse" if request.wheelhouse is not None else " in the data"
        raise NoCompatibleStack(f"{w.what} has only a CPU build{where}", fix=fix)
    return gpu


def apply_cuda_rule(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """--cuda X.Y keeps the builds of X's major (those above X.Y run on its image by minor-version
    compatibility; not with --strict-driver): a CUDA major is never crossed."""
    wish, request, matrix, what = w.cuda_version, w.request, w.matrix, w.what
    if wish is None:
        return cands
    major = int(wish.split(".")[0])
    same_major = [c for c in cands if c.release.major == major]
    if request.strict_driver:
        kept = [c for c in same_major if V(c.release.minor) <= V(wish)]
        if kept:
            return kept
    elif same_major:
        return same_major
    minors = sorted({c.release.minor for c in same_major}, key=V)
    have = version_list(c.release.minor for c in cands)
    if minors:
        message = (
            f"{what} has no build for CUDA {wish} or an older CUDA {major}.x (its CUDA {major}.x "
            f"builds: {', '.join(minors)})"
        )
        tries = cuda_tries(minors) + [{"strict_driver": False}]
    else:
        message = (
            f"{what} has no CUDA {major}.x build (it has CUDA {have}), and gpuenv never crosses "
            "a CUDA major"
        )
        tries = cuda_tries(sorted({c.release.minor for c in cands}, key=V, reverse=True))
    fixes = [w.fixes.first(tries)]
    if not minors:
        fixes.append(w.fixes.fix(cuda=None))
    if request.torch or request.tensorflow:
        others = sorted(
            {
                c.framework_version
                for c in framework_candidates(matrix, w.framework, None, w.platform)
                if c.cuda and c.release.major == major and V(c.release.minor) <= V(wish)
            },
            key=V,
        )
        if others:
            fixes.append(w.fixes.fix(**{w.framework: others[-1]}))
    raise NoCompatibleStack(message, fix=join_fixes(fixes, f"use --cuda with one of {have}"))


def place_on_driver(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """Each GPU build on a base image the driver runs, natively or by minor-version
    compatibility, with its driver floor; the builds no image of theirs runs are dropped."""
    if not w.gpu:
        return cands
    matrix, driver = w.matrix, w.driver
    # a placement depends only on the build's CUDA and whether it needs a cuDNN image: compute each
    # once
    memo: dict[tuple[str, bool], Placement | None] = {}
    placed = []
    for c in cands:
        key = (c.release.minor, c.tf is not None and not c.tf.and_cuda)
        if key not in memo:
            memo[key] = place_build(matrix, c, w.cuda, driver, w.request.strict_driver)
        if memo[key] is not None:
            placed.append(c.placed(memo[key]))
    if placed:
        return placed
    if driver is None:
        minors = version_list(c.release.minor for c in cands)
        fix = join_fixes(
            [w.fixes.first(cuda_tries(image_minors(matrix))), w.fixes.fix(cuda=None)],
            "use --cuda with a release `invoke matrix` lists with images",
        )
        raise NoCompatibleStack(
            "no nvidia/cuda image with a known driver floor is in the data for CUDA "
            f"{w.cuda or minors}",
            fix=fix,
        )
    message, fix = driver_failure(cands, w)
    raise NoCompatibleStack(message, fix=fix)


def pick_build_cuda(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """--cuda X.Y: the build CUDA is the newest at or below X.Y within X's major, else the lowest
    above it."""
    wish = w.cuda_version
    if wish is None:
        return cands
    minors = {c.release.minor for c in cands}
    below = [m for m in minors if V(m) <= V(wish)]
    target = max(below, key=V) if below else min(minors, key=V)
    return [c for c in cands if c.release.minor == target]


def driver_failure(cands: list[Candidate], w: Wishes) -> tuple[str, str]:
    """The message when the driver is too old: which CUDA it needed, and the nearest re-resolved
    fixes (never a driver past a legacy GPU's last branch: that GPU's last branch instead)."""
    matrix, request, cuda_wish, strict, archs = (
        w.matrix,
        w.request,
        w.cuda,
        w.request.strict_driver,
        w.archs,
    )
    driver = w.driver
    assert driver is not None

    def image_floor(minor: str) -> str | None:
        """The lowest driver that runs an image of this CUDA in the data (an update without an image
        does not count)."""
        floors = [image_driver_floor(matrix, i) for i in matrix.images_of(minor)]
        return min(floors, key=V) if floors else None

    if cuda_wish:
        needed, what = image_floor(cuda_wish), f"CUDA {cuda_wish}"
    else:
        lowest = min(cands, key=lambda c: V(image_floor(c.release.minor) or "9999"))
        needed, what = image_floor(lowest.release.minor), f"CUDA {lowest.release.minor}"
    if needed is None:
        fix = join_fixes(
            [w.fixes.first(cuda_tries(image_minors(matrix))), w.fixes.fix(cuda=None)],
            "use --cuda with a release `invoke matrix` lists with a driver floor",
        )
        return (
            f"no nvidia/cuda image with a known driver floor is in the data for {what} (see "
            "`invoke matrix`)",
            fix,
        )
    message = f"driver {driver} is older than {needed} needed by {what}"
    fixes: list[tuple[str, Stack] | None] = []
    if cuda_wish:
        # the newest CUDA of the same major whose image this driver runs natively, then of any
        # major; then no --cuda
        major_no = int(cuda_wish.split(".")[0])
        runnable = [
            m
            for m in image_minors(matrix)
            if m != cuda_wish and runnable_images(matrix, m, driver, False)
        ]
        same = [m for m in runnable if int(m.split(".")[0]) == major_no and V(m) < V(cuda_wish)]
        fixes.append(w.fixes.first(cuda_tries(same + [m for m in runnable if m not in same])))
        fixes.append(w.fixes.fix(cuda=None))
    elif strict:
        fixes.append(w.fixes.fix(strict_driver=False))
    if drop_pin(request):
        fixes.append(w.fixes.fix(**drop_pin(request)))
    fixes.append(w.fixes.fix(cuda=CPU))
    options = [f"upgrade the driver to >= {needed}", join_fixes(fixes, "use --cuda cpu")]
    for cc in archs:
        arch = matrix.architecture_of(cc)
        if (
            arch is None
            or arch.last_driver_branch is None
            or int(needed.split(".")[0]) <= int(arch.last_driver_branch)
        ):
            continue
        last = arch.last_driver_branch
        message += f"; {last_served(arch, cc)}, so no driver that runs it reaches {needed}"
        options[0] = f"install an R{last} driver"
        if (
            request.explain
        ):  # a re-resolution behind a suggestion suggests nothing (fixes never recurse)
            # the lowest driver of the last branch: if it gives a stack, every driver of that branch
            # does
            on_last = w.fixes.suggest(driver=f"{last}.0")
            if on_last is not None:
                options[0] += f" (gives {describe(on_last)})"
            else:
                message += f", and no stack gpuenv knows with these options runs on it on R{last}"
                options.pop(0)
        break
    major_no = int((cuda_wish or cands[0].release.minor).split(".")[0])
    major = matrix.cuda_major(major_no)
    needed_major = matrix.cuda_major(int(what.split()[-1].split(".")[0]))
    compat_floor = needed_major.minor_compat_min_driver if needed_major else None
    if (
        not strict
        and compat_floor
        and V(driver) < V(compat_floor) < V(needed)
        and options[0].startswith("upgrade the driver")
    ):
        # doctor names the oldest branch that serves the GPUs; this advice must not contradict it
        options[0] += (
            f" (the image's own floor; CUDA {needed_major.major}.x wheels run from {compat_floor}"
            " by minor-version compatibility)"
        )
    if major and V(driver) >= V(major.minor_compat_min_driver):
        message += (
            f" (CUDA {major_no}.x wheels run on it by minor-version compatibility, from "
            f"{major.minor_compat_min_driver}, but the CUDA "
            f"{cuda_wish or cands[0].release.minor} image needs its own driver floor)"
        )
    branch = driver.split(".")[0]
    images = matrix.images_of(cuda_wish) if cuda_wish else []
    if (
        images
        and images[-1].require_cuda
        and re.search(rf"driver>={branch},driver<{int(branch) + 1}\b", images[-1].require_cuda)
    ):
        message += (
            "; on a data-center GPU, CUDA forward compatibility (the cuda-compat package) "
            f"supports the {branch} branch for this image"
        )
    return message, " or ".join(options)
