"""Has upstream moved on? Compare envs/compat.yaml with what PyPI says (`invoke matrix --check`).

`gather` asks a PyPI client (gpuenv.compat.pypi, the one module that talks HTTP) for the few
documents and wheel METADATA files the comparison needs; `compare` is pure and turns those
observations into findings, each with its source URL. Facts PyPI cannot give (driver floors, image
tags, download.pytorch.org variants) are listed as needing a curated update.
"""

from __future__ import annotations

import ast
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date
from typing import Any, Callable, Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from gpuenv.compat.matrix import Matrix

PROJECTS = ("torch", "tensorflow", "cuda-toolkit")
#: Oldest TensorFlow with the and-cuda extra whose pins say which CUDA it runs.
TF_AND_CUDA_FROM = Version("2.14")
#: How old the data's check date may be before doctor warns.
STALE_AFTER_DAYS = 60
CURATED = (
    "driver floor of each new CUDA update (NVIDIA CUDA release notes, Table 3 'CUDA Toolkit and "
    "Corresponding Driver Versions')",
    "nvidia/cuda image tags and their NVIDIA_REQUIRE_CUDA "
    "(gitlab.com/nvidia/container-images/cuda, Docker Hub)",
    "torch wheel variants on download.pytorch.org and their GPU architectures (pytorch/pytorch "
    "RELEASE.md CUDA support matrix)",
    "TensorFlow's tested cuDNN where the and-cuda extra pins only a range "
    "(tensorflow.org/install/source#gpu)",
    "the first driver branch of each GPU family (NVIDIA driver and CUDA release notes) and "
    "Jetson compute capabilities (developer.nvidia.com/cuda-gpus)",
    "GPU architectures per CUDA release (NVIDIA CUDA release notes) and Python X.Y.0 release "
    "dates (python.org PEPs)",
)


class Client(Protocol):
    def project(self, name: str) -> dict[str, Any]: ...
    def file_url(self, name: str, url: str) -> str: ...
    def wheel_metadata(self, url: str, size: int, pep658: bool = False) -> str: ...
    def wheel_member(self, url: str, size: int, wanted: str) -> str: ...


#: The file of a TensorFlow wheel that records the CUDA, cuDNN and GPU architectures it was built
#: for.
TF_BUILD_INFO = "tensorflow/python/platform/build_info.py"


@dataclass(frozen=True)
class Finding:
    kind: str
    subject: str
    data: str | None
    upstream: str
    source: str


@dataclass
class DriftReport:
    data_path: str
    checked: str
    index: str
    findings: list[Finding] = field(default_factory=list)
    curated: list[str] = field(default_factory=lambda: list(CURATED))
    pending: list[str] = field(
        default_factory=list
    )  # entries of the data still unknown or unconfirmed
    notes: list[str] = field(default_factory=list)

    @property
    def drift(self) -> bool:
        return bool(self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "drift": self.drift}


# ---------------------------------------------------------------- observations (through the client)


def final_versions(doc: dict[str, Any]) -> list[str]:
    """Final releases with at least one file that is not yanked, oldest first."""
    out = []
    for text, files in (doc.get("releases") or {}).items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if (
            version.is_prerelease
            or version.is_devrelease
            or not files
            or all(f.get("yanked") for f in files)
        ):
            continue
        out.append(text)
    return sorted(out, key=Version)


def linux_wheel(files: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The Linux x86_64 CPython wheel with the newest Python tag (free-threaded builds skipped)."""
    best: tuple[int, dict[str, Any]] | None = None
    for f in files:
        name = f.get("filename", "")
        if not name.endswith(".whl") or f.get("yanked"):
            continue
        try:
            _, _, _, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        for tag in tags:
            match = re.fullmatch(r"cp3(\d+)", tag.interpreter)
            if (
                match
                and tag.abi == tag.interpreter
                and "x86_64" in tag.platform
                and "linux" in tag.platform
            ):
                rank = int(match[1])
                if best is None or rank > best[0]:
                    best = (rank, f)
    return best[1] if best else None


def gather(
    client: Client, matrix: Matrix, workers: int = 8, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """What the comparison needs, as plain JSON (so a recorded copy can be replayed in tests)."""
    say = progress or (lambda line: None)
    say(f"reading the release lists of {', '.join(PROJECTS)}")
    docs = {name: client.project(name) for name in PROJECTS}
    wanted: dict[str, list[str]] = {}
    for name, releases in (
        ("torch", matrix.torch_releases),
        ("tensorflow", matrix.tensorflow_releases),
    ):
        known = {p for r in releases for p in r.patches}
        versions = final_versions(docs[name])
        newest_per_series: dict[str, str] = {}
        for v in versions:
            newest_per_series[".".join(v.split(".")[:2])] = v
        picks = {v for s, v in newest_per_series.items() if any(r.series == s for r in releases)}
        picks |= {
            v
            for v in versions
            if v not in known
            and Version(v) > min((Version(p) for p in known), default=Version("0"))
        }
        if name == "tensorflow":
            picks = {v for v in picks if Version(v) >= TF_AND_CUDA_FROM}
        wanted[name] = sorted(picks, key=Version)

    jobs = []
    for name, versions in wanted.items():
        for v in versions:
            wheel = linux_wheel(docs[name]["releases"].get(v, []))
            if wheel is not None:
                pep658 = bool(wheel.get("core_metadata") or wheel.get("data-dist-info-metadata"))
                jobs.append(
                    (
                        name,
                        v,
                        client.file_url(name, wheel["url"]),
                        int(wheel["size"]),
                        wheel["filename"],
                        pep658,
                    )
                )
    say(
        f"reading the METADATA of {len(jobs)} wheels (PEP 658 files or range requests, never "
        "whole wheels)"
    )

    def read(job):
        name, v, url, size, filename, pep658 = job
        text = client.wheel_metadata(url, size, pep658)
        return (
            name,
            v,
            filename,
            [
                line.split(":", 1)[1].strip()
                for line in text.splitlines()
                if line.startswith("Requires-Dist:")
            ],
        )

    metadata: dict[str, dict[str, Any]] = {"torch": {}, "tensorflow": {}}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for name, v, filename, requires in pool.map(read, jobs):
            metadata[name][v] = {"wheel": filename, "requires_dist": requires}

    # TensorFlow's GPU kernels: build_info.py of the newest patch of every series in the data, and
    # of new releases
    tf_known = {p for r in matrix.tensorflow_releases for p in r.patches}
    tf_versions = [v for v in final_versions(docs["tensorflow"]) if v.count(".") == 2]
    newest: dict[str, str] = {}
    for v in tf_versions:
        newest[".".join(v.split(".")[:2])] = v
    series = {r.series for r in matrix.tensorflow_releases}
    oldest = min((Version(p) for p in tf_known), default=Version("0"))
    picks = sorted(
        {v for s, v in newest.items() if s in series}
        | {v for v in tf_versions if v not in tf_known and Version(v) > oldest},
        key=Version,
    )
    info_jobs = []
    for v in picks:
        wheel = linux_wheel(docs["tensorflow"]["releases"].get(v, []))
        if wheel is not None:
            info_jobs.append(
                (
                    v,
                    client.file_url("tensorflow", wheel["url"]),
                    int(wheel["size"]),
                    wheel["filename"],
                )
            )
    say(f"reading {TF_BUILD_INFO} of {len(info_jobs)} TensorFlow wheels (range requests)")

    def read_info(job):
        v, url, size, filename = job
        return v, filename, client.wheel_member(url, size, TF_BUILD_INFO)

    build_info: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for v, filename, text in pool.map(read_info, info_jobs):
            build_info[v] = {"wheel": filename, "text": text}
    return {
        "versions": {name: final_versions(docs[name]) for name in PROJECTS},
        "metadata": metadata,
        "tensorflow_build_info": build_info,
    }


def parse_build_info(text: str) -> dict[str, Any]:
    """TensorFlow's build_info.py (an OrderedDict literal) -> {cuda, archs (SASS, 'X.Y'), ptx ('X.Y'
    or None)}.

    Read with ast.literal_eval, never executed. `cuda_compute_capabilities` lists sm_XY (SASS) and
    compute_XY (PTX) entries.
    """
    values: dict[str, Any] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "build_info" for t in node.targets
        ):
            call = node.value
            arg = call.args[0] if isinstance(call, ast.Call) and call.args else call
            values = dict(ast.literal_eval(arg))
    caps = [str(c) for c in values.get("cuda_compute_capabilities", [])]

    def cc(tag: str) -> str:
        digits = re.sub(r"\D", "", tag)
        return f"{digits[:-1]}.{digits[-1]}"

    ptx = [cc(c) for c in caps if c.startswith("compute_")]
    return {
        "cuda": values.get("cuda_version"),
        "archs": [cc(c) for c in caps if c.startswith("sm_")],
        "ptx": max(ptx, key=Version) if ptx else None,
    }


def torch_cuda_update(requires: list[str]) -> str | None:
    """The exact CUDA update a PyPI torch wheel installs (cuda-toolkit==X.Y.Z, torch 2.11 on); None
    before."""
    req = _pins(requires).get("cuda-toolkit")
    if req is None:
        return None
    exact = [s.version for s in req.specifier if s.operator == "=="]
    return exact[0] if exact else None


# ---------------------------------------------------------------- pure comparison

_LINUX = {
    "platform_system": "Linux",
    "sys_platform": "linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}


def _pins(requires: list[str], extra: str | None = None) -> dict[str, Requirement]:
    out = {}
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        env = {**_LINUX, "extra": extra or ""}
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if extra is None and req.marker is not None and "extra" in str(req.marker):
            continue
        out[req.name.lower()] = req
    return out


def _floor_version(req: Requirement) -> Version | None:
    """The == version, else the >= bound, of a requirement."""
    for op in ("==", ">="):
        for spec in req.specifier:
            if spec.operator == op:
                try:
                    return Version(spec.version.rstrip(".*"))
                except InvalidVersion:
                    return None
    return None


def _minor(version: Version | None) -> str | None:
    return f"{version.major}.{version.minor}" if version is not None else None


def torch_cuda(requires: list[str]) -> str | None:
    """The CUDA minor a PyPI torch wheel pins (cuda-toolkit from 2.11, nvidia-cuda-runtime-cu1x
    before)."""
    pins = _pins(requires)
    for name in (
        "cuda-toolkit",
        "nvidia-cuda-runtime-cu13",
        "nvidia-cuda-runtime-cu12",
        "nvidia-cuda-runtime-cu11",
        "nvidia-cuda-runtime",
    ):
        if name in pins:
            return _minor(_floor_version(pins[name]))
    return None


def tensorflow_cuda(requires: list[str]) -> tuple[str | None, str | None]:
    """(CUDA minor, cuDNN X.Y) of TensorFlow's and-cuda extra: its == pins, or the >= floors from
    2.20."""
    pins = _pins(requires, extra="and-cuda")
    cuda = next(
        (
            _minor(_floor_version(pins[n]))
            for n in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13")
            if n in pins
        ),
        None,
    )
    cudnn = next(
        (
            _minor(_floor_version(pins[n]))
            for n in ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-cudnn-cu11")
            if n in pins
        ),
        None,
    )
    return cuda, cudnn


def _page(project: str, version: str | None = None) -> str:
    return f"https://pypi.org/project/{project}/{version + '/' if version else ''}"


def compare(
    matrix: Matrix, upstream: dict[str, Any], index: str = "https://pypi.org/simple"
) -> DriftReport:
    """Findings: releases the data lacks, and facts that disagree with PyPI's metadata."""
    report = DriftReport(str(matrix.path), matrix.checked.isoformat(), index)
    report.pending = pending_curation(matrix)
    versions, metadata = upstream["versions"], upstream["metadata"]
    report.findings += _torch_findings(matrix, versions, metadata)
    report.findings += _tensorflow_findings(
        matrix, versions, metadata, upstream.get("tensorflow_build_info", {})
    )
    report.findings += _cuda_findings(matrix, versions, metadata)
    return report


def _torch_findings(
    matrix: Matrix, versions: dict[str, Any], metadata: dict[str, Any]
) -> list[Finding]:
    """torch releases the data lacks, and a PyPI wheel whose pinned CUDA disagrees with the
    release's PyPI default or is a build the data does not list."""
    findings: list[Finding] = []
    add = findings.append
    torch_known = {p: r for r in matrix.torch_releases for p in r.patches}
    oldest = min((Version(p) for p in torch_known), default=Version("0"))
    for v in versions["torch"]:
        if v not in torch_known and Version(v) > oldest:
            cuda = torch_cuda(metadata["torch"].get(v, {}).get("requires_dist", []))
            add(
                Finding(
                    "torch release",
                    v,
                    None,
                    "on PyPI" + (f"; its wheel pins CUDA {cuda}" if cuda else ""),
                    _page("torch", v),
                )
            )
    for v, seen in sorted(metadata["torch"].items(), key=lambda kv: Version(kv[0])):
        release = torch_known.get(v)
        if release is None:
            continue
        cuda = torch_cuda(seen["requires_dist"])
        if cuda != release.pypi_default_cuda:
            add(
                Finding(
                    "torch PyPI-default CUDA",
                    release.series,
                    release.pypi_default_cuda,
                    f"{cuda or 'none pinned'} (Requires-Dist of {seen['wheel']})",
                    _page("torch", v),
                )
            )
        elif (
            cuda
            and not any(var.cuda == cuda for var in release.variants)
            and matrix.cuda_release(cuda) is not None
        ):
            add(
                Finding(
                    "torch build",
                    f"{release.series} cu{cuda.replace('.', '')}",
                    "no such variant",
                    f"the PyPI wheel is a CUDA {cuda} build",
                    _page("torch", v),
                )
            )
    return findings


def _tensorflow_findings(
    matrix: Matrix, versions: dict[str, Any], metadata: dict[str, Any], build_info: dict[str, Any]
) -> list[Finding]:
    """TensorFlow releases the data lacks, and an and-cuda extra or a build_info.py (its
    kernels) that disagrees with the release's entry."""
    findings: list[Finding] = []
    add = findings.append
    tf_known = {p: r for r in matrix.tensorflow_releases for p in r.patches}
    tf_oldest = min((Version(p) for p in tf_known), default=Version("0"))
    for v in versions["tensorflow"]:
        base = Version(v).base_version  # 2.15.0.post1 is a re-upload of 2.15.0
        if v not in tf_known and base not in tf_known and Version(v) > tf_oldest:
            add(Finding("tensorflow release", v, None, "on PyPI", _page("tensorflow", v)))
    for v, seen in sorted(metadata["tensorflow"].items(), key=lambda kv: Version(kv[0])):
        release = tf_known.get(v)
        if release is None:
            continue
        cuda, cudnn = tensorflow_cuda(seen["requires_dist"])
        if cuda is None:
            continue
        if cuda != release.cuda or (cudnn and cudnn != release.cudnn):
            add(
                Finding(
                    "tensorflow and-cuda",
                    release.series,
                    f"CUDA {release.cuda}, cuDNN {release.cudnn}",
                    f"CUDA {cuda}, cuDNN {cudnn or '?'} (and-cuda of {seen['wheel']})",
                    _page("tensorflow", v),
                )
            )
    for v, seen in sorted(build_info.items(), key=lambda kv: Version(kv[0])):
        release = tf_known.get(v)
        got = parse_build_info(seen["text"])
        upstream_text = (
            f"CUDA {got['cuda']}, SASS {' '.join(got['archs']) or 'none'}, PTX "
            f"{got['ptx'] or 'none'} (build_info.py of {seen['wheel']})"
        )
        if release is None:
            continue  # a release the data lacks is reported above
        if (list(release.archs), release.ptx, release.kernels_cuda) != (
            got["archs"],
            got["ptx"],
            got["cuda"],
        ):
            data = (
                f"CUDA {release.kernels_cuda}, SASS {' '.join(release.archs)}, PTX "
                f"{release.ptx or 'none'}"
            )
            add(
                Finding(
                    "tensorflow kernels",
                    release.series,
                    data,
                    upstream_text,
                    _page("tensorflow", v),
                )
            )
    return findings


def _cuda_findings(
    matrix: Matrix, versions: dict[str, Any], metadata: dict[str, Any]
) -> list[Finding]:
    """CUDA minors and updates on PyPI that the data lacks, and an update a torch wheel installs
    that has no driver floor."""
    findings: list[Finding] = []
    add = findings.append
    listed = {u.version for c in matrix.cuda_releases for u in c.updates}
    minors = {c.minor for c in matrix.cuda_releases}
    oldest_cuda = min((Version(c.minor) for c in matrix.cuda_releases), default=Version("0"))
    for v in versions["cuda-toolkit"]:
        version = Version(v)
        if version < oldest_cuda:
            continue
        minor = f"{version.major}.{version.minor}"
        if minor not in minors:
            add(
                Finding(
                    "CUDA minor", minor, None, f"cuda-toolkit {v} on PyPI", _page("cuda-toolkit", v)
                )
            )
            minors.add(minor)
        elif v not in listed:
            add(
                Finding(
                    "CUDA update",
                    v,
                    None,
                    f"cuda-toolkit {v} on PyPI (needs its driver floor)",
                    _page("cuda-toolkit", v),
                )
            )
    # a CUDA update a current torch wheel installs must have a driver floor: the resolver cannot
    # place it otherwise
    floors = {u.version: u.min_driver for c in matrix.cuda_releases for u in c.updates}
    for v, seen in sorted(metadata["torch"].items(), key=lambda kv: Version(kv[0])):
        update = torch_cuda_update(seen["requires_dist"])
        if update and update in floors and floors[update] is None:
            add(
                Finding(
                    "CUDA update without driver floor",
                    update,
                    "min_driver unknown",
                    f"torch {v}'s PyPI wheel installs cuda-toolkit {update} ({seen['wheel']})",
                    _page("torch", v),
                )
            )
    return findings


def pending_curation(matrix: Matrix) -> list[str]:
    """The data's own open items: unknown driver floors and facts marked unconfirmed."""
    out = [
        f"CUDA {u.version}: driver floor unknown"
        for c in matrix.cuda_releases
        for u in c.updates
        if u.min_driver is None
    ]
    out += [
        f"CUDA {u.version}: driver floor {u.min_driver} unconfirmed"
        for c in matrix.cuda_releases
        for u in c.updates
        if u.min_driver and not u.confirmed
    ]
    out += [
        f"nvidia/cuda {i.version}: image entry unconfirmed"
        for i in matrix.images
        if not i.confirmed
    ]
    out += [
        f"nvidia/cuda {i.version}: cuDNN tags unconfirmed"
        for i in matrix.images
        if i.cudnn and not i.cudnn.confirmed
    ]
    out += [
        f"torch {t.series} {v.name}: unconfirmed"
        for t in matrix.torch_releases
        for v in t.variants
        if not v.confirmed
    ]
    out += [
        f"driver branch of {b.name} ({', '.join(b.compute_capabilities)}): R{b.branch} unconfirmed"
        for b in matrix.driver_branches
        if not b.confirmed
    ]
    out += [
        f"Python {p.version}.0: release date unconfirmed"
        for p in matrix.python_releases
        if not p.confirmed
    ]
    if matrix.aarch64 is not None:  # the aarch64 builds download.pytorch.org was not read for
        out += [
            f"torch {t.series} {v.name} on {matrix.aarch64.platform}: unconfirmed"
            for t in matrix.aarch64.torch
            for v in t.variants
            if not v.confirmed
        ]
    return out


def newest_upstream(upstream_versions: dict[str, list[str]], matrix: Matrix) -> list[str]:
    """Framework releases on PyPI newer than any in the data (for doctor's one-line warning)."""
    out = []
    for name, releases in (
        ("torch", matrix.torch_releases),
        ("tensorflow", matrix.tensorflow_releases),
    ):
        newest = max((Version(p) for r in releases for p in r.patches), default=Version("0"))
        newer = [
            v
            for v in upstream_versions.get(name, [])
            if Version(v) > newest and Version(v).base_version != str(newest)
        ]
        if newer:
            out.append(f"{name} {newer[-1]}")
    return out


def stale_days(checked: date, today: date) -> int | None:
    """Days since the data was checked, when that is more than STALE_AFTER_DAYS."""
    age = (today - checked).days
    return age if age > STALE_AFTER_DAYS else None
