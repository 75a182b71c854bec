"""The wheelhouse rule: the framework wheels a folder holds, and only the builds they serve."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.rules.frameworks import Candidate, version_list
from gpuenv.compat.rules.wishes import Wishes
from gpuenv.errors import NoCompatibleStack

_LINUX_X86 = re.compile(r"^(manylinux\w*|linux)_x86_64$")


@dataclass(frozen=True)
class WheelBuild:
    """A framework wheel a wheelhouse holds: which release, build and Python it serves."""

    filename: str
    framework: str
    version: str  # public version, e.g. 2.13.0
    local: str | None  # cpu, cu126, ... (torch); None for a PyPI wheel
    python: str | None  # 3.11 for cp311, None for py3/abi3
    platform: str  # first platform tag
    linux_x86_64: bool

    def describe(self) -> str:
        local = f"+{self.local}" if self.local else ""
        py = f"cp{self.python.replace('.', '')}" if self.python else "any Python"
        return f"{self.framework} {self.version}{local} ({py}, {self.platform})"


def framework_wheels(names: Iterable[str], framework: str) -> list[WheelBuild]:
    """The wheels of `framework` among file names (tensorflow also as tensorflow_cpu), read with
    packaging."""
    # imported here: packaging's tags read the platform, which a resolve without wheels skips
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    wanted = {"torch": ("torch",), "tensorflow": ("tensorflow", "tensorflow-cpu")}[framework]
    out = []
    for filename in names:
        if not filename.endswith(".whl"):
            continue
        try:
            name, version, _build, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if name not in wanted:
            continue
        tag = sorted(tags, key=str)[0]
        python = None
        if re.fullmatch(r"cp3\d+", tag.interpreter) and tag.abi != "abi3":
            python = f"3.{tag.interpreter[3:]}"
        platforms = sorted({t.platform for t in tags})
        label = "tensorflow-cpu" if name == "tensorflow-cpu" else framework
        out.append(
            WheelBuild(
                filename,
                label,
                version.public,
                version.local,
                python,
                platforms[0],
                any(_LINUX_X86.match(p) for p in platforms),
            )
        )
    return out


def _wheel_serves(w: WheelBuild, c: Candidate, framework: str) -> bool:
    if not w.linux_x86_64 or w.version != c.framework_version:
        return False
    if w.python is not None and w.python != c.python:
        return False
    if framework == "torch":
        assert c.variant is not None
        return w.local == c.variant.name
    return (w.framework == "tensorflow-cpu") == (c.cuda is None)


def _pypi_torch_candidates(
    matrix: Matrix, c: Candidate, wheels: list[WheelBuild]
) -> list[Candidate]:
    """A PyPI torch wheel (no +local) is the build of its release's pypi_default_cuda."""
    out = []
    for w in wheels:
        if (
            w.local is None
            and w.linux_x86_64
            and w.version == c.framework_version
            and (w.python in (None, c.python))
        ):
            release = next(t for t in matrix.torch_releases if c.framework_version in t.patches)
            if c.variant is not None and release.pypi_default_cuda == c.variant.cuda:
                out.append(replace(c, from_pypi=True))
    return out


def narrow_to_wheelhouse(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """With a wheelhouse that holds the framework, only the releases, builds and Pythons it holds;
    a note for the reasons either way."""
    if w.request.wheelhouse is None:
        return cands
    folder = w.request.wheelhouse_dir or "the wheelhouse"
    wheels = framework_wheels(w.request.wheelhouse or (), w.framework)
    if not wheels:
        w.notes.append(
            f"wheelhouse {folder} holds no {w.name} wheel: the framework comes from its index"
        )
        return cands
    if w.python:
        cands = [c for c in cands if c.python == w.python] or cands
    kept = [c for c in cands if any(_wheel_serves(wheel, c, w.framework) for wheel in wheels)]
    if w.framework == "torch":
        kept += [p for c in cands for p in _pypi_torch_candidates(w.matrix, c, wheels)]
    if not kept:
        holds = "; ".join(wheel.describe() for wheel in wheels)
        wanted = version_list(c.python for c in cands)
        versions = version_list(c.framework_version for c in cands)
        raise NoCompatibleStack(
            f"wheelhouse {folder} holds {holds}, but {w.what} needs one of {versions} for Python "
            f"{wanted} on Linux x86_64",
            fix="add the wheel, or pin the release and Python the folder holds "
            "(--torch/--tensorflow, --python)",
        )
    held = ", ".join(sorted({wheel.describe() for wheel in wheels}))
    w.notes.append(
        f"wheelhouse {folder}: only the {w.name} builds it holds ({held}) are considered"
    )
    return kept
