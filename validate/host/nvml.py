"""Everything gpuenv reads from the NVIDIA driver, through NVML (the only module that imports
pynvml).

It runs on bare hosts and inside images where only `validate/` is copied, so it needs nothing but
the stdlib and nvidia-ml-py. Like torch/utils/collect_env.py it never crashes: when NVML cannot be
used, `HostInfo.error` says why; a GPU that cannot be read (lost, fallen off the bus) is listed in
`HostInfo.unreadable` while the others are still read; each optional per-GPU field that one driver
or GPU does not support (memory inside a MIG container, PCIe on a SoC, ...) stays None.

Every reader takes the NVML module as an argument (None: this host's pynvml); there is no module
of the process's own. The suite's session owns the one it reads (`Suite.nvml`: a replayed capture
for --replay, a recorder for --record) and passes it to each reader, and the tests feed recorded
observations of real servers through the same code.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from validate.host.nvml_names import COMPUTE_MODES, cuda_version_text, throttle_reason_names
from validate.host.pci_ids import device_id_of
from validate.host.pcibus import nvidia_gpus
from validate.host.virtualization import memory_v2_info, read_vgpu_license, read_virtualization

if TYPE_CHECKING:  # imported when a GPU is read: a host without one (`invoke resolve`) skips it
    from validate.host.nvml_health import HealthReadings

T = TypeVar("T")


def _unread_health() -> HealthReadings:
    """A GPU's health before it is read: no reading (each None, "not reported")."""
    from validate.host.nvml_health import HealthReadings

    return HealthReadings()


@dataclass
class GpuProcess:
    """A process holding a GPU (host PID; NVML cannot always say how much memory it holds)."""

    pid: int
    used_bytes: int | None = None
    name: str | None = None


@dataclass
class MigDevice:
    """One MIG instance of a GPU in MIG mode; CUDA sees it as a device of its own."""

    index: int
    uuid: str
    memory_total_bytes: int | None = None
    multiprocessor_count: int | None = None


@dataclass
class GpuInfo:
    """One GPU as NVML reports it; optional fields are None where the driver or GPU cannot say."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str
    compute_capability: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None  # what GPU and slot together allow
    pcie_link_gen_gpu_max: int | None = None  # what the GPU itself can run
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    power_limit_watts: float | None = None  # enforced
    power_default_limit_watts: float | None = None
    throttle_reasons: list[str] | None = None  # at idle, when the host was read
    compute_mode: str | None = None
    mig_enabled: bool | None = None
    mig_devices: list[MigDevice] = field(default_factory=list)
    # Health as DCGM reads it (None: not supported or not reported by this GPU / driver).
    # The process lists are None when NVML cannot list them (NoPermission, NotSupported, a capture
    # without the section): "not reported", never "no process".
    compute_processes: list[GpuProcess] | None = None  # compute-only processes
    graphics_processes: list[GpuProcess] | None = None  # graphics and compute+graphics
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    remapped_rows_uncorrectable: int | None = None
    applications_clocks_mhz: tuple[int | None, int | None] | None = None  # (graphics, memory) set
    default_applications_clocks_mhz: tuple[int | None, int | None] | None = None
    persistence_mode: bool | None = None
    utilization_percent: int | None = (
        None  # GPU busy when the host was read (PCIe is judged under load)
    )
    nvlink_active_links: int | None = None
    multiprocessor_count: int | None = None
    # NVSwitch fabric registration (HGX/DGX H100 and newer): "Not Started", "In Progress",
    # "Completed"; None where the GPU has no fabric. The status is "Success" or NVML's error.
    fabric_state: str | None = None
    fabric_status: str | None = None
    # The 16-bit PCI device id (0x2330), where NVML or the capture gives it: identity goes by it
    # first (validate/host/archs.identify), since a driver may call a GPU "Graphics Device".
    pci_device_id: int | None = None
    # The readings DCGM's health watches and diagnostic judge (validate/host/nvml_health.py).
    health: HealthReadings = field(default_factory=_unread_health)
    # Memory as NVML's v2 query splits it (nvidia-smi's "Reserved" and "Used"): the driver's own
    # reserve, and what contexts hold; None where the driver or capture gives only version 1,
    # whose `used` (memory_used_bytes) includes the reserve.
    memory_reserved_bytes: int | None = None
    memory_allocated_bytes: int | None = None
    # Virtualization (nvmlDeviceGetVirtualizationMode): "None" (bare metal), "Pass-Through",
    # "VGPU" (a guest), "Host VGPU" / "Host VSGA" (a hypervisor); None where not reported.
    virtualization_mode: str | None = None
    host_vgpu_mode: str | None = None  # "SR-IOV" / "Non SR-IOV" on a hypervisor
    # A vGPU guest's licence: licensed or not, and the words and product (None: not reported).
    vgpu_licensed: bool | None = None
    vgpu_license: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UnreadableGpu:
    """A GPU NVML counts but cannot read (GpuIsLost, Unknown error, ...): reported, never hidden."""

    index: int
    error: str
    uuid: str | None = None
    pci_bus_id: str | None = None


@dataclass
class HostInfo:
    """The driver and its GPUs; `error` says why NVML could not be read (then the rest is empty)."""

    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    error: str | None = None
    unreadable: list[UnreadableGpu] = field(default_factory=list)
    replayed_from: str | None = None  # the capture or recording this host was read from, if any

    def to_dict(self) -> dict[str, Any]:
        data = {
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
            "unreadable": [asdict(u) for u in self.unreadable],
            "error": self.error,
        }
        if self.replayed_from:
            data["replayed_from"] = self.replayed_from
        return data

    @property
    def mig_gpus(self) -> list[GpuInfo]:
        return [gpu for gpu in self.gpus if gpu.mig_enabled]


def _text(value: Any) -> str:
    """Old pynvml releases return bytes, new ones str."""
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuLost(Exception):
    """A query answered GpuIsLost: the GPU fell off the bus, so none of its answers count."""


def _lost(err: BaseException) -> bool:
    """GpuIsLost (15) or ResetRequired (16): the GPU cannot be used until it is reset."""
    return type(err).__name__ in ("NVMLError_GpuIsLost", "NVMLError_ResetRequired") or getattr(
        err, "value", None
    ) in (15, 16)


def _optional(probe: Callable[[], T]) -> T | None:
    """One optional NVML query: its value, or None when this GPU/driver does not support it."""
    try:
        return probe()
    except (
        Exception
    ):  # NVMLError_NotSupported, _NoPermission, a symbol missing in an old driver ...
        return None


def _gpu_field(probe: Callable[[], T]) -> T | None:
    """One optional field of a GPU being read: None when unsupported, but GpuIsLost is raised,
    so a lost GPU is reported lost (read_host's `unreadable`), never half-read."""
    try:
        return probe()
    except Exception as err:
        if _lost(err):
            raise GpuLost(_describe(err)) from err
        return None


def _describe(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def import_pynvml() -> tuple[Any, str | None]:
    """The pynvml module, or None and why not (the recorder wraps it: validate/session.py)."""
    try:
        import pynvml
    except ImportError:
        return None, "NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    return pynvml, None


#: NVML's answer on a host with no NVIDIA driver installed.
NO_DRIVER = "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"
#: The library nvidia-ml-py opens on Linux (its _LoadNvmlLibrary: `CDLL("libnvidia-ml.so.1")`).
NVML_LIBRARY = "libnvidia-ml.so.1"


def library_missing() -> bool:
    """True on a Linux host where pynvml is installed but NVML's library cannot be opened: all
    that importing pynvml (5,000 lines, most of a CPU-only `invoke resolve`'s host read) and
    calling nvmlInit would find out is NVMLError_LibraryNotFound, so the answer is NO_DRIVER
    without it. False wherever pynvml must be asked (another OS, the library present)."""
    import sys

    if not sys.platform.startswith("linux"):
        return False
    import importlib.util

    if importlib.util.find_spec("pynvml") is None:
        return False  # import_pynvml says that it is not installed
    import ctypes

    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return True
    return False


def cpu_only_host(
    host: "HostInfo", dev: Path = Path("/dev"), sysfs_root: Path | None = None
) -> bool:
    """No NVIDIA driver library, no NVIDIA device file and no NVIDIA GPU on the PCI bus: a machine
    without GPU, not a GPU server whose driver broke (that one still has /dev/nvidia0, or a
    library NVML can load) or was never installed (its GPUs are still on the bus: pcibus.py)."""
    if host.replayed_from or host.gpus or host.error != NO_DRIVER:
        return False
    return not any(dev.glob("nvidia[0-9]*")) and not nvidia_gpus(sysfs_root)


def _init(nv: Any) -> tuple[Any, str | None]:
    """Initialise NVML: (module, None) or (None, why not); `nv` None is this host's pynvml.
    Catches every error, not only NVMLError: nvidia-ml-py raises NVMLLibraryMismatchError (not an
    NVMLError) when it and the library differ."""
    if nv is None:
        if library_missing():
            return None, NO_DRIVER
        nv, error = import_pynvml()
        if nv is None:
            return None, error
    try:
        nv.nvmlInit()
    except nv.NVMLError_LibraryNotFound:
        return None, NO_DRIVER
    except nv.NVMLError_DriverNotLoaded:
        return (
            None,
            "NVML: the NVIDIA kernel driver is not loaded (is the GPU passed into this container?)",
        )
    except nv.NVMLError_NoPermission:
        return None, "NVML: no permission to open the GPU device files (/dev/nvidia*)"
    except (
        Exception
    ) as err:  # NVMLError_LibRmVersionMismatch, NVMLLibraryMismatchError, OSError ...
        return None, f"NVML: initialisation failed: {_describe(err)}"
    return nv, None


def _clock_event_reasons(nv: Any, handle: Any) -> int | None:
    """nvmlDeviceGetCurrentClocksEventReasons (nvidia-ml-py 12.535+), else its older name."""
    for name in (
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        function = getattr(nv, name, None)
        if function is not None:
            value = _optional(lambda: function(handle))
            if value is not None:
                return int(value)
    return None


def _nvlink_active(nv: Any, handle: Any) -> int | None:
    """Active NVLinks of a GPU, or None when it has no NVLink (every link query unsupported)."""
    supported, active = False, 0
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        state = _optional(lambda: nv.nvmlDeviceGetNvLinkState(handle, link))
        if state is None:
            continue
        supported = True
        active += 1 if state else 0
    return active if supported else None


def _mig_devices(nv: Any, handle: Any) -> list[MigDevice]:
    out = []
    count = _optional(lambda: nv.nvmlDeviceGetMaxMigDeviceCount(handle)) or 0
    for slot in range(int(count)):
        mig = _optional(lambda: nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        if mig is None:  # an empty slot: NVML_ERROR_NOT_FOUND
            continue
        uuid = _optional(lambda: _text(nv.nvmlDeviceGetUUID(mig)))
        if uuid is None:
            continue
        memory = _optional(lambda: nv.nvmlDeviceGetMemoryInfo(mig))
        out.append(
            MigDevice(
                slot, uuid, None if memory is None else int(memory.total), _multiprocessors(nv, mig)
            )
        )
    return out


def _multiprocessors(nv: Any, handle: Any) -> int | None:
    """SM count from nvmlDeviceGetAttributes (MIG instances; whole GPUs where supported)."""
    attributes = _optional(lambda: nv.nvmlDeviceGetAttributes(handle))
    count = getattr(attributes, "multiprocessorCount", None) if attributes is not None else None
    return int(count) if count else None


def _processes(nv: Any, handle: Any, function: str) -> list[GpuProcess] | None:
    """The processes NVML lists, or None when it cannot list them (NoPermission, NotSupported)."""
    listed = _gpu_field(lambda: getattr(nv, function)(handle))
    if listed is None:
        return None
    out = []
    for proc in listed:
        used = getattr(proc, "usedGpuMemory", None)
        name = _optional(lambda: _text(nv.nvmlSystemGetProcessName(proc.pid)))
        out.append(GpuProcess(int(proc.pid), None if used is None else int(used), name))
    return out


#: nvmlGpuFabricState_t values, named as nvidia-smi prints them (0, NOT_SUPPORTED, is "no fabric").
FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}


def _fabric(nv: Any, handle: Any) -> tuple[str | None, str | None]:
    """The GPU's NVSwitch fabric state and status (nvmlDeviceGetGpuFabricInfo, driver 530+);
    (None, None) when the GPU has no fabric or the driver or nvidia-ml-py lacks the call."""
    make, call = (
        getattr(nv, "c_nvmlGpuFabricInfo_t", None),
        getattr(nv, "nvmlDeviceGetGpuFabricInfo", None),
    )
    if make is None or call is None:
        return None, None
    info = make()
    try:
        call(handle, nv.byref(info))
    except Exception as err:  # NotSupported: no fabric; a lost GPU is reported lost
        if _lost(err):
            raise GpuLost(_describe(err)) from err
        return None, None
    state = FABRIC_STATES.get(int(getattr(info, "state", 0) or 0))
    if state is None:
        return None, None
    status = getattr(info, "status", None)
    if isinstance(status, str) or status is None:
        return state, status
    if int(status) == 0:
        return state, "Success"
    text = _optional(lambda: _text(nv.nvmlErrorString(int(status))))
    return state, text or f"NVML error {int(status)}"


def _clock_pair(nv: Any, handle: Any, function: str) -> tuple[int | None, int | None] | None:
    graphics = _optional(
        lambda: int(getattr(nv, function)(handle, getattr(nv, "NVML_CLOCK_GRAPHICS", 0)))
    )
    memory = _optional(lambda: int(getattr(nv, function)(handle, getattr(nv, "NVML_CLOCK_MEM", 2))))
    return None if graphics is None and memory is None else (graphics, memory)


def _read_gpu(nv: Any, index: int, driver_version: str | None = None) -> GpuInfo:
    from validate.host.nvml_health import read_health

    handle = nv.nvmlDeviceGetHandleByIndex(index)
    # Memory is optional: inside a container a MIG GPU answers NoPermission for the parent.
    memory = _gpu_field(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
    capability = _gpu_field(lambda: nv.nvmlDeviceGetCudaComputeCapability(handle))
    ecc_mode = _gpu_field(lambda: nv.nvmlDeviceGetCurrentEccMode(handle))
    power_mw = _gpu_field(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
    default_mw = _gpu_field(lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(handle))
    reasons = _clock_event_reasons(nv, handle)
    mode = _gpu_field(lambda: nv.nvmlDeviceGetComputeMode(handle))
    mig_mode = _gpu_field(lambda: nv.nvmlDeviceGetMigMode(handle))
    mig_enabled = (
        None if mig_mode is None else bool(mig_mode[0] == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1))
    )
    compute = _processes(nv, handle, "nvmlDeviceGetComputeRunningProcesses")
    graphics = _processes(nv, handle, "nvmlDeviceGetGraphicsRunningProcesses")
    graphic_pids = {p.pid for p in graphics or []}
    fabric_state, fabric_status = _fabric(nv, handle)
    rows = _gpu_field(lambda: nv.nvmlDeviceGetRemappedRows(handle))
    pending = _gpu_field(lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    persistence = _gpu_field(lambda: nv.nvmlDeviceGetPersistenceMode(handle))
    utilization = _gpu_field(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
    memory_v2 = memory_v2_info(nv, handle, _gpu_field)
    virtualization, host_vgpu = read_virtualization(nv, handle, _gpu_field)
    licensed, license_text = read_vgpu_license(nv, handle, _gpu_field, _text)
    pci = _gpu_field(lambda: nv.nvmlDeviceGetPciInfo(handle))
    return GpuInfo(
        index=index,
        name=_text(nv.nvmlDeviceGetName(handle)),
        uuid=_text(nv.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_optional(lambda: _text(pci.busId)) or "unknown",
        pci_device_id=device_id_of(getattr(pci, "pciDeviceId", None)),
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        memory_total_bytes=None if memory is None else int(memory.total),
        memory_used_bytes=None if memory is None else int(memory.used),
        ecc_enabled=None if ecc_mode is None else bool(ecc_mode),
        ecc_uncorrected_volatile=_gpu_field(
            lambda: int(
                nv.nvmlDeviceGetTotalEccErrors(
                    handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
                )
            )
        ),
        pcie_link_gen=_gpu_field(lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        pcie_link_gen_max=_gpu_field(lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        pcie_link_gen_gpu_max=_gpu_field(lambda: nv.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle)),
        pcie_link_width=_gpu_field(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        pcie_link_width_max=_gpu_field(lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        power_limit_watts=None if power_mw is None else power_mw / 1000.0,
        power_default_limit_watts=None if default_mw is None else default_mw / 1000.0,
        throttle_reasons=None if reasons is None else throttle_reason_names(reasons),
        compute_mode=None if mode is None else COMPUTE_MODES.get(int(mode), str(mode)),
        mig_enabled=mig_enabled,
        mig_devices=_mig_devices(nv, handle) if mig_enabled else [],
        nvlink_active_links=_nvlink_active(nv, handle),
        compute_processes=None
        if compute is None
        else [p for p in compute if p.pid not in graphic_pids],
        graphics_processes=graphics,
        retired_pages_pending=None
        if pending is None
        else bool(pending == getattr(nv, "NVML_FEATURE_ENABLED", 1)),
        remapped_rows_pending=None if rows is None else bool(rows[2]),
        remapped_rows_failure=None if rows is None else bool(rows[3]),
        remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
        applications_clocks_mhz=_clock_pair(nv, handle, "nvmlDeviceGetApplicationsClock"),
        default_applications_clocks_mhz=_clock_pair(
            nv, handle, "nvmlDeviceGetDefaultApplicationsClock"
        ),
        persistence_mode=None if persistence is None else bool(persistence),
        utilization_percent=None if utilization is None else int(utilization.gpu),
        multiprocessor_count=_multiprocessors(nv, handle),
        fabric_state=fabric_state,
        fabric_status=fabric_status,
        health=read_health(nv, handle, _gpu_field, driver_version),
        memory_reserved_bytes=None if memory_v2 is None else int(memory_v2.reserved),
        memory_allocated_bytes=None if memory_v2 is None else int(memory_v2.used),
        virtualization_mode=virtualization,
        host_vgpu_mode=host_vgpu,
        vgpu_licensed=licensed,
        vgpu_license=license_text,
    )


def _unreadable(nv: Any, index: int, err: BaseException) -> UnreadableGpu:
    """A GPU that could not be read, named by what NVML still says about it (UUID, PCI bus)."""
    reason = str(err) if isinstance(err, GpuLost) else _describe(err)

    def quietly(read: Callable[[], str]) -> str | None:
        try:
            return read()
        except Exception:
            return None

    handle = quietly(lambda: nv.nvmlDeviceGetHandleByIndex(index))
    uuid = quietly(lambda: _text(nv.nvmlDeviceGetUUID(handle))) if handle is not None else None
    bus = (
        quietly(lambda: _text(nv.nvmlDeviceGetPciInfo(handle).busId))
        if handle is not None
        else None
    )
    named = ", ".join(x for x in (bus, uuid) if x)
    where = f"GPU {index}" + (f" ({named})" if named else "")
    fix = ""
    if "GpuIsLost" in reason:
        fix = (
            "; the GPU fell off the bus: drain the node, then reset the GPU (nvidia-smi -r) or "
            "reboot, and check dmesg for Xid errors"
        )
    elif "ResetRequired" in reason:
        fix = f"; the GPU needs a reset: drain it, then nvidia-smi -r -i {index} (or reboot)"
    return UnreadableGpu(index, f"NVML cannot read {where}: {reason}{fix}", uuid, bus)


def read_host(nv: Any = None) -> HostInfo:
    """Driver, CUDA driver version and every GPU, each read on its own; never raises. `nv` is the
    NVML module to read (None: this host's pynvml)."""
    given = nv
    nv, error = _init(nv)
    if nv is None:
        return HostInfo(error=error, replayed_from=getattr(given, "replayed_from", None))
    try:
        info = HostInfo(
            driver_version=_optional(lambda: _text(nv.nvmlSystemGetDriverVersion())),
            cuda_driver_version=_optional(
                lambda: cuda_version_text(nv.nvmlSystemGetCudaDriverVersion_v2())
            ),
            replayed_from=getattr(nv, "replayed_from", None),
        )
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as err:
            return HostInfo(
                info.driver_version,
                info.cuda_driver_version,
                error=f"NVML: counting the GPUs failed: {_describe(err)}",
            )
        for index in range(count):
            try:
                info.gpus.append(_read_gpu(nv, index, info.driver_version))
            except Exception as err:  # one lost GPU must not hide the others
                info.unreadable.append(_unreadable(nv, index, err))
        return info
    finally:
        _optional(nv.nvmlShutdown)


def _handle_by_uuid(nv: Any, uuid: str) -> Any:
    return nv.nvmlDeviceGetHandleByUUID(uuid.encode() if isinstance(uuid, str) else uuid)


def gpu_used_memory(uuid: str, nv: Any) -> int | None:
    """Bytes in use on one GPU (all processes together), or None when NVML cannot say. `nv` is the
    suite's NVML module (None: this host's pynvml), so a --record run records this answer too."""
    nv, _ = _init(nv)
    if nv is None:
        return None
    try:
        return int(nv.nvmlDeviceGetMemoryInfo(_handle_by_uuid(nv, uuid)).used)
    except Exception:
        return None
    finally:
        _optional(nv.nvmlShutdown)


def process_used_memory(pid: int, uuid: str, nv: Any) -> int | None:
    """Bytes one process holds on one GPU, read from outside that process through `nv` (None:
    this host's pynvml).

    None when NVML does not list the process (inside a container NVML reports host PIDs, so
    the caller falls back to `gpu_used_memory` before and after) or cannot tell its usage.
    """
    nv, _ = _init(nv)
    if nv is None:
        return None
    try:
        handle = _handle_by_uuid(nv, uuid)
        for proc in nv.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == pid and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
        return None
    except Exception:
        return None
    finally:
        _optional(nv.nvmlShutdown)


@dataclass
class Sample:
    """One reading of one GPU during the sustained load."""

    uuid: str
    seconds: float
    sm_clock_mhz: int | None
    max_sm_clock_mhz: int | None
    power_watts: float | None
    temperature_c: int | None
    pcie_link_gen: int | None
    reasons: list[str] | None
    pcie_link_width: int | None = None  # under load: an idle link may narrow, a loaded one must not
    pcie_replays: int | None = (
        None  # read at each sample: the first and last give DCGM's replay rate
    )
    margin_c: int | None = (
        None  # degrees below the GPU's limit (T.Limit), judged under load as DCGM does
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sampler:
    """Keeps NVML open over a load and reads clocks, power, PCIe generation and clock-event
    reasons of the given GPUs on each `sample()`; a failed field reads None, never raises. `nv`
    is the suite's NVML module (None: this host's pynvml)."""

    def __init__(self, uuids: list[str], nv: Any) -> None:
        self.nv, self.error = _init(nv)
        self.handles: dict[str, Any] = {}
        self.started = time.perf_counter()
        if self.nv is not None:
            for uuid in uuids:
                handle = _optional(lambda: _handle_by_uuid(self.nv, uuid))
                if handle is not None:
                    self.handles[uuid] = handle

    def sample(self) -> list[Sample]:
        nv, out = self.nv, []
        if nv is None:
            return out
        now = time.perf_counter() - self.started
        sm = getattr(nv, "NVML_CLOCK_SM", 1)
        for uuid, handle in self.handles.items():
            power_mw = _optional(lambda: nv.nvmlDeviceGetPowerUsage(handle))
            reasons = _clock_event_reasons(nv, handle)
            out.append(
                Sample(
                    uuid=uuid,
                    seconds=round(now, 3),
                    sm_clock_mhz=_optional(lambda: int(nv.nvmlDeviceGetClockInfo(handle, sm))),
                    max_sm_clock_mhz=_optional(
                        lambda: int(nv.nvmlDeviceGetMaxClockInfo(handle, sm))
                    ),
                    power_watts=None if power_mw is None else power_mw / 1000.0,
                    temperature_c=_optional(
                        lambda: int(
                            nv.nvmlDeviceGetTemperature(
                                handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0)
                            )
                        )
                    ),
                    pcie_link_gen=_optional(
                        lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(handle))
                    ),
                    reasons=None if reasons is None else throttle_reason_names(reasons),
                    pcie_link_width=_optional(
                        lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(handle))
                    ),
                    pcie_replays=_optional(lambda: int(nv.nvmlDeviceGetPcieReplayCounter(handle))),
                    margin_c=_optional(lambda: int(nv.nvmlDeviceGetMarginTemperature(handle))),
                )
            )
        return out

    def close(self) -> None:
        if self.nv is not None:
            _optional(self.nv.nvmlShutdown)
            self.nv = None


def reread_clock_events(
    uuid: str,
    nv: Any,
    times: int = 4,
    interval_s: float = 0.3,
    sleep: Callable[[float], None] = time.sleep,
) -> list[list[str] | None]:
    """The GPU's clock-event reasons read through `nv` (None: this host's pynvml) `times` more
    times, `interval_s` apart (bounded: about a second by default): a reason a P-state change set
    for a moment is gone by then."""
    sampler = Sampler([uuid], nv)
    readings: list[list[str] | None] = []
    try:
        for _ in range(times):
            sleep(interval_s)
            samples = sampler.sample()
            readings.append(samples[0].reasons if samples else None)
    finally:
        sampler.close()
    return readings
