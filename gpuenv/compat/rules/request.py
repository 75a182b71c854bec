"""What the user asks for: `Request`, and the parsing of each option into a value the rules use
(a BadInput naming the fix otherwise)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Iterable

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.matrix import version_key as V
from gpuenv.errors import BadInput
from gpuenv.stack import CPU, FRAMEWORKS, LINUX_64, LINUX_AARCH64, platform_of_machine

_FRAMEWORK_ALIASES = {
    "torch": "torch",
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "tf": "tensorflow",
}
FRAMEWORK_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}


@dataclass(frozen=True)
class Request:
    """What the user wants; every field optional. Values are raw strings as typed on the command
    line.

    `wheelhouse` holds the file names of a wheel folder (None: no wheelhouse), `wheelhouse_dir`
    its path for messages; `today` fixes the date for the default-Python rule (tests).
    """

    driver: str | None = None
    cuda: str | None = None
    framework: str | None = None
    torch: str | None = None
    tensorflow: str | None = None
    python: str | None = None
    gpu_archs: tuple[str, ...] = ()
    driver_source: str = "--driver"
    strict_driver: bool = False
    wheelhouse: tuple[str, ...] | None = None
    wheelhouse_dir: str | None = None
    today: date | None = None
    #: False for the re-resolutions behind suggestions (their own suggestions are not needed).
    explain: bool = True
    #: Where a value came from when not the command line, by field ("invoke.yaml: gpuenv.torch",
    #: "the GPUs of --host x.xml"): an error blames that, not an option nobody typed.
    origins: tuple[tuple[str, str], ...] = ()
    #: The CPU architecture to plan for (linux-64, linux-aarch64; None: linux-64), and how it was
    #: known: "--platform", "inferred from the GPU: ...", "this host (platform.machine() aarch64)".
    platform: str | None = None
    platform_source: str = "--platform"

    def blame(self, key: str) -> str:
        """What an error about field `key` names: its origin, or the command-line option."""
        return dict(self.origins).get(key) or {"gpu_archs": "--gpu-arch"}.get(key, "--" + key)

    def change(self, key: str, value: object) -> str | None:
        """A fix's change of field `key` in the place its value came from: "set gpuenv.python:
        "3.11" in invoke.yaml", "unset INVOKE_GPUENV_TORCH", "use --gpu-arch 8.0 instead of the GPUs
        of --host x.xml"; None for a value from the command line (the caller names the option). A
        fix never points at an option nobody typed."""
        origin = dict(self.origins).get(key)
        if origin is None:
            return None
        dropped = value is None or value is False or value == ()
        shown = ",".join(value) if isinstance(value, tuple) else str(value)
        file, sep, setting = origin.partition(": ")
        if sep and setting.startswith("gpuenv."):  # a config file and its key
            return (
                f"remove {setting} from {file}"
                if dropped
                else f'set {setting}: "{shown}" in {file}'
            )
        if origin.startswith("INVOKE_"):  # an environment variable
            return f"unset {origin}" if dropped else f"set {origin}={shown}"
        option = {"gpu_archs": "--gpu-arch"}.get(key, "--" + key.replace("_", "-"))
        return (
            f"use {option} to replace {origin}"
            if dropped
            else f"use {option} {shown} instead of {origin}"
        )

    def provenance(self) -> str:
        """Where the values not typed as options came from, for an error's message: "python 3.14
        from invoke.yaml: gpuenv.python, torch 2.0 from invoke.yaml: gpuenv.torch" ("" for none)."""
        shown = []
        for key, origin in self.origins:
            value = getattr(self, key, None)
            if value not in (None, "", ()):
                shown.append(
                    f"{key} {','.join(value) if isinstance(value, tuple) else value} from {origin}"
                )
        return ", ".join(shown)


def parse_cuda(value: str | None, matrix: Matrix, option: str = "--cuda") -> str | None:
    """'12.1' / '12.1.1' / 'cpu' -> '12.1' / 'cpu'; anything else is a BadInput naming the fix."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    if text in (CPU, "none"):
        return CPU
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    known = ", ".join(c.minor for c in sorted(matrix.cuda_releases, key=lambda c: V(c.minor)))
    if not match:
        raise BadInput(
            f"{option} {value!r} is not a CUDA version",
            fix=f"use X.Y such as 12.4 (known: {known}) or 'cpu'",
        )
    minor = f"{int(match[1])}.{int(match[2])}"
    if matrix.cuda_release(minor) is None:
        raise BadInput(
            f"{option} {value}: no CUDA {minor} release is known",
            fix=f"use one of {known}, or 'cpu'",
        )
    return minor


def parse_platform(value: str | None, option: str = "--platform") -> str:
    """'linux-aarch64' / 'aarch64' / 'arm64' -> linux-aarch64, 'linux-64' / 'x86_64' -> linux-64
    (None: linux-64); anything else is a BadInput naming the fix."""
    if value is None or value == "":
        return LINUX_64
    text = str(value).strip().lower()
    if text in (LINUX_64, LINUX_AARCH64):
        return text
    found = platform_of_machine(text)
    if found is None:
        raise BadInput(
            f"{option}: unknown platform {value!r}", fix=f"use one of {LINUX_64}, {LINUX_AARCH64}"
        )
    return found


def parse_driver(value: str | None, source: str = "--driver") -> str | None:
    if value is None or value == "":
        return None
    text = str(value).strip()
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
        raise BadInput(
            f"{source} {value!r} is not an NVIDIA driver version",
            fix="give it as nvidia-smi shows it, e.g. 535.104.05",
        )
    return text


def parse_framework(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    name = _FRAMEWORK_ALIASES.get(str(value).strip().lower())
    if name is None:
        raise BadInput(
            f"--framework {value!r} is not supported", fix=f"use one of {', '.join(FRAMEWORKS)}"
        )
    return name


def parse_python(value: str | None, option: str = "--python") -> str | None:
    if value is None or value == "":
        return None
    match = re.fullmatch(r"(?:py|python)?\s*(\d+)\.(\d+)(?:\.\d+)?", str(value).strip().lower())
    if not match:
        raise BadInput(f"{option} {value!r} is not a Python version", fix="use X.Y such as 3.11")
    return f"{int(match[1])}.{int(match[2])}"


def parse_gpu_arch(value: str, matrix: Matrix, option: str = "--gpu-arch") -> str:
    """'8.6', 'sm_86', '86', 'compute_90' -> '8.6'; unknown capabilities are a BadInput."""
    text = str(value).strip().lower()
    match = re.fullmatch(r"(\d+)\.(\d+)", text) or re.fullmatch(
        r"(?:sm_|compute_)?(\d+?)(\d)a?", text
    )
    known = sorted({cc for a in matrix.gpu_architectures for cc in a.compute_capabilities}, key=V)
    if not match:
        raise BadInput(
            f"{option} {value!r} is not a compute capability", fix="use X.Y such as 8.6, or sm_86"
        )
    cc = f"{int(match[1])}.{int(match[2])}"
    if matrix.architecture_of(cc) is None:
        raise BadInput(
            f"{option} {value}: compute capability {cc} is not known",
            fix=f"use one of {', '.join(known)}",
        )
    return cc


def split_arch_list(values: Iterable[str] | str | None) -> list[str]:
    """Accept '8.0,8.6' or ['8.0', '8.6'] alike."""
    if not values:
        return []
    items = [values] if isinstance(values, str) else list(values)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]
