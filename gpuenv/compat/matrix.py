"""Load and validate envs/compat.yaml, the compatibility facts the resolver decides from.

The facts live in data, each entry with its source; this module only checks that the file is
well-formed and consistent, so a bad edit fails loudly at load time naming the entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from gpuenv import PROJECT_ROOT
from gpuenv.errors import DataError

COMPAT_FILE = PROJECT_ROOT / "envs" / "compat.yaml"
_BRANCH = re.compile(r"^\d{3}$")
_MINOR = re.compile(r"^\d+\.\d+$")
_PATCH = re.compile(r"^\d+\.\d+\.\d+$")
_DRIVER = re.compile(r"^\d+\.\d+(\.\d+)?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
SCHEMA = 2
_SECTIONS = (
    "checked",
    "python_releases",
    "cpu_base_image",
    "cuda_majors",
    "cuda_releases",
    "images",
    "gpu_architectures",
    "driver_branches",
    "integrated_gpus",
    "jetson_use",
    "torch_releases",
    "tensorflow_releases",
)


@lru_cache(maxsize=4096)
def version_key(text: str) -> Version:
    """Order CUDA, driver, framework and Python versions numerically (12.10 > 12.9); cached, as the
    resolver compares the same few hundred strings many times."""
    return Version(text)


@dataclass(frozen=True)
class CudaMajor:
    major: int
    minor_compat_min_driver: str
    limits: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class CudaUpdate:
    """One shipped toolkit version (12.8.0 GA, 12.8.1 Update 1) and the driver it needs (None: unknown)."""

    version: str
    min_driver: str | None
    confirmed: bool
    note: str | None
    source: tuple[str, ...]


@dataclass(frozen=True)
class CudaRelease:
    minor: str
    updates: tuple[CudaUpdate, ...]

    @property
    def major(self) -> int:
        return int(self.minor.split(".")[0])

    @property
    def floor(self) -> str | None:
        """The lowest driver that runs any update of this minor natively (its GA floor, when known)."""
        known = [u.min_driver for u in self.updates if u.min_driver]
        return min(known, key=Version) if known else None

    @property
    def source(self) -> tuple[str, ...]:
        return tuple(url for u in self.updates for url in u.source)

    def update(self, version: str) -> CudaUpdate | None:
        return next((u for u in self.updates if u.version == version), None)


@dataclass(frozen=True)
class CudnnTag:
    tag: str
    flavours: tuple[str, ...]
    ubuntu: tuple[str, ...] | None = None
    confirmed: bool = True


@dataclass(frozen=True)
class CudaImage:
    version: str
    flavours: tuple[str, ...]
    cudnn: CudnnTag | None
    ubuntu: tuple[str, ...]
    require_cuda: str | None
    source: tuple[str, ...]
    confirmed: bool = True

    @property
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
    name: str
    compute_capabilities: tuple[str, ...]
    first_cuda: str
    last_cuda: str | None
    source: tuple[str, ...]
    last_driver_branch: str | None = None  # the last driver branch that runs the family ("470")


@dataclass(frozen=True)
class DriverBranch:
    """The first driver branch (its leading number, "570") that runs GPUs of these compute capabilities."""

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
    name: str
    cuda: str | None
    archs: tuple[str, ...] = ()
    ptx: str | None = None
    confirmed: bool = True


@dataclass(frozen=True)
class TorchRelease:
    series: str
    patches: tuple[str, ...]
    python: tuple[str, ...]
    pypi_default_cuda: str | None
    variants: tuple[TorchVariant, ...]
    source: tuple[str, ...]


@dataclass(frozen=True)
class TensorflowRelease:
    series: str
    patches: tuple[str, ...]
    cuda: str
    cudnn: str
    python: tuple[str, ...]
    source: tuple[str, ...]
    and_cuda: bool = True
    #: From the wheel's tensorflow/python/platform/build_info.py: SASS archs, the PTX arch, the exact CUDA.
    archs: tuple[str, ...] = ()
    ptx: str | None = None
    kernels_cuda: str | None = None
    kernels_source: tuple[str, ...] = ()


@dataclass(frozen=True)
class PythonRelease:
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
        usable = [i for i in self.images if i.minor == minor and (u := release.update(i.version)) and u.min_driver]
        return sorted(usable, key=lambda i: Version(i.version))

    def cuda_release(self, minor: str) -> CudaRelease | None:
        return next((c for c in self.cuda_releases if c.minor == minor), None)

    def cuda_major(self, major: int) -> CudaMajor | None:
        return next((m for m in self.cuda_majors if m.major == major), None)

    def image(self, version: str) -> CudaImage | None:
        return next((i for i in self.images if i.version == version), None)

    def architecture_of(self, capability: str) -> GpuArchitecture | None:
        return next((a for a in self.gpu_architectures if capability in a.compute_capabilities), None)

    def to_dict(self) -> dict[str, Any]:
        """The validated data as plain JSON-ready structures (for `invoke matrix --json`)."""
        from dataclasses import asdict

        data = asdict(self)
        data["path"] = str(self.path)
        data["checked"] = self.checked.isoformat()
        for p in data["python_releases"]:
            p["released"] = p["released"].isoformat()
        return data


class _Checker:
    """Reads one section entry, turning every problem into a DataError naming file and entry."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> DataError:
        return DataError(f"{self.path}: {where}: {problem}", fix="correct the entry (every fact needs a source)")

    def mapping(self, value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        missing = [k for k in keys if k not in value]
        if missing:
            raise self.fail(where, f"missing key(s) {', '.join(missing)}")
        return value

    def text(self, value: Any, where: str, pattern: re.Pattern[str] | None = None) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"expected a non-empty string (quote versions), got {value!r}")
        if pattern and not pattern.match(value):
            raise self.fail(where, f"{value!r} is not of the form {pattern.pattern}")
        if pattern is not None:
            try:
                Version(value)
            except InvalidVersion:
                raise self.fail(where, f"{value!r} is not a version") from None
        return value

    def texts(self, value: Any, where: str, pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(where, f"expected a non-empty list, got {value!r}")
        return tuple(self.text(v, f"{where}[{i}]", pattern) for i, v in enumerate(value))

    def flag(self, entry: dict[str, Any], where: str, key: str = "confirmed") -> bool:
        value = entry.get(key, True)
        if not isinstance(value, bool):
            raise self.fail(where, f"{key} must be true or false, got {value!r}")
        return value

    def day(self, value: Any, where: str) -> date:
        if isinstance(value, date):
            return value
        text = self.text(value, where)
        try:
            if not _DATE.match(text):
                raise ValueError
            return date.fromisoformat(text)
        except ValueError:
            raise self.fail(where, f"{text!r} is not a date (YYYY-MM-DD)") from None

    def unique(self, values: list[str], where: str, what: str) -> None:
        seen: set[str] = set()
        for v in values:
            if v in seen:
                raise self.fail(where, f"{what} {v} is listed twice")
            seen.add(v)

    def source(self, entry: dict[str, Any], where: str) -> tuple[str, ...]:
        raw = entry.get("source")
        urls = [raw] if isinstance(raw, str) else raw
        if not isinstance(urls, list) or not urls or not all(
            isinstance(u, str) and u.startswith(("https://", "http://")) for u in urls
        ):
            raise self.fail(where, f"source must be a URL or a list of URLs, got {raw!r}")
        return tuple(urls)


def _entries(data: dict[str, Any], section: str, check: _Checker) -> list[tuple[str, dict[str, Any]]]:
    items = data.get(section)
    if not isinstance(items, list) or not items:
        raise check.fail(section, "expected a non-empty list")
    return [(f"{section}[{i}]", item) for i, item in enumerate(items)]


def parse_matrix(data: Any, path: Path = COMPAT_FILE) -> Matrix:
    """Build a Matrix from the parsed YAML, raising DataError on the first bad or inconsistent entry."""
    check = _Checker(path)
    top = check.mapping(data, "top level", ("schema",) + _SECTIONS)
    if top["schema"] != SCHEMA:
        raise check.fail("schema", f"unsupported schema {top['schema']!r} (this gpuenv reads {SCHEMA})")
    checked = check.day(top["checked"], "checked")

    pythons = []
    for where, e in _entries(top, "python_releases", check):
        check.mapping(e, where, ("version", "released", "source"))
        pythons.append(
            PythonRelease(
                check.text(e["version"], where + ".version", _MINOR),
                check.day(e["released"], where + ".released"),
                check.flag(e, where),
                check.source(e, where),
            )
        )
    check.unique([p.version for p in pythons], "python_releases", "Python")

    cpu = check.mapping(top["cpu_base_image"], "cpu_base_image", ("image", "source"))
    cpu_image = check.text(cpu["image"], "cpu_base_image.image")
    cpu_source = check.source(cpu, "cpu_base_image")

    majors = []
    for where, e in _entries(top, "cuda_majors", check):
        check.mapping(e, where, ("major", "minor_compat_min_driver", "limits", "source"))
        if not isinstance(e["major"], int):
            raise check.fail(where, f"major must be an integer, got {e['major']!r}")
        majors.append(
            CudaMajor(
                e["major"],
                check.text(e["minor_compat_min_driver"], where + ".minor_compat_min_driver", _DRIVER),
                check.text(e["limits"], where + ".limits"),
                check.source(e, where),
            )
        )

    releases = []
    for where, e in _entries(top, "cuda_releases", check):
        check.mapping(e, where, ("minor", "updates"))
        minor = check.text(e["minor"], where + ".minor", _MINOR)
        if not isinstance(e["updates"], list) or not e["updates"]:
            raise check.fail(where + ".updates", "expected a non-empty list of updates")
        updates = []
        for i, u in enumerate(e["updates"]):
            uwhere = f"{where}.updates[{i}]"
            check.mapping(u, uwhere, ("version", "min_driver", "source"))
            confirmed = check.flag(u, uwhere)
            driver = None if u["min_driver"] is None else check.text(u["min_driver"], uwhere + ".min_driver", _DRIVER)
            if driver is None and confirmed:
                raise check.fail(uwhere, "min_driver is null but the entry does not say confirmed: false")
            update = CudaUpdate(
                check.text(u["version"], uwhere + ".version", _PATCH),
                driver,
                confirmed,
                None if u.get("note") is None else check.text(u["note"], uwhere + ".note"),
                check.source(u, uwhere),
            )
            if not update.version.startswith(minor + "."):
                raise check.fail(uwhere, f"{update.version} is not an update of CUDA {minor}")
            updates.append(update)
        check.unique([u.version for u in updates], where, "update")
        known = [u for u in sorted(updates, key=lambda u: Version(u.version)) if u.min_driver]
        for older, newer in zip(known, known[1:]):
            if Version(newer.min_driver) < Version(older.min_driver):  # type: ignore[arg-type]
                raise check.fail(where, f"update {newer.version} needs driver {newer.min_driver}, lower than {older.version}'s {older.min_driver}")
        releases.append(CudaRelease(minor, tuple(updates)))

    images = []
    for where, e in _entries(top, "images", check):
        check.mapping(e, where, ("version", "flavours", "cudnn", "ubuntu", "require_cuda", "source"))
        cudnn = None
        if e["cudnn"] is not None:
            c = check.mapping(e["cudnn"], where + ".cudnn", ("tag", "flavours"))
            cudnn = CudnnTag(
                check.text(c["tag"], where + ".cudnn.tag"),
                check.texts(c["flavours"], where + ".cudnn.flavours"),
                None if c.get("ubuntu") is None else check.texts(c["ubuntu"], where + ".cudnn.ubuntu", _MINOR),
                check.flag(c, where + ".cudnn"),
            )
        ubuntu = check.texts(e["ubuntu"], where + ".ubuntu", _MINOR)
        check.unique(list(ubuntu), where + ".ubuntu", "Ubuntu")
        images.append(
            CudaImage(
                check.text(e["version"], where + ".version", _PATCH),
                check.texts(e["flavours"], where + ".flavours"),
                cudnn,
                ubuntu,
                None if e["require_cuda"] is None else check.text(e["require_cuda"], where + ".require_cuda"),
                check.source(e, where),
                check.flag(e, where),
            )
        )

    archs = []
    for where, e in _entries(top, "gpu_architectures", check):
        check.mapping(e, where, ("name", "compute_capabilities", "first_cuda", "last_cuda", "source"))
        archs.append(
            GpuArchitecture(
                check.text(e["name"], where + ".name"),
                check.texts(e["compute_capabilities"], where + ".compute_capabilities", _MINOR),
                check.text(e["first_cuda"], where + ".first_cuda", _MINOR),
                None if e["last_cuda"] is None else check.text(e["last_cuda"], where + ".last_cuda", _MINOR),
                check.source(e, where),
                None if e.get("last_driver_branch") is None else check.text(e["last_driver_branch"], where + ".last_driver_branch", _BRANCH),
            )
        )

    torches = []
    for where, e in _entries(top, "torch_releases", check):
        check.mapping(e, where, ("series", "patches", "python", "pypi_default_cuda", "variants", "source"))
        variants = []
        if not isinstance(e["variants"], dict) or not e["variants"]:
            raise check.fail(where + ".variants", "expected a non-empty mapping of wheel variants")
        for name, v in e["variants"].items():
            vwhere = f"{where}.variants.{name}"
            if name == "cpu":
                variants.append(TorchVariant("cpu", None))
                continue
            v = check.mapping(v, vwhere, ("cuda", "archs"))
            variants.append(
                TorchVariant(
                    name,
                    check.text(v["cuda"], vwhere + ".cuda", _MINOR),
                    check.texts(v["archs"], vwhere + ".archs", _MINOR),
                    None if v.get("ptx") is None else check.text(v["ptx"], vwhere + ".ptx", _MINOR),
                    check.flag(v, vwhere),
                )
            )
        default = e["pypi_default_cuda"]
        torches.append(
            TorchRelease(
                check.text(e["series"], where + ".series", _MINOR),
                check.texts(e["patches"], where + ".patches", _PATCH),
                check.texts(e["python"], where + ".python", _MINOR),
                None if default is None else check.text(default, where + ".pypi_default_cuda", _MINOR),
                tuple(variants),
                check.source(e, where),
            )
        )

    branches = []
    for where, e in _entries(top, "driver_branches", check):
        check.mapping(e, where, ("name", "compute_capabilities", "branch", "source"))
        branch = check.text(str(e["branch"]), where + ".branch")
        if not branch.isdigit():
            raise check.fail(where, f"branch must be the driver's leading number (e.g. 570), got {branch!r}")
        branches.append(
            DriverBranch(
                check.text(e["name"], where + ".name"),
                check.texts(e["compute_capabilities"], where + ".compute_capabilities", _MINOR),
                branch,
                check.flag(e, where),
                None if e.get("note") is None else check.text(e["note"], where + ".note"),
                check.source(e, where),
            )
        )

    integrated = []
    for where, e in _entries(top, "integrated_gpus", check):
        check.mapping(e, where, ("name", "compute_capabilities", "source"))
        integrated.append(
            IntegratedGpu(check.text(e["name"], where + ".name"), check.texts(e["compute_capabilities"], where + ".compute_capabilities", _MINOR), check.source(e, where))
        )
    jetson = check.mapping(top["jetson_use"], "jetson_use", ("text", "source"))
    jetson_text, jetson_source = check.text(jetson["text"], "jetson_use.text"), check.source(jetson, "jetson_use")

    tfs = []
    for where, e in _entries(top, "tensorflow_releases", check):
        check.mapping(e, where, ("series", "patches", "cuda", "cudnn", "python", "kernels", "source"))
        k = check.mapping(e["kernels"], where + ".kernels", ("cuda", "archs", "ptx", "source"))
        tfs.append(
            TensorflowRelease(
                check.text(e["series"], where + ".series", _MINOR),
                check.texts(e["patches"], where + ".patches", _PATCH),
                check.text(e["cuda"], where + ".cuda", _MINOR),
                check.text(str(e["cudnn"]), where + ".cudnn"),
                check.texts(e["python"], where + ".python", _MINOR),
                check.source(e, where),
                check.flag(e, where, "and_cuda"),
                check.texts(k["archs"], where + ".kernels.archs", _MINOR),
                None if k["ptx"] is None else check.text(k["ptx"], where + ".kernels.ptx", _MINOR),
                check.text(k["cuda"], where + ".kernels.cuda", _DRIVER),
                check.source(k, where + ".kernels"),
            )
        )

    matrix = Matrix(
        cpu_image, cpu_source, tuple(majors), tuple(releases), tuple(images), tuple(archs), tuple(torches), tuple(tfs),
        checked, tuple(pythons), tuple(branches), tuple(integrated), jetson_text, jetson_source, path,
    )
    _check_consistency(matrix, check)
    return matrix


def _check_consistency(m: Matrix, check: _Checker) -> None:
    """Cross-references and contradictions: duplicates, CUDA a framework names without a release, ..."""
    check.unique([str(x.major) for x in m.cuda_majors], "cuda_majors", "major")
    check.unique([c.minor for c in m.cuda_releases], "cuda_releases", "CUDA minor")
    check.unique([i.version for i in m.images], "images", "image version")
    check.unique([a.name for a in m.gpu_architectures], "gpu_architectures", "family")
    check.unique([cc for a in m.gpu_architectures for cc in a.compute_capabilities], "gpu_architectures", "compute capability")
    check.unique([t.series for t in m.torch_releases], "torch_releases", "series")
    check.unique([t.series for t in m.tensorflow_releases], "tensorflow_releases", "series")
    minors = {c.minor for c in m.cuda_releases}
    for c in m.cuda_releases:
        major = m.cuda_major(c.major)
        if major is None:
            raise check.fail(f"cuda_releases ({c.minor})", f"no cuda_majors entry for major {c.major}")
        if c.floor and Version(c.floor) < Version(major.minor_compat_min_driver):
            raise check.fail(f"cuda_releases ({c.minor})", f"driver floor {c.floor} is below the CUDA {c.major}.x minor-version floor {major.minor_compat_min_driver}")
    for i in m.images:
        release = m.cuda_release(i.minor)
        if release is None:
            raise check.fail(f"images ({i.version})", f"CUDA {i.minor} is not in cuda_releases")
        if release.update(i.version) is None:
            raise check.fail(f"images ({i.version})", f"{i.version} is not an update listed under cuda_releases {i.minor}")
        if "base" not in i.flavours:
            raise check.fail(f"images ({i.version})", "has no 'base' flavour, which gpuenv builds on")
    for a in m.gpu_architectures:
        if a.last_cuda is not None and Version(a.last_cuda) < Version(a.first_cuda):
            raise check.fail(f"gpu_architectures ({a.name})", f"last_cuda {a.last_cuda} is before first_cuda {a.first_cuda}")
    known_ccs = {cc for a in m.gpu_architectures for cc in a.compute_capabilities}
    for t in m.torch_releases:
        where = f"torch_releases ({t.series})"
        check.unique(list(t.patches), where, "patch")
        check.unique(list(t.python), where, "Python")
        for p in t.patches:
            if not p.startswith(t.series + "."):
                raise check.fail(where, f"patch {p} is not of series {t.series}")
        for py in t.python:
            if m.python_release(py) is None:
                raise check.fail(where, f"Python {py} is not in python_releases")
        for v in t.variants:
            if v.cuda is None:
                continue
            if v.cuda not in minors:
                raise check.fail(f"{where}.variants.{v.name}", f"CUDA {v.cuda} is not in cuda_releases")
            if v.name != "cu" + v.cuda.replace(".", ""):
                raise check.fail(f"{where}.variants.{v.name}", f"name does not match its CUDA {v.cuda}")
            unknown = [a for a in v.archs + ((v.ptx,) if v.ptx else ()) if a not in known_ccs]
            if unknown:
                raise check.fail(f"{where}.variants.{v.name}", f"arch(s) {', '.join(unknown)} not in gpu_architectures")
            check.unique(list(v.archs), f"{where}.variants.{v.name}", "arch")
            for cc in v.archs:
                arch = m.architecture_of(cc)
                if arch and arch.last_cuda and Version(v.cuda) > Version(arch.last_cuda):
                    raise check.fail(f"{where}.variants.{v.name}", f"arch {cc} ({arch.name}) is not supported by CUDA {v.cuda} (its last CUDA is {arch.last_cuda})")
    check.unique([cc for b in m.driver_branches for cc in b.compute_capabilities], "driver_branches", "compute capability")
    check.unique([cc for g in m.integrated_gpus for cc in g.compute_capabilities], "integrated_gpus", "compute capability")
    for cc in [cc for b in m.driver_branches for cc in b.compute_capabilities] + [cc for g in m.integrated_gpus for cc in g.compute_capabilities]:
        if cc not in known_ccs:
            raise check.fail("driver_branches/integrated_gpus", f"compute capability {cc} is not in gpu_architectures")
    for tf in m.tensorflow_releases:
        where = f"tensorflow_releases ({tf.series})"
        check.unique(list(tf.patches), where, "patch")
        check.unique(list(tf.python), where, "Python")
        for p in tf.patches:
            if not p.startswith(tf.series + "."):
                raise check.fail(where, f"patch {p} is not of series {tf.series}")
        if tf.cuda not in minors:
            raise check.fail(where, f"CUDA {tf.cuda} is not in cuda_releases")
        unknown = [a for a in tf.archs + ((tf.ptx,) if tf.ptx else ()) if a not in known_ccs]
        if unknown:
            raise check.fail(where + ".kernels", f"arch(s) {', '.join(unknown)} not in gpu_architectures")
        if tf.kernels_cuda and ".".join(tf.kernels_cuda.split(".")[:2]) != tf.cuda:
            raise check.fail(where + ".kernels", f"build_info's CUDA {tf.kernels_cuda} is not the release's CUDA {tf.cuda}")
        for py in tf.python:
            if m.python_release(py) is None:
                raise check.fail(where, f"Python {py} is not in python_releases")
        if not tf.and_cuda and not any(i.cudnn for i in m.images_of(tf.cuda)):
            raise check.fail(where, f"and_cuda is false but no CUDA {tf.cuda} image has cuDNN")


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser when present (the pure-Python one is most of `invoke resolve`'s time), refusing duplicate keys."""

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_matrix(path: Path | None = None) -> Matrix:
    """Read and validate the compatibility file (cached per path)."""
    return _load(Path(path or COMPAT_FILE).resolve())


@lru_cache(maxsize=4)
def _load(path: Path) -> Matrix:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise DataError(f"cannot read compatibility data {path}: {err.strerror}", fix="restore envs/compat.yaml from the repository") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not UTF-8 text (byte {err.start})", fix="save it as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise DataError(f"{path}:{line} is not valid YAML ({getattr(err, 'problem', err)})", fix="fix the syntax") from None
    return parse_matrix(data, path)
