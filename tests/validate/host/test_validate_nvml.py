"""NVML on this host: a value or the exact reason, never an exception."""

from __future__ import annotations

import importlib.util

import pytest
from outsidecauses import nvml_library_present

from validate.host import nvml

NO_DRIVER = "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"


def test_read_host_never_raises_and_serialises():
    host = nvml.read_host()
    data = host.to_dict()
    assert set(data) == {"driver_version", "cuda_driver_version", "gpus", "unreadable", "error"}
    # What to expect is decided by the library on disk, not by what read_host answered.
    if nvml_library_present():
        assert host.error is None and host.driver_version, host.error
    else:
        assert (host.error, host.gpus, host.driver_version) == (NO_DRIVER, [], None)


@pytest.mark.skipif(
    nvml_library_present(), reason="libnvidia-ml.so.1 is present: this host has an NVIDIA driver"
)
def test_without_driver_the_reason_is_exact():
    assert importlib.util.find_spec("pynvml") is not None, (
        "nvidia-ml-py must be installed for this test"
    )
    host = nvml.read_host()
    assert host.error == NO_DRIVER
    assert nvml.gpu_used_memory("GPU-00000000-0000-0000-0000-000000000000", None) is None
    assert nvml.process_used_memory(1, "GPU-00000000-0000-0000-0000-000000000000", None) is None


@pytest.mark.gpu
@pytest.mark.skipif(
    not nvml_library_present(), reason="libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"
)
def test_with_driver_every_gpu_is_described():
    host = nvml.read_host()
    assert host.error is None, host.error
    assert host.driver_version and host.cuda_driver_version
    for gpu in host.gpus:
        assert gpu.uuid.startswith(("GPU-", "MIG-"))
        assert gpu.memory_total_bytes > 0
        assert gpu.compute_capability and "." in gpu.compute_capability


def test_nvml_is_imported_only_by_validate_nvml():
    """One module owns NVML (docs/CONTRACTS.md)."""
    from pathlib import Path

    root = Path(nvml.__file__).resolve().parent.parent
    offenders = [
        str(path.relative_to(root))
        for folder in ("validate", "gpuenv")
        if (root / folder).is_dir()
        for path in (root / folder).rglob("*.py")
        if path.name != "nvml.py"
        and (
            "import pynvml" in path.read_text(encoding="utf-8")
            or "from pynvml" in path.read_text(encoding="utf-8")
        )
    ]
    assert offenders == []
