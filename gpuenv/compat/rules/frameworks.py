"""The framework rules: the candidate builds of PyTorch and TensorFlow (one per release, build and
Python), the patch a version pin picks, and the Stack a chosen build makes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from gpuenv.compat.matrix import (
    CudaImage,
    CudaRelease,
    Matrix,
    TensorflowRelease,
    TorchRelease,
    TorchVariant,
)
from gpuenv.compat.matrix import (
    version_key as V,
)
from gpuenv.errors import BadInput
from gpuenv.stack import CPU, LINUX_64, Stack

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"


@dataclass(frozen=True)
class Candidate:
    """One framework build for one Python; `placement` is filled once the base image is chosen."""

    framework_version: str
    python: str
    cuda: CudaRelease | None  # the build's CUDA (framework_cuda)
    variant: TorchVariant | None = None
    tf: TensorflowRelease | None = None
    from_pypi: bool = False  # the wheelhouse holds the PyPI wheel (no +local tag) of this build
    placement: "Placement | None" = None
    platform: str = LINUX_64  # the CPU architecture the build is for (conda's platform name)

    @property
    def release(self) -> CudaRelease:
        assert self.cuda is not None, "a CPU candidate has no CUDA release"
        return self.cuda

    @property
    def kernels(self) -> "TorchVariant | TensorflowRelease":
        """What the build compiled: torch's variant or TensorFlow's release (both have archs and
        ptx)."""
        return self.variant if self.variant is not None else self.tf  # type: ignore[return-value]

    def placed(self, placement: Placement) -> Candidate:
        """This build on `placement`: `dataclasses.replace` spelt out, for it is made for every
        candidate of every re-resolve (thousands per `--cuda` resolve, replace's field walk the
        larger part of its time)."""
        return Candidate(
            self.framework_version,
            self.python,
            self.cuda,
            self.variant,
            self.tf,
            self.from_pypi,
            placement,
            self.platform,
        )

    def sort_key(self) -> tuple:
        """Newest CUDA major first (never a CUDA 11 build when a CUDA 12 one runs), then newest
        release, then a build the data confirms, then the newest build CUDA."""
        if self.cuda is None:
            return (0, V(self.framework_version), True, V("0"))
        confirmed = self.variant is None or self.variant.confirmed
        return (self.cuda.major, V(self.framework_version), confirmed, V(self.cuda.minor))


@dataclass(frozen=True)
class Placement:
    """The container CUDA and base image a GPU build runs on, and why the driver can run it."""

    container: CudaRelease
    image: CudaImage
    min_driver: str
    minor_compat: bool = False
    #: The image itself runs by minor-version compatibility (no image of its major runs natively).
    image_minor_compat: bool = False


def pick_patch(pin: str | None, name: str, releases: list, option: str) -> list[tuple[object, str]]:
    """Expand releases to (release, patch) pairs, newest first, honouring '--torch 2.3' or
    '2.3.1'."""
    pairs = [(r, p) for r in releases for p in r.patches]
    pairs.sort(key=lambda rp: V(rp[1]), reverse=True)
    if pin is None:
        # Within a series only the newest patch is offered unless pinned: patches fix bugs.
        newest: dict[str, tuple[object, str]] = {}
        for r, p in pairs:
            newest.setdefault(r.series, (r, p))
        return list(newest.values())
    text = str(pin).strip()
    if re.fullmatch(r"\d+\.\d+", text):
        chosen = [rp for rp in pairs if rp[0].series == text][:1]
    else:
        chosen = [rp for rp in pairs if rp[1] == text]
    if not chosen:
        known = ", ".join(sorted({r.series for r in releases}, key=V))
        raise BadInput(
            f"{option} {pin}: no {name} release {pin} is known",
            fix=f"use a release of series {known}",
        )
    return chosen


def platform_variants(
    matrix: Matrix, release: TorchRelease, platform: str
) -> tuple[TorchVariant, ...]:
    """The builds a torch release has for `platform`: the x86_64 ones on linux-64, the aarch64
    section's on linux-aarch64 (none when the data knows no aarch64 build of the series)."""
    if platform == LINUX_64:
        return release.variants
    found = matrix.aarch64.torch_series(release.series) if matrix.aarch64 else None
    return found.variants if found else ()


def _torch_candidates(matrix: Matrix, pin: str | None, platform: str) -> list[Candidate]:
    out = []
    for release, patch in pick_patch(pin, "PyTorch", list(matrix.torch_releases), "--torch"):
        assert isinstance(release, TorchRelease)
        for variant in platform_variants(matrix, release, platform):
            cuda = matrix.cuda_release(variant.cuda) if variant.cuda else None
            for py in release.python:
                out.append(Candidate(patch, py, cuda, variant=variant, platform=platform))
    return out


def _tf_candidates(matrix: Matrix, pin: str | None, platform: str) -> list[Candidate]:
    out = []
    aarch64_series = matrix.aarch64.tf_series if matrix.aarch64 else ()
    for release, patch in pick_patch(
        pin, "TensorFlow", list(matrix.tensorflow_releases), "--tensorflow"
    ):
        assert isinstance(release, TensorflowRelease)
        for py in release.python:
            if platform == LINUX_64:
                out.append(Candidate(patch, py, matrix.cuda_release(release.cuda), tf=release))
                out.append(Candidate(patch, py, None, tf=release))  # the CPU build
            elif release.series in aarch64_series:  # PyPI's aarch64 wheel: a CPU build
                out.append(Candidate(patch, py, None, tf=release, platform=platform))
    return out


def framework_candidates(
    matrix: Matrix, framework: str, pin: str | None, platform: str = LINUX_64
) -> list[Candidate]:
    """Every build of the framework (one per release, build and Python) made for `platform`."""
    return list(_candidates(_Same(matrix), framework, pin, platform))


class _Same:
    """A matrix as a cache key by identity (a Matrix's own hash walks every fact); holding it keeps
    its id from being reused while it is cached."""

    __slots__ = ("matrix",)

    def __init__(self, matrix: Matrix) -> None:
        self.matrix = matrix

    def __hash__(self) -> int:
        return id(self.matrix)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.matrix is self.matrix


@lru_cache(maxsize=16)
def _candidates(
    same: _Same, framework: str, pin: str | None, platform: str
) -> tuple[Candidate, ...]:
    """The builds once per matrix and wishes: a resolve re-resolves its fixes over the same matrix
    up to ten times (the candidates are frozen, so every caller may share them)."""
    if framework == "torch":
        return tuple(_torch_candidates(same.matrix, pin, platform))
    return tuple(_tf_candidates(same.matrix, pin, platform))


def version_list(versions: Iterable[str]) -> str:
    return ", ".join(sorted(set(versions), key=V)) or "none"


def build_name(c: Candidate) -> str:
    if c.variant is not None:
        return c.variant.name
    return f"CUDA {c.release.minor}" if c.cuda else "CPU"


def image_require_cuda(c: Candidate) -> str | None:
    """The image's NVIDIA_REQUIRE_CUDA for a placed build: the base image's own, except when the
    image itself runs by minor-version compatibility (then the major and the driver that gives)."""
    place = c.placement
    if place is None:
        return None
    if place.image_minor_compat:
        return f"cuda>={c.release.major}.0,driver>={place.min_driver}"
    return place.image.require_cuda


def stack_of(matrix: Matrix, c: Candidate, framework: str, reasons: list[str]) -> Stack:
    """The Stack of build `c` (placed, when a GPU build): base image, wheel and index, with
    `reasons`."""
    place = c.placement
    if framework == "torch":
        variant = c.variant
        assert variant is not None
        wheel_variant = variant.name
        if c.from_pypi or (c.platform != LINUX_64 and variant.pypi):
            requirement, index_url = f"torch=={c.framework_version}", None
        elif (
            c.platform != LINUX_64
        ):  # the index's aarch64 files: torch==X picks them (test-infra#7652)
            requirement = f"torch=={c.framework_version}"
            index_url = TORCH_INDEX.format(variant=variant.name)
        else:
            requirement, index_url = (
                f"torch=={c.framework_version}+{variant.name}",
                TORCH_INDEX.format(variant=variant.name),
            )
        gpu_archs = variant.archs
        cudnn = None
    else:
        assert c.tf is not None
        if c.cuda is None and c.platform != LINUX_64:  # tensorflow-cpu has no aarch64 wheel
            assert matrix.aarch64 is not None
            requirement = f"{matrix.aarch64.tf_cpu_requirement}=={c.framework_version}"
        elif c.cuda is None:
            requirement = f"tensorflow-cpu=={c.framework_version}"
        elif c.tf.and_cuda:
            requirement = f"tensorflow[and-cuda]=={c.framework_version}"
        else:
            requirement = f"tensorflow=={c.framework_version}"
        index_url = None
        wheel_variant = None
        gpu_archs = ()
        cudnn = c.tf.cudnn if c.cuda else None
    return Stack(
        cuda=place.container.minor if place else CPU,
        cuda_version=place.image.version if place else None,
        min_driver=place.min_driver if place else None,
        base_image=_image_tag(place.image, c) if place else matrix.cpu_base_image,
        python=c.python,
        framework=framework,
        framework_version=c.framework_version,
        wheel_variant=wheel_variant,
        index_url=index_url,
        pip_requirement=requirement,
        cudnn=cudnn,
        require_cuda=image_require_cuda(c),
        gpu_archs=tuple(gpu_archs),
        reasons=tuple(reasons),
        framework_cuda=c.release.minor if c.cuda else None,
        platform=c.platform,
    )


def _image_tag(image: CudaImage, c: Candidate) -> str:
    if c.tf is not None and not c.tf.and_cuda and image.cudnn:
        ubuntu = max(image.cudnn.ubuntu or image.ubuntu, key=V)
        return f"nvidia/cuda:{image.version}-{image.cudnn.tag}-runtime-ubuntu{ubuntu}"
    ubuntu = max(image.ubuntu, key=V)
    return f"nvidia/cuda:{image.version}-base-ubuntu{ubuntu}"
