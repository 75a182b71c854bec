"""Matching framework devices to NVML's GPUs: PyTorch by UUID, TensorFlow by PCI bus id."""

from __future__ import annotations

from typing import Any

from validate.host.masking import expected_visible, normalise_pci_bus_id
from validate.host.nvml import GpuInfo

#: Largest relative error a small float32 product may have (TF32 included) to count as correct.
MAX_RELATIVE_ERROR = 1e-2


def uuid_body(uuid: str) -> str:
    """The UUID without NVML's "GPU-" / "MIG-" prefix: PyTorch prints only the body, for whole
    GPUs and MIG instances alike, so devices are matched on the body."""
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


def nvml_uuid(body: str, nvml_uuids: list[str]) -> str:
    """A framework's UUID written as NVML writes it: the matching NVML UUID (GPU- or MIG-), or
    "GPU-<body>" when NVML lists no such device (never rewrite a MIG instance as a GPU)."""
    wanted = uuid_body(body)
    for uuid in nvml_uuids:
        if uuid_body(uuid) == wanted:
            return uuid
    return body if body.upper().startswith(("GPU-", "MIG-")) else f"GPU-{body}"


def all_nvml_uuids(gpus: list[GpuInfo]) -> list[str]:
    """Every device NVML knows: whole GPUs and their MIG instances."""
    return [gpu.uuid for gpu in gpus] + [mig.uuid for gpu in gpus for mig in gpu.mig_devices]


def torch_uuid(torch: Any, index: int, nvml_uuids: list[str] | None = None) -> str:
    """PyTorch's UUID of device `index`, written as NVML writes it."""
    return nvml_uuid(str(torch.cuda.get_device_properties(index).uuid), nvml_uuids or [])


def device_for_gpu(gpu: GpuInfo, visible: list[str]) -> int | None:
    """The framework index that runs on this NVML GPU: the GPU itself, or the one MIG instance
    of it that CUDA_VISIBLE_DEVICES selected; None when the process cannot see it."""
    own = {uuid_body(gpu.uuid)} | {uuid_body(m.uuid) for m in gpu.mig_devices}
    for index, uuid in enumerate(visible):
        if uuid_body(uuid) in own:
            return index
    return None


def torch_gpus(torch: Any, nvml_uuids: list[str] | None = None) -> list[str]:
    """UUIDs of the GPUs this PyTorch process sees, in its own index order (NVML's spelling)."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return []
    return [torch_uuid(torch, i, nvml_uuids) for i in range(torch.cuda.device_count())]


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


def visible_gpus(gpus: list[GpuInfo], caller_mask: str | None) -> list[GpuInfo]:
    """The GPUs (NVML's) that a caller's CUDA_VISIBLE_DEVICES lets a run use, in the order CUDA
    numbers them: the first is a child's device 0. A GPU counts when it or one of its MIG
    instances is named. Children of the suite only ever narrow this set."""
    owner = {g.uuid: g for g in gpus} | {m.uuid: g for g in gpus for m in g.mig_devices}
    named = expected_visible(
        caller_mask, [g.uuid for g in gpus], [m.uuid for g in gpus for m in g.mig_devices]
    )
    out: list[GpuInfo] = []
    for uuid in named:
        if all(owner[uuid] is not seen for seen in out):
            out.append(owner[uuid])
    return out
