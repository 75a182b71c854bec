"""nvidia-smi's values as numbers and flags (pure, stdlib only), shared by every section parser.

A value nvidia-smi could not read is printed as "N/A" (NVML answered NotSupported) or as the
error itself ("GPU is lost"); both read here as None or as the NVML error, never as 0 or "no".
"""

from __future__ import annotations

import re

#: nvidia-smi's words for a value it could not read, and the NVML error each stands for.
ERROR_WORDS = {
    "gpu is lost": "NVMLError_GpuIsLost",
    "unknown error": "NVMLError_Unknown",
    "insufficient permissions": "NVMLError_NoPermission",
    "gpu requires reset": "NVMLError_ResetRequired",
}
#: nvidia-smi's words for "not reported" (NVML NotSupported, or a field this driver lacks).
NOT_AVAILABLE = {"", "n/a", "[n/a]", "not supported", "[not supported]", "none", "requested functionality has been deprecated"}


def error_of(text: str | None) -> str | None:
    """The NVML error nvidia-smi printed in place of a value ("GPU is lost", "[Unknown Error]")."""
    return ERROR_WORDS.get((text or "").strip().strip("[]").strip().lower())


def not_available(text: str | None) -> bool:
    """True for nvidia-smi's "N/A" / "Not Supported": the driver did not report the value."""
    return (text or "").strip().lower() in NOT_AVAILABLE - {"", "none"}


def number(text: str | None) -> float | None:
    """'40960 MiB' -> 40960.0, '16x' -> 16, '400.00 W' -> 400.0; None when not a number."""
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text or "")
    return float(match.group(1)) if match else None


def to_bytes(text: str | None) -> int | None:
    """'98 MiB' -> bytes; old drivers print 'MB' for MiB-sized figures, read as decimal here."""
    value = number(text)
    if value is None:
        return None
    unit = (text or "").split()[-1].lower() if len((text or "").split()) > 1 else "mib"
    scale = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9}.get(unit, 2**20)
    return int(value * scale)


def yes(text: str | None) -> bool | None:
    """'Enabled'/'Active'/'Yes' -> True, 'Disabled'/'Not Active'/'No' -> False, else None."""
    word = (text or "").strip().lower()
    if word in ("yes", "enabled", "active", "true"):
        return True
    if word in ("no", "disabled", "not active", "false"):
        return False
    return None
