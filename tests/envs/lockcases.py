"""Stacks and probes the envs tests share (imported by name: tests/ is not a package)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from gpuenv.stack import Stack

FIXTURES = Path(__file__).parent / "fixtures"
WHEELHOUSE = Path("/opt/wheels")
CPU_TORCH_WHEEL = WHEELHOUSE / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"

TORCH_CU121 = Stack(
    cuda="12.1", cuda_version="12.1.1", min_driver="530.30.02", base_image="nvidia/cuda:12.1.1-base-ubuntu22.04",
    python="3.11", framework="torch", framework_version="2.5.1", wheel_variant="cu121",
    index_url="https://download.pytorch.org/whl/cu121", pip_requirement="torch==2.5.1+cu121",
)
TORCH_CPU = Stack(
    cuda="cpu", cuda_version=None, min_driver=None, base_image="ubuntu:22.04", python="3.11", framework="torch",
    framework_version="2.13.0", wheel_variant="cpu", index_url="https://download.pytorch.org/whl/cpu",
    pip_requirement="torch==2.13.0+cpu",
)
TF_CUDA = Stack(
    cuda="12.2", cuda_version="12.2.2", min_driver="535.104.05", base_image="nvidia/cuda:12.2.2-base-ubuntu22.04",
    python="3.11", framework="tensorflow", framework_version="2.15.1", wheel_variant=None, index_url=None,
    pip_requirement="tensorflow[and-cuda]==2.15.1",
)
TF_CPU = Stack(
    cuda="cpu", cuda_version=None, min_driver=None, base_image="ubuntu:22.04", python="3.11", framework="tensorflow",
    framework_version="2.15.1", wheel_variant=None, index_url=None, pip_requirement="tensorflow-cpu==2.15.1",
)
ALL_STACKS = {"torch-cu121": TORCH_CU121, "torch-cpu": TORCH_CPU, "tf-cuda": TF_CUDA, "tf-cpu": TF_CPU}


def unreachable(url: str, timeout: float = 10) -> str | None:
    """None when `url` answers over HTTP(S), else why not (for a skip reason that says what failed)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # it answered, even if with an error status
    except (urllib.error.URLError, OSError) as err:
        return f"{url} did not answer ({getattr(err, 'reason', err)})"
