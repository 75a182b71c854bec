"""The framework wheels a wheelhouse holds, read from their file names: which release, build and
Python each serves (the wheelhouse rule, gpuenv.compat.rules.wheelhouse, keeps the builds they
serve)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

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
