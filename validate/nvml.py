"""Everything gpuenv reads from the NVIDIA driver, through NVML (the only module that imports pynvml).

It runs on bare hosts and inside images where only `validate/` is copied, so it needs nothing but
the stdlib and nvidia-ml-py. Like torch/utils/collect_env.py it never crashes: when NVML cannot be
used, `HostInfo.error` says why, and each optional per-GPU field that one driver or GPU does not
support stays None rather than failing the whole read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, TypeVar

T = TypeVar("T")

#: NVML's clock-event ("throttle") reason bits, named as nvidia-smi prints them.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

#: Reasons that mean the GPU is held below its clocks by something wrong (heat, power, hardware).
BAD_THROTTLE_REASONS = frozenset(
    {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


@dataclass
class GpuInfo:
    """One GPU as NVML reports it; optional fields are None where the driver or GPU cannot say."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str
    compute_capability: str | None
    memory_total_bytes: int
    memory_used_bytes: int
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    power_limit_watts: float | None = None
    throttle_reasons: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HostInfo:
    """The driver and its GPUs; `error` says why NVML could not be read (then the rest is empty)."""

    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
            "error": self.error,
        }


def _text(value: Any) -> str:
    """Old pynvml releases return bytes, new ones str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(probe: Callable[[], T]) -> T | None:
    """One optional NVML query: its value, or None when this GPU/driver does not support it."""
    try:
        return probe()
    except Exception:  # NVMLError_NotSupported, _NoPermission, missing symbol in an old driver ...
        return None


def cuda_version_text(encoded: int) -> str:
    """NVML encodes the CUDA version the driver supports as 1000*major + 10*minor (12040 -> 12.4)."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def throttle_reason_names(mask: int) -> list[str]:
    """Decode NVML's clock-event bitmask into names (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(hex(unknown))
    return names


def _init() -> tuple[Any, str | None]:
    """Import pynvml and initialise NVML: (module, None) or (None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return None, "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"
    except pynvml.NVMLError_DriverNotLoaded:
        return None, "NVML: the NVIDIA kernel driver is not loaded (is the GPU passed into this container?)"
    except pynvml.NVMLError_NoPermission:
        return None, "NVML: no permission to open the GPU device files (/dev/nvidia*)"
    except pynvml.NVMLError as err:
        return None, f"NVML: initialisation failed: {err}"
    return pynvml, None


def _read_gpu(nv: Any, index: int) -> GpuInfo:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    memory = nv.nvmlDeviceGetMemoryInfo(handle)
    capability = _optional(lambda: nv.nvmlDeviceGetCudaComputeCapability(handle))
    ecc_mode = _optional(lambda: nv.nvmlDeviceGetCurrentEccMode(handle))
    power_mw = _optional(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
    reasons = _optional(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle))
    if reasons is None:
        reasons = _optional(lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
    return GpuInfo(
        index=index,
        name=_text(nv.nvmlDeviceGetName(handle)),
        uuid=_text(nv.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_text(nv.nvmlDeviceGetPciInfo(handle).busId),
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        memory_total_bytes=int(memory.total),
        memory_used_bytes=int(memory.used),
        ecc_enabled=None if ecc_mode is None else bool(ecc_mode),
        ecc_uncorrected_volatile=_optional(
            lambda: int(
                nv.nvmlDeviceGetTotalEccErrors(
                    handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
                )
            )
        ),
        pcie_link_gen=_optional(lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        pcie_link_gen_max=_optional(lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        pcie_link_width=_optional(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        pcie_link_width_max=_optional(lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        power_limit_watts=None if power_mw is None else power_mw / 1000.0,
        throttle_reasons=None if reasons is None else throttle_reason_names(int(reasons)),
    )


def read_host() -> HostInfo:
    """Driver, CUDA driver version and every GPU; never raises (see `HostInfo.error`)."""
    nv, error = _init()
    if nv is None:
        return HostInfo(error=error)
    try:
        info = HostInfo(
            driver_version=_text(nv.nvmlSystemGetDriverVersion()),
            cuda_driver_version=_optional(
                lambda: cuda_version_text(nv.nvmlSystemGetCudaDriverVersion_v2())
            ),
        )
        info.gpus = [_read_gpu(nv, i) for i in range(nv.nvmlDeviceGetCount())]
        return info
    except nv.NVMLError as err:
        return HostInfo(error=f"NVML: reading the GPUs failed: {err}")
    finally:
        _optional(nv.nvmlShutdown)


def _handle_by_uuid(nv: Any, uuid: str) -> Any:
    return nv.nvmlDeviceGetHandleByUUID(uuid.encode() if isinstance(uuid, str) else uuid)


def gpu_used_memory(uuid: str) -> int | None:
    """Bytes in use on one GPU (all processes together), or None when NVML cannot say."""
    nv, _ = _init()
    if nv is None:
        return None
    try:
        return int(nv.nvmlDeviceGetMemoryInfo(_handle_by_uuid(nv, uuid)).used)
    except nv.NVMLError:
        return None
    finally:
        _optional(nv.nvmlShutdown)


def process_used_memory(pid: int, uuid: str) -> int | None:
    """Bytes one process holds on one GPU, read from outside that process.

    None when NVML does not list the process (inside a container NVML reports host PIDs, so
    the caller falls back to `gpu_used_memory` before and after) or cannot tell its usage.
    """
    nv, _ = _init()
    if nv is None:
        return None
    try:
        handle = _handle_by_uuid(nv, uuid)
        for proc in nv.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == pid and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
        return None
    except nv.NVMLError:
        return None
    finally:
        _optional(nv.nvmlShutdown)
