"""The framework rules: the candidate builds of PyTorch and TensorFlow (one per release, build and
Python), the patch a version pin picks, and the default Python."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Iterable

from gpuenv.compat.matrix import (
    CudaImage,
    CudaRelease,
    Matrix,
    TensorflowRelease,
    TorchRelease,
    TorchVariant,
    version_key as V,
)
from gpuenv.errors import BadInput

#: How old a Python's X.Y.0 must be before it is the default (most packages support it by then).
DEFAULT_PYTHON_MIN_AGE_MONTHS = 6


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

    @property
    def release(self) -> CudaRelease:
        assert self.cuda is not None, "a CPU candidate has no CUDA release"
        return self.cuda

    @property
    def kernels(self) -> "TorchVariant | TensorflowRelease":
        """What the build compiled: torch's variant or TensorFlow's release (both have archs and ptx)."""
        return self.variant if self.variant is not None else self.tf  # type: ignore[return-value]

    def sort_key(self) -> tuple:
        """Newest CUDA major first (never a CUDA 11 build when a CUDA 12 one runs), then newest release, then a
        build the data confirms, then the newest build CUDA."""
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
    """Expand releases to (release, patch) pairs, newest first, honouring '--torch 2.3' or '2.3.1'."""
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
        raise BadInput(f"{option} {pin}: no {name} release {pin} is known", fix=f"use a release of series {known}")
    return chosen


def _torch_candidates(matrix: Matrix, pin: str | None) -> list[Candidate]:
    out = []
    for release, patch in pick_patch(pin, "PyTorch", list(matrix.torch_releases), "--torch"):
        assert isinstance(release, TorchRelease)
        for variant in release.variants:
            cuda = matrix.cuda_release(variant.cuda) if variant.cuda else None
            for py in release.python:
                out.append(Candidate(patch, py, cuda, variant=variant))
    return out


def _tf_candidates(matrix: Matrix, pin: str | None) -> list[Candidate]:
    out = []
    for release, patch in pick_patch(pin, "TensorFlow", list(matrix.tensorflow_releases), "--tensorflow"):
        assert isinstance(release, TensorflowRelease)
        for py in release.python:
            out.append(Candidate(patch, py, matrix.cuda_release(release.cuda), tf=release))
            out.append(Candidate(patch, py, None, tf=release))  # the CPU build
    return out


def framework_candidates(matrix: Matrix, framework: str, pin: str | None) -> list[Candidate]:
    return _torch_candidates(matrix, pin) if framework == "torch" else _tf_candidates(matrix, pin)


def version_list(versions: Iterable[str]) -> str:
    return ", ".join(sorted(set(versions), key=V)) or "none"


def build_name(c: Candidate) -> str:
    if c.variant is not None:
        return c.variant.name
    return f"CUDA {c.release.minor}" if c.cuda else "CPU"


def _add_months(day: date, months: int) -> date:
    month = day.month - 1 + months
    year, month = day.year + month // 12, month % 12 + 1
    for last in (31, 30, 29, 28):
        try:
            return date(year, month, min(day.day, last))
        except ValueError:
            continue
    raise AssertionError("unreachable")


def default_python(matrix: Matrix, pythons: Iterable[str], today: date) -> tuple[str, str]:
    """The default Python among `pythons` and the reason: the newest whose X.Y.0 is six months old."""
    offered = sorted(set(pythons), key=V)
    mature = []
    for py in offered:
        rel = matrix.python_release(py)
        if rel is not None and _add_months(rel.released, DEFAULT_PYTHON_MIN_AGE_MONTHS) <= today:
            mature.append(py)
    if mature:
        chosen = mature[-1]
        rel = matrix.python_release(chosen)
        newer = [p for p in offered if V(p) > V(chosen)]
        why = f"the newest Python it supports whose {chosen}.0 is at least {DEFAULT_PYTHON_MIN_AGE_MONTHS} months old (released {rel.released})"
        if newer:
            why += f"; {', '.join(newer)} is newer than that, pick it with --python"
        return chosen, why
    chosen = offered[0]
    return chosen, f"the oldest Python it supports: none of {', '.join(offered)} is {DEFAULT_PYTHON_MIN_AGE_MONTHS} months old yet"
