"""Parse envs/compat.yaml into a `Matrix`: one small parser per section, each with its own checks.

A bad edit fails loudly at load time naming the file and the entry (`_Checker.fail`). The
sections are read in the file's order, then the cross-references between them are checked
(`_check_consistency`), so the first problem reported is the same one whatever the edit.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion

from gpuenv.compat.matrix_model import (
    COMPAT_FILE,
    Aarch64Builds,
    CudaImage,
    CudaMajor,
    CudaRelease,
    CudaUpdate,
    CudnnTag,
    DriverBranch,
    GpuArchitecture,
    IntegratedGpu,
    Matrix,
    PlatformTorch,
    PythonRelease,
    TensorflowRelease,
    TorchRelease,
    TorchVariant,
)
from gpuenv.compat.matrix_model import version_key as V
from gpuenv.errors import DataError

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


class _Checker:
    """Reads one section entry, turning every problem into a DataError naming file and entry."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> DataError:
        return DataError(
            f"{self.path}: {where}: {problem}", fix="correct the entry (every fact needs a source)"
        )

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
            try:  # version_key's cache: the resolver compares these same strings
                V(value)
            except InvalidVersion:
                raise self.fail(where, f"{value!r} is not a version") from None
        return value

    def optional(
        self, value: Any, where: str, pattern: re.Pattern[str] | None = None
    ) -> str | None:
        """A fact the file may leave null (an unknown floor, an arch with no PTX)."""
        return None if value is None else self.text(value, where, pattern)

    def texts(
        self, value: Any, where: str, pattern: re.Pattern[str] | None = None
    ) -> tuple[str, ...]:
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
        if (
            not isinstance(urls, list)
            or not urls
            or not all(isinstance(u, str) and u.startswith(("https://", "http://")) for u in urls)
        ):
            raise self.fail(where, f"source must be a URL or a list of URLs, got {raw!r}")
        return tuple(urls)


def _entries(
    data: dict[str, Any], section: str, check: _Checker
) -> list[tuple[str, dict[str, Any]]]:
    items = data.get(section)
    if not isinstance(items, list) or not items:
        raise check.fail(section, "expected a non-empty list")
    return [(f"{section}[{i}]", item) for i, item in enumerate(items)]


def parse_matrix(data: Any, path: Path = COMPAT_FILE) -> Matrix:
    """Build a Matrix from the parsed YAML, raising DataError on the first bad or inconsistent
    entry."""
    check = _Checker(path)
    top = check.mapping(data, "top level", ("schema",) + _SECTIONS)
    if top["schema"] != SCHEMA:
        raise check.fail(
            "schema", f"unsupported schema {top['schema']!r} (this gpuenv reads {SCHEMA})"
        )
    checked = check.day(top["checked"], "checked")
    pythons = _python_releases(top, check)
    cpu = check.mapping(top["cpu_base_image"], "cpu_base_image", ("image", "source"))
    cpu_image, cpu_source = (
        check.text(cpu["image"], "cpu_base_image.image"),
        check.source(cpu, "cpu_base_image"),
    )
    majors = _cuda_majors(top, check)
    releases = _cuda_releases(top, check)
    images = _images(top, check)
    archs = _gpu_architectures(top, check)
    torches = _torch_releases(top, check)
    branches = _driver_branches(top, check)
    integrated = _integrated_gpus(top, check)
    jetson = check.mapping(top["jetson_use"], "jetson_use", ("text", "source"))
    jetson_text, jetson_source = (
        check.text(jetson["text"], "jetson_use.text"),
        check.source(jetson, "jetson_use"),
    )
    tfs = _tensorflow_releases(top, check)
    aarch64 = _aarch64(top["aarch64"], check) if "aarch64" in top else None
    matrix = Matrix(
        cpu_image,
        cpu_source,
        majors,
        releases,
        images,
        archs,
        torches,
        tfs,
        checked,
        pythons,
        branches,
        integrated,
        jetson_text,
        jetson_source,
        aarch64,
        path,
    )
    _check_consistency(matrix, check)
    return matrix


def _python_releases(top: dict[str, Any], check: _Checker) -> tuple[PythonRelease, ...]:
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
    return tuple(pythons)


def _cuda_majors(top: dict[str, Any], check: _Checker) -> tuple[CudaMajor, ...]:
    majors = []
    for where, e in _entries(top, "cuda_majors", check):
        check.mapping(e, where, ("major", "minor_compat_min_driver", "limits", "source"))
        if not isinstance(e["major"], int):
            raise check.fail(where, f"major must be an integer, got {e['major']!r}")
        majors.append(
            CudaMajor(
                e["major"],
                check.text(
                    e["minor_compat_min_driver"], where + ".minor_compat_min_driver", _DRIVER
                ),
                check.text(e["limits"], where + ".limits"),
                check.source(e, where),
            )
        )
    return tuple(majors)


def _cuda_releases(top: dict[str, Any], check: _Checker) -> tuple[CudaRelease, ...]:
    releases = []
    for where, e in _entries(top, "cuda_releases", check):
        check.mapping(e, where, ("minor", "updates"))
        minor = check.text(e["minor"], where + ".minor", _MINOR)
        if not isinstance(e["updates"], list) or not e["updates"]:
            raise check.fail(where + ".updates", "expected a non-empty list of updates")
        updates = [
            _cuda_update(u, f"{where}.updates[{i}]", minor, check)
            for i, u in enumerate(e["updates"])
        ]
        check.unique([u.version for u in updates], where, "update")
        # A later update never needs an older driver than an earlier one: a lower floor is a typo.
        known = [u for u in sorted(updates, key=lambda u: V(u.version)) if u.min_driver]
        for older, newer in zip(known, known[1:]):
            if V(newer.min_driver) < V(older.min_driver):  # type: ignore[arg-type]
                raise check.fail(
                    where,
                    f"update {newer.version} needs driver {newer.min_driver}, lower than "
                    f"{older.version}'s {older.min_driver}",
                )
        releases.append(CudaRelease(minor, tuple(updates)))
    return tuple(releases)


def _cuda_update(u: Any, where: str, minor: str, check: _Checker) -> CudaUpdate:
    check.mapping(u, where, ("version", "min_driver", "source"))
    confirmed = check.flag(u, where)
    driver = check.optional(u["min_driver"], where + ".min_driver", _DRIVER)
    if driver is None and confirmed:
        raise check.fail(where, "min_driver is null but the entry does not say confirmed: false")
    update = CudaUpdate(
        check.text(u["version"], where + ".version", _PATCH),
        driver,
        confirmed,
        check.optional(u.get("note"), where + ".note"),
        check.source(u, where),
    )
    if not update.version.startswith(minor + "."):
        raise check.fail(where, f"{update.version} is not an update of CUDA {minor}")
    return update


def _images(top: dict[str, Any], check: _Checker) -> tuple[CudaImage, ...]:
    images = []
    for where, e in _entries(top, "images", check):
        check.mapping(
            e, where, ("version", "flavours", "cudnn", "ubuntu", "require_cuda", "source")
        )
        cudnn = None
        if e["cudnn"] is not None:
            c = check.mapping(e["cudnn"], where + ".cudnn", ("tag", "flavours"))
            cudnn = CudnnTag(
                check.text(c["tag"], where + ".cudnn.tag"),
                check.texts(c["flavours"], where + ".cudnn.flavours"),
                None
                if c.get("ubuntu") is None
                else check.texts(c["ubuntu"], where + ".cudnn.ubuntu", _MINOR),
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
                check.optional(e["require_cuda"], where + ".require_cuda"),
                check.source(e, where),
                check.flag(e, where),
            )
        )
    return tuple(images)


def _gpu_architectures(top: dict[str, Any], check: _Checker) -> tuple[GpuArchitecture, ...]:
    archs = []
    for where, e in _entries(top, "gpu_architectures", check):
        check.mapping(
            e, where, ("name", "compute_capabilities", "first_cuda", "last_cuda", "source")
        )
        archs.append(
            GpuArchitecture(
                check.text(e["name"], where + ".name"),
                check.texts(e["compute_capabilities"], where + ".compute_capabilities", _MINOR),
                check.text(e["first_cuda"], where + ".first_cuda", _MINOR),
                check.optional(e["last_cuda"], where + ".last_cuda", _MINOR),
                check.source(e, where),
                check.optional(e.get("last_driver_branch"), where + ".last_driver_branch", _BRANCH),
            )
        )
    return tuple(archs)


def _torch_releases(top: dict[str, Any], check: _Checker) -> tuple[TorchRelease, ...]:
    torches = []
    for where, e in _entries(top, "torch_releases", check):
        check.mapping(
            e, where, ("series", "patches", "python", "pypi_default_cuda", "variants", "source")
        )
        if not isinstance(e["variants"], dict) or not e["variants"]:
            raise check.fail(where + ".variants", "expected a non-empty mapping of wheel variants")
        variants = tuple(
            _torch_variant(name, v, f"{where}.variants.{name}", check)
            for name, v in e["variants"].items()
        )
        torches.append(
            TorchRelease(
                check.text(e["series"], where + ".series", _MINOR),
                check.texts(e["patches"], where + ".patches", _PATCH),
                check.texts(e["python"], where + ".python", _MINOR),
                check.optional(e["pypi_default_cuda"], where + ".pypi_default_cuda", _MINOR),
                variants,
                check.source(e, where),
            )
        )
    return tuple(torches)


def _torch_variant(name: str, v: Any, where: str, check: _Checker) -> TorchVariant:
    if name == "cpu":  # the CPU wheel has no CUDA and no archs; only `pypi` is read
        pypi = check.flag(v, where, "pypi") if isinstance(v, dict) and "pypi" in v else False
        return TorchVariant("cpu", None, pypi=pypi)
    v = check.mapping(v, where, ("cuda", "archs"))
    return TorchVariant(
        name,
        check.text(v["cuda"], where + ".cuda", _MINOR),
        check.texts(v["archs"], where + ".archs", _MINOR),
        check.optional(v.get("ptx"), where + ".ptx", _MINOR),
        check.flag(v, where),
        check.flag(v, where, "pypi") if "pypi" in v else False,
    )


def _aarch64(value: Any, check: _Checker) -> Aarch64Builds:
    """The `aarch64:` section: Grace GPUs and the aarch64 builds, each entry with its source."""
    keys = ("platform", "grace_gpus", "images_source", "torch", "tensorflow")
    e = check.mapping(value, "aarch64", keys)
    grace = check.mapping(e["grace_gpus"], "aarch64.grace_gpus", ("products", "source"))
    tf_keys = ("cpu_requirement", "series", "gpu_use", "source")
    tf = check.mapping(e["tensorflow"], "aarch64.tensorflow", tf_keys)
    torches = []
    for where, t in _entries(e, "torch", check):
        where = "aarch64." + where
        check.mapping(t, where, ("series", "variants", "source"))
        if not isinstance(t["variants"], dict) or not t["variants"]:
            raise check.fail(where + ".variants", "expected a non-empty mapping of wheel variants")
        variants = tuple(
            _torch_variant(n, v, f"{where}.variants.{n}", check) for n, v in t["variants"].items()
        )
        if sum(v.pypi for v in variants) > 1:
            raise check.fail(
                where, "more than one variant says pypi: true (one PyPI file per platform)"
            )
        torches.append(
            PlatformTorch(
                check.text(t["series"], where + ".series", _MINOR), variants, check.source(t, where)
            )
        )
    return Aarch64Builds(
        check.text(e["platform"], "aarch64.platform"),
        check.texts(grace["products"], "aarch64.grace_gpus.products"),
        check.source(grace, "aarch64.grace_gpus"),
        check.source({"source": e["images_source"]}, "aarch64.images_source"),
        tuple(torches),
        check.text(tf["cpu_requirement"], "aarch64.tensorflow.cpu_requirement"),
        check.texts(tf["series"], "aarch64.tensorflow.series", _MINOR),
        check.text(tf["gpu_use"], "aarch64.tensorflow.gpu_use"),
        check.source(tf, "aarch64.tensorflow"),
    )


def _driver_branches(top: dict[str, Any], check: _Checker) -> tuple[DriverBranch, ...]:
    branches = []
    for where, e in _entries(top, "driver_branches", check):
        check.mapping(e, where, ("name", "compute_capabilities", "branch", "source"))
        branch = check.text(str(e["branch"]), where + ".branch")
        if not branch.isdigit():
            raise check.fail(
                where, f"branch must be the driver's leading number (e.g. 570), got {branch!r}"
            )
        branches.append(
            DriverBranch(
                check.text(e["name"], where + ".name"),
                check.texts(e["compute_capabilities"], where + ".compute_capabilities", _MINOR),
                branch,
                check.flag(e, where),
                check.optional(e.get("note"), where + ".note"),
                check.source(e, where),
            )
        )
    return tuple(branches)


def _integrated_gpus(top: dict[str, Any], check: _Checker) -> tuple[IntegratedGpu, ...]:
    integrated = []
    for where, e in _entries(top, "integrated_gpus", check):
        check.mapping(e, where, ("name", "compute_capabilities", "source"))
        integrated.append(
            IntegratedGpu(
                check.text(e["name"], where + ".name"),
                check.texts(e["compute_capabilities"], where + ".compute_capabilities", _MINOR),
                check.source(e, where),
            )
        )
    return tuple(integrated)


def _tensorflow_releases(top: dict[str, Any], check: _Checker) -> tuple[TensorflowRelease, ...]:
    tfs = []
    for where, e in _entries(top, "tensorflow_releases", check):
        check.mapping(
            e, where, ("series", "patches", "cuda", "cudnn", "python", "kernels", "source")
        )
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
                check.optional(k["ptx"], where + ".kernels.ptx", _MINOR),
                check.text(k["cuda"], where + ".kernels.cuda", _DRIVER),
                check.source(k, where + ".kernels"),
            )
        )
    return tuple(tfs)


def _check_consistency(m: Matrix, check: _Checker) -> None:
    """Cross-references and contradictions between sections, in a fixed order: duplicates, CUDA
    releases and images, architectures, torch, the GPU lists, tensorflow."""
    check.unique([str(x.major) for x in m.cuda_majors], "cuda_majors", "major")
    check.unique([c.minor for c in m.cuda_releases], "cuda_releases", "CUDA minor")
    check.unique([i.version for i in m.images], "images", "image version")
    check.unique([a.name for a in m.gpu_architectures], "gpu_architectures", "family")
    check.unique(
        [cc for a in m.gpu_architectures for cc in a.compute_capabilities],
        "gpu_architectures",
        "compute capability",
    )
    check.unique([t.series for t in m.torch_releases], "torch_releases", "series")
    check.unique([t.series for t in m.tensorflow_releases], "tensorflow_releases", "series")
    _check_cuda(m, check)
    for a in m.gpu_architectures:
        if a.last_cuda is not None and V(a.last_cuda) < V(a.first_cuda):
            raise check.fail(
                f"gpu_architectures ({a.name})",
                f"last_cuda {a.last_cuda} is before first_cuda {a.first_cuda}",
            )
    known_ccs = {cc for a in m.gpu_architectures for cc in a.compute_capabilities}
    for t in m.torch_releases:
        _check_torch(m, t, known_ccs, check)
    check.unique(
        [cc for b in m.driver_branches for cc in b.compute_capabilities],
        "driver_branches",
        "compute capability",
    )
    check.unique(
        [cc for g in m.integrated_gpus for cc in g.compute_capabilities],
        "integrated_gpus",
        "compute capability",
    )
    for cc in [cc for b in m.driver_branches for cc in b.compute_capabilities] + [
        cc for g in m.integrated_gpus for cc in g.compute_capabilities
    ]:
        if cc not in known_ccs:
            raise check.fail(
                "driver_branches/integrated_gpus",
                f"compute capability {cc} is not in gpu_architectures",
            )
    for tf in m.tensorflow_releases:
        _check_tensorflow(m, tf, known_ccs, check)
    if m.aarch64 is not None:
        _check_aarch64(m, m.aarch64, known_ccs, check)


def _check_aarch64(m: Matrix, a: Aarch64Builds, known_ccs: set[str], check: _Checker) -> None:
    """Each aarch64 torch series is a series of torch_releases (its patches and Pythons), its
    variants pass the same checks; each TensorFlow series is one of tensorflow_releases."""
    if a.platform != "linux-aarch64":
        raise check.fail("aarch64.platform", f"expected linux-aarch64, got {a.platform!r}")
    series = {t.series: t for t in m.torch_releases}
    check.unique([t.series for t in a.torch], "aarch64.torch", "series")
    for t in a.torch:
        if t.series not in series:
            raise check.fail(f"aarch64.torch ({t.series})", "not a series of torch_releases")
        x86 = series[t.series]
        _check_torch(
            m,
            TorchRelease(t.series, x86.patches, x86.python, None, t.variants, t.source),
            known_ccs,
            check,
        )
    known_tf = {tf.series for tf in m.tensorflow_releases}
    for s in a.tf_series:
        if s not in known_tf:
            raise check.fail("aarch64.tensorflow.series", f"{s} is not in tensorflow_releases")


def _check_cuda(m: Matrix, check: _Checker) -> None:
    """Every CUDA minor has its major, a floor above the major's; every image has its update and a
    base flavour."""
    for c in m.cuda_releases:
        major = m.cuda_major(c.major)
        if major is None:
            raise check.fail(
                f"cuda_releases ({c.minor})", f"no cuda_majors entry for major {c.major}"
            )
        if c.floor and V(c.floor) < V(major.minor_compat_min_driver):
            raise check.fail(
                f"cuda_releases ({c.minor})",
                f"driver floor {c.floor} is below the CUDA {c.major}.x minor-version floor "
                f"{major.minor_compat_min_driver}",
            )
    for i in m.images:
        release = m.cuda_release(i.minor)
        if release is None:
            raise check.fail(f"images ({i.version})", f"CUDA {i.minor} is not in cuda_releases")
        if release.update(i.version) is None:
            raise check.fail(
                f"images ({i.version})",
                f"{i.version} is not an update listed under cuda_releases {i.minor}",
            )
        if "base" not in i.flavours:
            raise check.fail(
                f"images ({i.version})", "has no 'base' flavour, which gpuenv builds on"
            )


def _check_torch(m: Matrix, t: TorchRelease, known_ccs: set[str], check: _Checker) -> None:
    """A torch series' patches, Pythons and wheel variants name facts the file has, and no variant
    claims an arch its CUDA dropped."""
    where = f"torch_releases ({t.series})"
    check.unique(list(t.patches), where, "patch")
    check.unique(list(t.python), where, "Python")
    for p in t.patches:
        if not p.startswith(t.series + "."):
            raise check.fail(where, f"patch {p} is not of series {t.series}")
    for py in t.python:
        if m.python_release(py) is None:
            raise check.fail(where, f"Python {py} is not in python_releases")
    minors = {c.minor for c in m.cuda_releases}
    for v in t.variants:
        if v.cuda is None:
            continue
        vwhere = f"{where}.variants.{v.name}"
        if v.cuda not in minors:
            raise check.fail(vwhere, f"CUDA {v.cuda} is not in cuda_releases")
        if v.name != "cu" + v.cuda.replace(".", ""):
            raise check.fail(vwhere, f"name does not match its CUDA {v.cuda}")
        unknown = [a for a in v.archs + ((v.ptx,) if v.ptx else ()) if a not in known_ccs]
        if unknown:
            raise check.fail(vwhere, f"arch(s) {', '.join(unknown)} not in gpu_architectures")
        check.unique(list(v.archs), vwhere, "arch")
        for cc in v.archs:
            arch = m.architecture_of(cc)
            if arch and arch.last_cuda and V(v.cuda) > V(arch.last_cuda):
                raise check.fail(
                    vwhere,
                    f"arch {cc} ({arch.name}) is not supported by CUDA {v.cuda} (its last CUDA "
                    f"is {arch.last_cuda})",
                )


def _check_tensorflow(
    m: Matrix, tf: TensorflowRelease, known_ccs: set[str], check: _Checker
) -> None:
    """A tensorflow series' patches, CUDA, kernels and Pythons agree with the rest of the file."""
    where = f"tensorflow_releases ({tf.series})"
    check.unique(list(tf.patches), where, "patch")
    check.unique(list(tf.python), where, "Python")
    for p in tf.patches:
        if not p.startswith(tf.series + "."):
            raise check.fail(where, f"patch {p} is not of series {tf.series}")
    if tf.cuda not in {c.minor for c in m.cuda_releases}:
        raise check.fail(where, f"CUDA {tf.cuda} is not in cuda_releases")
    unknown = [a for a in tf.archs + ((tf.ptx,) if tf.ptx else ()) if a not in known_ccs]
    if unknown:
        raise check.fail(
            where + ".kernels", f"arch(s) {', '.join(unknown)} not in gpu_architectures"
        )
    if tf.kernels_cuda and ".".join(tf.kernels_cuda.split(".")[:2]) != tf.cuda:
        raise check.fail(
            where + ".kernels",
            f"build_info's CUDA {tf.kernels_cuda} is not the release's CUDA {tf.cuda}",
        )
    for py in tf.python:
        if m.python_release(py) is None:
            raise check.fail(where, f"Python {py} is not in python_releases")
    if not tf.and_cuda and not any(i.cudnn for i in m.images_of(tf.cuda)):
        raise check.fail(where, f"and_cuda is false but no CUDA {tf.cuda} image has cuDNN")
