"""CUDA 11 hosts: the resolver's stack, the image's start-up gate (docker/entrypoint.sh, run by the
real /bin/sh) and NVIDIA_REQUIRE_CUDA agree on the minor-version-compatibility floor (450.80.02).

The /proc/driver/nvidia/version lines use the proprietary module's format (recorded lines of real
hosts are in tests/images/test_entrypoint.py); only the version differs.
"""

from __future__ import annotations

import os
import subprocess
from datetime import date
from pathlib import Path

import pytest

from gpuenv import PROJECT_ROOT
from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.request import Request
from gpuenv.images.plan import cuda_driver_floors, require_cuda

ENTRYPOINT = PROJECT_ROOT / "docker" / "entrypoint.sh"


def _proc(version: str) -> str:
    return (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Wed Oct 27 01:15:15 UTC 2021\n"
    )


def _start(tmp_path: Path, driver: str, stack) -> subprocess.CompletedProcess:
    version_file = tmp_path / "version"
    version_file.write_text(_proc(driver))
    env = {
        "PATH": os.environ["PATH"],
        "GPUENV_MIN_DRIVER": stack.min_driver,
        "GPUENV_CUDA_FLOORS": cuda_driver_floors(stack),
        "GPUENV_DRIVER_VERSION_FILE": str(version_file),
    }
    return subprocess.run(
        ["/bin/sh", str(ENTRYPOINT), "echo", "started"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_t4_on_470_gets_a_cuda11_image_whose_gates_let_it_start(tmp_path, framework):
    stack = resolve_stack(
        Request(
            driver="470.82.01", gpu_archs=("7.5",), framework=framework, today=date(2026, 11, 23)
        )
    )
    assert (stack.cuda, stack.min_driver) == ("11.8", "450.80.02")
    assert require_cuda(stack) == "cuda>=11.0,driver>=450.80.02"
    started = _start(tmp_path, "470.82.01", stack)
    assert (started.returncode, started.stdout.strip()) == (0, "started"), started.stderr
    # the lowest driver of CUDA 11's minor-version compatibility starts it too; one below it does
    # not
    assert _start(tmp_path, "450.80.02", stack).returncode == 0
    refused = _start(tmp_path, "450.57", stack)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "driver 450.57 is older than 450.80.02 needed by this image" in refused.stderr
    assert "invoke resolve --driver 450.57" in refused.stderr
