"""The driver gate: is this host's NVIDIA driver new enough for the image's CUDA?

The NVIDIA container toolkit's own gate (NVIDIA_REQUIRE_CUDA) is skipped when Docker injects GPUs
through CDI, so the suite's first check repeats it. Pure functions on version strings, shared with
the image's start-up check. Driver versions look like 535.104.05 (or 550.54): compared as tuples
of integers, so 535.104.05 < 535.129.03 < 550.54.
"""

from __future__ import annotations

import re

_VERSION = re.compile(r"^\s*(\d+(?:\.\d+)*)\s*$")


def version_tuple(version: str) -> tuple[int, ...] | None:
    """'535.104.05' -> (535, 104, 5); None when the text is not dotted numbers."""
    match = _VERSION.match(version or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def driver_too_old(driver: str, min_driver: str, suggest_cuda: str | None = None) -> str | None:
    """The one-line complaint when `driver` is older than `min_driver`, else None.

    `suggest_cuda` is the newest CUDA this driver runs (NVML's CUDA driver version): the stack
    the user could build instead. Unparseable versions are not judged (None).
    """
    have, need = version_tuple(driver), version_tuple(min_driver)
    if have is None or need is None or have >= need:
        return None
    fix = f"upgrade, or build for --cuda {suggest_cuda}" if suggest_cuda else "upgrade the driver"
    return f"driver {driver.strip()} is older than {min_driver.strip()} needed by this image: {fix}"
