"""Matching framework devices to NVML's GPUs: PyTorch by UUID, TensorFlow by PCI bus id."""

from __future__ import annotations

from typing import Any

from validate.masking import normalise_pci_bus_id
from validate.nvml import GpuInfo

#: Largest relative error a small float32 product may have (TF32 included) to count as correct.
MAX_RELATIVE_ERROR = 1e-2


def torch_uuid(torch: Any, index: int) -> str:
    """PyTorch prints UUIDs without NVML's "GPU-" prefix; add it so they compare equal."""
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def torch_gpus(torch: Any) -> list[str]:
    """UUIDs of the GPUs this PyTorch process sees, in its own index order."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return []
    return [torch_uuid(torch, i) for i in range(torch.cuda.device_count())]


def compiled_archs(torch: Any) -> list[str]:
    """The CUDA architectures PyTorch was compiled for, read even when no GPU is usable
    (torch.cuda.get_arch_list() returns [] then, which would hide what the build ships)."""
    if torch.version.cuda is None:
        return []
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    text = flags() if flags else None
    return text.split() if text else torch.cuda.get_arch_list()


def uuid_by_pci(gpus: list[GpuInfo]) -> dict[str, str]:
    return {normalise_pci_bus_id(gpu.pci_bus_id): gpu.uuid for gpu in gpus}


def tf_gpu_uuids(tf_gpus: list[dict[str, Any]], gpus: list[GpuInfo]) -> list[str]:
    """TensorFlow's GPUs (from the probe) as NVML UUIDs; unknown bus ids stay as "pci:<id>"."""
    by_pci = uuid_by_pci(gpus)
    out = []
    for dev in tf_gpus:
        bus = dev.get("pci_bus_id")
        key = normalise_pci_bus_id(bus) if bus else None
        out.append(by_pci.get(key, f"pci:{bus}") if key else "pci:unknown")
    return out
