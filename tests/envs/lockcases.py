"""Stacks and probes the envs tests share (imported by name: tests/ is not a package)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from stackcases import TF_CPU, TF_CUDA, TORCH_CPU, TORCH_CU121  # re-exported for the envs tests

FIXTURES = Path(__file__).parent / "fixtures"
WHEELHOUSE = Path("/opt/wheels")
CPU_TORCH_WHEEL = WHEELHOUSE / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"

ALL_STACKS = {
    "torch-cu121": TORCH_CU121,
    "torch-cpu": TORCH_CPU,
    "tf-cuda": TF_CUDA,
    "tf-cpu": TF_CPU,
}


def unreachable(url: str, timeout: float = 10) -> str | None:
    """None when `url` answers over HTTP(S), else why not (for a skip reason that says what
    failed)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # it answered, even if with an error status
    except (urllib.error.URLError, OSError) as err:
        return f"{url} did not answer ({getattr(err, 'reason', err)})"
