"""What the user asks for: `Request`, and the parsing of each option into a value the rules use
(a BadInput naming the fix otherwise)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Iterable

from gpuenv.compat.matrix import Matrix, version_key as V
from gpuenv.errors import BadInput
from gpuenv.stack import CPU, FRAMEWORKS

_FRAMEWORK_ALIASES = {"torch": "torch", "pytorch": "torch", "tensorflow": "tensorflow", "tf": "tensorflow"}
_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}


@dataclass(frozen=True)
class Request:
    """What the user wants; every field optional. Values are raw strings as typed on the command line.

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


def parse_cuda(value: str | None, matrix: Matrix) -> str | None:
    """'12.1' / '12.1.1' / 'cpu' -> '12.1' / 'cpu'; anything else is a BadInput naming the fix."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    if text in (CPU, "none"):
        return CPU
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    known = ", ".join(c.minor for c in sorted(matrix.cuda_releases, key=lambda c: V(c.minor)))
    if not match:
        raise BadInput(f"--cuda {value!r} is not a CUDA version", fix=f"use X.Y such as 12.4 (known: {known}) or 'cpu'")
    minor = f"{int(match[1])}.{int(match[2])}"
    if matrix.cuda_release(minor) is None:
        raise BadInput(f"--cuda {value}: no CUDA {minor} release is known", fix=f"use one of {known}, or 'cpu'")
    return minor


def parse_driver(value: str | None, source: str = "--driver") -> str | None:
    if value is None or value == "":
        return None
    text = str(value).strip()
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
        raise BadInput(f"{source} {value!r} is not an NVIDIA driver version", fix="give it as nvidia-smi shows it, e.g. 535.104.05")
    return text


def parse_framework(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    name = _FRAMEWORK_ALIASES.get(str(value).strip().lower())
    if name is None:
        raise BadInput(f"--framework {value!r} is not supported", fix=f"use one of {', '.join(FRAMEWORKS)}")
    return name


def parse_python(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    match = re.fullmatch(r"(?:py|python)?\s*(\d+)\.(\d+)(?:\.\d+)?", str(value).strip().lower())
    if not match:
        raise BadInput(f"--python {value!r} is not a Python version", fix="use X.Y such as 3.11")
    return f"{int(match[1])}.{int(match[2])}"


def parse_gpu_arch(value: str, matrix: Matrix) -> str:
    """'8.6', 'sm_86', '86', 'compute_90' -> '8.6'; unknown capabilities are a BadInput."""
    text = str(value).strip().lower()
    match = re.fullmatch(r"(\d+)\.(\d+)", text) or re.fullmatch(r"(?:sm_|compute_)?(\d+?)(\d)a?", text)
    known = sorted({cc for a in matrix.gpu_architectures for cc in a.compute_capabilities}, key=V)
    if not match:
        raise BadInput(f"--gpu-arch {value!r} is not a compute capability", fix="use X.Y such as 8.6, or sm_86")
    cc = f"{int(match[1])}.{int(match[2])}"
    if matrix.architecture_of(cc) is None:
        raise BadInput(f"--gpu-arch {value}: compute capability {cc} is not known", fix=f"use one of {', '.join(known)}")
    return cc


def split_arch_list(values: Iterable[str] | str | None) -> list[str]:
    """Accept '8.0,8.6' or ['8.0', '8.6'] alike."""
    if not values:
        return []
    items = [values] if isinstance(values, str) else list(values)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]
