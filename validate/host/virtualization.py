"""Where a GPU runs (bare metal, pass-through, a vGPU guest, a vGPU hypervisor), its vGPU
licence, and memory with the driver's reserve apart, read through the NVML module it is given
(validate/host/nvml.py passes pynvml or a replay; nothing here imports pynvml).

NVML's enums: nvmlGpuVirtualizationMode_t and nvmlHostVgpuMode_t
(https://docs.nvidia.com/deploy/nvml-api/api/group__nvmlVirtualGpuEnums.html); the licence from
nvmlDeviceGetGridLicensableFeatures (featureState non-zero when licensed); memory from
nvmlDeviceGetMemoryInfo with nvmlMemory_v2 (`reserved` apart from `used`).
"""

from __future__ import annotations

from typing import Any, Callable

#: nvmlGpuVirtualizationMode_t and nvmlHostVgpuMode_t values, named as nvidia-smi prints them.
VIRTUALIZATION_MODES = {0: "None", 1: "Pass-Through", 2: "VGPU", 3: "Host VGPU", 4: "Host VSGA"}
HOST_VGPU_MODES = {0: "Non SR-IOV", 1: "SR-IOV"}
#: The modes of a hypervisor running NVIDIA's vGPU manager: it serves vGPUs, it runs no CUDA.
HYPERVISOR_MODES = ("Host VGPU", "Host VSGA")

Field = Callable[[Callable[[], Any]], Any]


def read_virtualization(nv: Any, handle: Any, field: Field) -> tuple[str | None, str | None]:
    """(virtualization mode, host vGPU mode) as nvidia-smi names them; None where not answered."""
    mode = field(lambda: nv.nvmlDeviceGetVirtualizationMode(handle))
    host = field(lambda: nv.nvmlDeviceGetHostVgpuMode(handle))
    return (
        None if mode is None else VIRTUALIZATION_MODES.get(int(mode), str(mode)),
        None if host is None else HOST_VGPU_MODES.get(int(host), str(host)),
    )


def read_vgpu_license(
    nv: Any, handle: Any, field: Field, text: Callable[[Any], str]
) -> tuple[bool | None, str | None]:
    """(licensed, "product: status words") of the enabled licensable feature; (None, None) where
    the GPU has no licence to hold (bare metal) or the driver does not say."""
    features = field(lambda: nv.nvmlDeviceGetGridLicensableFeatures(handle))
    if features is None or not getattr(features, "isGridLicenseSupported", 0):
        return None, None
    listed = list(getattr(features, "gridLicensableFeatures", []) or [])
    count = int(getattr(features, "licensableFeaturesCount", len(listed)) or 0)
    for feature in listed[:count]:
        if getattr(feature, "featureEnabled", 1):
            licensed = bool(getattr(feature, "featureState", 0))
            words = text(getattr(feature, "licenseInfo", "") or "") or (
                "Licensed" if licensed else "Unlicensed"
            )
            product = text(getattr(feature, "productName", "") or "")
            return licensed, f"{product}: {words}" if product else words
    return None, None


def memory_v2_info(nv: Any, handle: Any, field: Field) -> Any:
    """nvmlDeviceGetMemoryInfo version 2 (reserve apart), or None where it is not answered (old
    drivers, old nvidia-ml-py, a capture without "Reserved")."""
    version = getattr(nv, "nvmlMemory_v2", None)
    return None if version is None else field(lambda: nv.nvmlDeviceGetMemoryInfo(handle, version))


def hypervisor_reason(
    gpu_index: int | None, mode: str, host_mode: str | None, cuda: str | None
) -> str:
    """Why a vGPU hypervisor is not a CUDA host for containers, in one line (replay and doctor)."""
    who = "this host" if gpu_index is None else f"GPU {gpu_index}"
    host = f", Host VGPU Mode {host_mode}" if host_mode else ""
    driver_cuda = "CUDA Version: Not Found" if cuda is None else f"CUDA {cuda}"
    return (
        f"not a CUDA host for containers: {who} is driven by the NVIDIA vGPU manager of a "
        f"hypervisor (Virtualization Mode {mode}{host}; {driver_cuda}): it serves vGPUs to VMs "
        "and runs no CUDA itself; validate and build inside a VM given a vGPU (or pass the GPU "
        "through)"
    )
