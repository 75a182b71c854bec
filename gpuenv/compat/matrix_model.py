"""The typed model of envs/compat.yaml: one frozen dataclass per kind of fact, and `Matrix`, their
whole.

Kept apart from the parsers (matrix_parse.py) and the loader (matrix.py) so the rules, which only
read facts, import plain data; every name here is also importable from gpuenv.compat.matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from packaging.version import Version

from gpuenv import PROJECT_ROOT

COMPAT_FILE = PROJECT_ROOT / "envs" / "compat.yaml"


@lru_cache(maxsize=4096)
def version_key(text: str) -> Version:
    """Order CUDA, driver, framework and Python versions numerically (12.10 > 12.9); cached, as the
    resolver compares the same few hundred strings many times."""
    return Version(text)


@dataclass(frozen=True)
class CudaMajor:
    """A CUDA major (`cuda_majors:`): the driver its minor-version compatibility starts from, and
    that compatibility's limits."""

    major: int
    minor_compat_min_driver: str
    limits: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class CudaUpdate:
    """One shipped toolkit version (12.8.0 GA, 12.8.1 Update 1) and the driver it needs (None:
    unknown)."""

    version: str
    min_driver: str | None
    confirmed: bool
    note: str | None
    source: tuple[str, ...]


@dataclass(frozen=True)
class CudaRelease:
    """A CUDA minor (`cuda_releases:`, e.g. 12.8) and its shipped updates (12.8.0, 12.8.1)."""

    minor: str
    updates: tuple[CudaUpdate, ...]

    @cached_property  # asked thousands of times per command by the resolver's rules
    def major(self) -> int:
        return int(self.minor.split(".")[0])

    @cached_property
    def floor(self) -> str | None:
        """The lowest driver that runs any update of this minor natively (its GA floor, when
        known)."""
        known = [u.min_driver for u in self.updates if u.min_driver]
        return min(known, key=version_key) if known else None

    @property
    def source(self) -> tuple[str, ...]:
        return tuple(url for u in self.updates for url in u.source)

    def update(self, version: str) -> CudaUpdate | None:
        return next((u for u in self.updates if u.version == version), None)


@dataclass(frozen=True)
class CudnnTag:
    """The cuDNN tag of an nvidia/cuda image (cudnn8, cudnn9, cudnn), and the flavours and Ubuntus
    it has."""

    tag: str
    flavours: tuple[str, ...]
    ubuntu: tuple[str, ...] | None = None
    confirmed: bool = True


@dataclass(frozen=True)
class CudaImage:
    """One nvidia/cuda image version (`images:`): its flavours, cuDNN tag, Ubuntus and
    NVIDIA_REQUIRE_CUDA."""

    version: str
    flavours: tuple[str, ...]
    cudnn: CudnnTag | None
    ubuntu: tuple[str, ...]
    require_cuda: str | None
    source: tuple[str, ...]
    confirmed: bool = True

    @cached_property  # asked for every image at each placement of a build
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def tags(self) -> list[str]:
        """Every tag this entry says exists, e.g. ``12.1.1-cudnn8-runtime-ubuntu22.04``."""
        out = [f"{self.version}-{f}-ubuntu{u}" for f in self.flavours for u in self.ubuntu]
        if self.cudnn:
            out += [
                f"{self.version}-{self.cudnn.tag}-{f}-ubuntu{u}"
                for f in self.cudnn.flavours
                for u in (self.cudnn.ubuntu or self.ubuntu)
            ]
        return out


@dataclass(frozen=True)
class GpuArchitecture:
    """A GPU family (`gpu_architectures:`): its compute capabilities and the CUDA releases that
    build for it."""

    name: str
    compute_capabilities: tuple[str, ...]
    first_cuda: str
    last_cuda: str | None
    source: tuple[str, ...]
    last_driver_branch: str | None = None  # the last driver branch that runs the family ("470")


@dataclass(frozen=True)
class DriverBranch:
    """The first driver branch (its leading number, "570") that runs GPUs of these compute
    capabilities."""

    name: str
    compute_capabilities: tuple[str, ...]
    branch: str
    confirmed: bool
    note: str | None
    source: tuple[str, ...]


@dataclass(frozen=True)
class IntegratedGpu:
    """A Jetson module: gpuenv's x86_64 images and wheels do not target it."""

    name: str
    compute_capabilities: tuple[str, ...]
    source: tuple[str, ...]


@dataclass(frozen=True)
class TorchVariant:
    """One PyTorch wheel build (cpu, cu126, ...): its CUDA, the SASS archs and PTX it carries."""

    name: str
    cuda: str | None
    archs: tuple[str, ...] = ()
    ptx: str | None = None
    confirmed: bool = True
    #: This build is PyPI's own file for its platform (installed as torch==X, no index); only the
    #: aarch64 section sets it.
    pypi: bool = False


@dataclass(frozen=True)
class PlatformTorch:
    """The builds one torch series has for a platform other than linux-64."""

    series: str
    variants: tuple[TorchVariant, ...]
    source: tuple[str, ...]


@dataclass(frozen=True)
class Aarch64Builds:
    """What exists for Linux aarch64 (Grace): the GPUs only made with Grace, and the framework
    builds of that platform (not the x86_64 ones)."""

    platform: str
    grace_products: tuple[str, ...]
    grace_source: tuple[str, ...]
    images_source: tuple[str, ...]
    torch: tuple[PlatformTorch, ...]
    tf_cpu_requirement: str
    tf_series: tuple[str, ...]
    tf_gpu_use: str
    tf_source: tuple[str, ...]

    def torch_series(self, series: str) -> PlatformTorch | None:
        return next((t for t in self.torch if t.series == series), None)

    def grace_gpu(self, product: str) -> str | None:
        """The Grace product a GPU name is ("NVIDIA GB200" for "NVIDIA GB200 NVL"), or None."""
        found = (p for p in self.grace_products if product == p or product.startswith(p + " "))
        return next(found, None)


@dataclass(frozen=True)
class TorchRelease:
    """A PyTorch series (`torch_releases:`): its patches, Pythons, wheel builds and PyPI's
    default CUDA."""

    series: str
    patches: tuple[str, ...]
    python: tuple[str, ...]
    pypi_default_cuda: str | None
    variants: tuple[TorchVariant, ...]
    source: tuple[str, ...]


@dataclass(frozen=True)
class TensorflowRelease:
    """A TensorFlow series (`tensorflow_releases:`): its patches, CUDA, cuDNN, Pythons and the
    kernels its wheel was built with."""

    series: str
    patches: tuple[str, ...]
    cuda: str
    cudnn: str
    python: tuple[str, ...]
    source: tuple[str, ...]
    and_cuda: bool = True
    #: From the wheel's tensorflow/python/platform/build_info.py: SASS archs, the PTX arch, the
    #: exact CUDA.
    archs: tuple[str, ...] = ()
    ptx: str | None = None
    kernels_cuda: str | None = None
    kernels_source: tuple[str, ...] = ()


@dataclass(frozen=True)
class PythonRelease:
    """A Python minor (`python_releases:`) and the day its X.Y.0 was released."""

    version: str
    released: date
    confirmed: bool
    source: tuple[str, ...]


@dataclass(frozen=True)
class Matrix:
    """Everything in envs/compat.yaml, checked for consistency."""

    cpu_base_image: str
    cpu_base_image_source: tuple[str, ...]
    cuda_majors: tuple[CudaMajor, ...]
    cuda_releases: tuple[CudaRelease, ...]
    images: tuple[CudaImage, ...]
    gpu_architectures: tuple[GpuArchitecture, ...]
    torch_releases: tuple[TorchRelease, ...]
    tensorflow_releases: tuple[TensorflowRelease, ...]
    checked: date
    python_releases: tuple[PythonRelease, ...]
    driver_branches: tuple[DriverBranch, ...] = ()
    integrated_gpus: tuple[IntegratedGpu, ...] = ()
    jetson_use: str = ""
    jetson_use_source: tuple[str, ...] = ()
    aarch64: Aarch64Builds | None = None
    path: Path = field(default=COMPAT_FILE, compare=False)

    def driver_branch(self, capability: str) -> DriverBranch | None:
        return next((b for b in self.driver_branches if capability in b.compute_capabilities), None)

    def integrated_gpu(self, capability: str) -> IntegratedGpu | None:
        return next((g for g in self.integrated_gpus if capability in g.compute_capabilities), None)

    def python_release(self, version: str) -> PythonRelease | None:
        return next((p for p in self.python_releases if p.version == version), None)

    def images_of(self, minor: str) -> list[CudaImage]:
        """The images of a CUDA minor whose update has a known driver floor, oldest first."""
        release = self.cuda_release(minor)
        if release is None:
            return []
        usable = [
            i
            for i in self.images
            if i.minor == minor and (u := release.update(i.version)) and u.min_driver
        ]
        return sorted(usable, key=lambda i: version_key(i.version))

    def cuda_release(self, minor: str) -> CudaRelease | None:
        return next((c for c in self.cuda_releases if c.minor == minor), None)

    def cuda_major(self, major: int) -> CudaMajor | None:
        return next((m for m in self.cuda_majors if m.major == major), None)

    def image(self, version: str) -> CudaImage | None:
        return next((i for i in self.images if i.version == version), None)

    def architecture_of(self, capability: str) -> GpuArchitecture | None:
        return self._architecture_by_capability.get(capability)

    @cached_property
    def _architecture_by_capability(self) -> dict[str, GpuArchitecture]:
        """Each compute capability's family (the first that lists it): the data's checks and the
        resolver ask hundreds of times per command."""
        found: dict[str, GpuArchitecture] = {}
        for arch in self.gpu_architectures:
            for capability in arch.compute_capabilities:
                found.setdefault(capability, arch)
        return found

    def to_dict(self) -> dict[str, Any]:
        """The validated data as plain JSON-ready structures (for `invoke matrix --json`)."""
        from dataclasses import asdict

        data = asdict(self)
        data["path"] = str(self.path)
        data["checked"] = self.checked.isoformat()
        for p in data["python_releases"]:
            p["released"] = p["released"].isoformat()
        return data
