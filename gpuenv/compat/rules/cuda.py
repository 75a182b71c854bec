"""The CUDA and driver rules: the base image a build runs on (natively, or by minor-version
compatibility) and its driver floor, and the builds `--cuda X.Y` keeps."""
from __future__ import annotations

from gpuenv.compat.matrix import CudaImage, Matrix, version_key as V
from gpuenv.compat.rules.fixes import _cuda_tries, _first_fix, _fix, _join_fixes
from gpuenv.compat.rules.frameworks import Candidate, Placement, framework_candidates, version_list
from gpuenv.compat.rules.request import Request
from gpuenv.errors import NoCompatibleStack


def runnable_images(matrix: Matrix, minor: str, driver: str | None, cudnn: bool) -> list[CudaImage]:
    """Images of a CUDA minor (oldest first) whose update's floor the driver meets (all when no driver)."""
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


def place_build(matrix: Matrix, c: Candidate, cuda_wish: str | None, driver: str | None, strict: bool) -> Placement | None:
    """Choose the container CUDA and base image for a GPU build, or None when this driver runs none."""
    build = c.release
    cudnn = c.tf is not None and not c.tf.and_cuda
    if cuda_wish:
        container = matrix.cuda_release(cuda_wish)
        assert container is not None
        images = runnable_images(matrix, cuda_wish, driver, cudnn)
        if not images:
            return _place_by_minor_compat(matrix, c, cuda_wish, driver, strict, cudnn)
        image = images[-1]
        if V(build.minor) > V(cuda_wish):  # only newer builds of this major exist (see cuda_rule)
            major = matrix.cuda_major(build.major)
            assert major is not None
            return Placement(container, image, higher_driver(image_driver_floor(matrix, image), major.minor_compat_min_driver), minor_compat=True)
        return Placement(container, image, higher_driver(image_driver_floor(matrix, image), build.floor))
    images = runnable_images(matrix, build.minor, driver, cudnn)
    if images:
        image = images[-1]
        return Placement(build, image, higher_driver(image_driver_floor(matrix, image), build.floor if driver is None else None))
    if driver is None or strict:
        return None
    major = matrix.cuda_major(build.major)
    if major is None or V(driver) < V(major.minor_compat_min_driver):
        return None
    # Minor-version compatibility: an image of the same major the driver runs natively, older than the build.
    older = sorted(
        (r for r in matrix.cuda_releases if r.major == build.major and V(r.minor) < V(build.minor)),
        key=lambda r: V(r.minor), reverse=True,
    )
    for release in older:
        images = runnable_images(matrix, release.minor, driver, cudnn)
        if images:
            image = images[-1]
            return Placement(release, image, higher_driver(image_driver_floor(matrix, image), major.minor_compat_min_driver), minor_compat=True)
    return _place_by_minor_compat(matrix, c, None, driver, strict, cudnn)


def _place_by_minor_compat(matrix: Matrix, c: Candidate, cuda_wish: str | None, driver: str | None, strict: bool, cudnn: bool) -> Placement | None:
    """The image itself under minor-version compatibility, when no image of the build's major runs natively.

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
        wanted = sorted((r for r in same_major if V(r.minor) <= V(build.minor)), key=lambda r: V(r.minor), reverse=True)
    for release in wanted:
        assert release is not None
        images = [i for i in matrix.images_of(release.minor) if not cudnn or i.cudnn]
        if images:
            return Placement(release, images[-1], major.minor_compat_min_driver, minor_compat=True, image_minor_compat=True)
    return None


def image_minors(matrix: Matrix) -> list[str]:
    """CUDA minors that have an image with a known driver floor, newest first."""
    return sorted((c.minor for c in matrix.cuda_releases if matrix.images_of(c.minor)), key=V, reverse=True)


def cuda_rule(matrix: Matrix, request: Request, framework: str, cands: list[Candidate], wish: str, what: str) -> list[Candidate]:
    """Builds of X.Y's major (those above X.Y run on its image by minor-version compatibility; not with --strict-driver)."""
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
        message = f"{what} has no build for CUDA {wish} or an older CUDA {major}.x (its CUDA {major}.x builds: {', '.join(minors)})"
        tries = _cuda_tries(minors) + [{"strict_driver": False}]
    else:
        message = f"{what} has no CUDA {major}.x build (it has CUDA {have}), and gpuenv never crosses a CUDA major"
        tries = _cuda_tries(sorted({c.release.minor for c in cands}, key=V, reverse=True))
    fixes = [_first_fix(request, matrix, tries)]
    if not minors:
        fixes.append(_fix(request, matrix, cuda=None))
    if request.torch or request.tensorflow:
        others = sorted({c.framework_version for c in framework_candidates(matrix, framework, None) if c.cuda and c.release.major == major and V(c.release.minor) <= V(wish)}, key=V)
        if others:
            fixes.append(_fix(request, matrix, **{framework: others[-1]}))
    raise NoCompatibleStack(message, fix=_join_fixes(fixes, f"use --cuda with one of {have}"))
