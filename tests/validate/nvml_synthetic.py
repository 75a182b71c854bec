"""SYNTHETIC NVML hosts, answered through nvidia-ml-py's own names: not recordings.

The hosts these tests give it are hand-typed (invented UUIDs, no source), shaped like what
nvidia-smi shows; the real recorded hosts are the captures in tests/validate/captures/.
`SyntheticNvml(host)` answers the nvml* calls validate/host/nvml.py makes from a dict describing a
server, and raises nvidia-ml-py's real exception classes (NVMLError_NoPermission, _GpuIsLost,
NVMLLibraryMismatchError, ...) where the dict says that call fails. Constants and error
classes come from the installed pynvml, so a renamed constant breaks these tests too.

Host format (one dict per GPU; absent keys raise NVMLError_NotSupported, as NVML does):
    name, uuid, bus, cc (major, minor), memory (total, used), ecc_uncorrected, pcie (cur gen,
    max gen, gpu max gen, cur width, max width), power_mw (enforced, default), reasons (mask),
    compute_mode, mig (list of instance dicts, None for an empty slot), nvlink (active links),
    clocks (sm, max sm), power_usage_mw, temperature, fail {function name: error class name}.

`H100` and `TWO_H100_HOST` are the one healthy H100 host every test starts from (the unit tests in
host/test_validate_nvml_synthetic.py and the suite-run plugin synthetic_gpu_host.py).
"""

from __future__ import annotations

import types
from typing import Any

import pynvml

GIB = 2**30
# SYNTHETIC: a GPU shaped like a DGX H100's in nvidia-smi -q (driver 550.54.15, CUDA 12.4); UUIDs
# invented. One table for every test that wants a healthy H100 host: copy it before changing it.
H100: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-4b2c1e0a-93d1-7f3c-5a8e-1c2d3e4f5a60",
    "bus": "00000000:18:00.0",
    "cc": (9, 0),
    "memory": (80 * GIB, 512 * 2**20),
    "ecc_uncorrected": 0,
    "pcie": (5, 5, 5, 16, 16),
    "power_mw": (700000, 700000),
    "reasons": 0x1,
    "compute_mode": 0,
    "mig": False,
    "nvlink": 18,
    "clocks": (1980, 1980),
    "power_usage_mw": 690000,
    "temperature": 61,
}
TWO_H100_HOST: dict[str, Any] = {
    "driver": "550.54.15",
    "cuda": 12040,
    "gpus": [
        H100,
        {**H100, "uuid": "GPU-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0", "bus": "00000000:2A:00.0"},
    ],
}


def _error(name: str) -> BaseException:
    cls = getattr(pynvml, name)
    return (
        cls() if name == "NVMLLibraryMismatchError" else cls.__new__(cls)
    )  # NVMLError subclasses take no args


class _Memory:
    def __init__(self, total: int, used: int) -> None:
        self.total, self.used, self.free = total, used, total - used


class SyntheticNvml:
    """A stand-in for the pynvml module that answers for one hand-typed (synthetic) host."""

    def __init__(self, host: dict[str, Any]) -> None:
        self.host = host
        self.calls: list[str] = []
        self.gpus = host.get("gpus", [])

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "NVMLError", "NVMLLibraryMismatchError")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # --- helpers
    def _gpu(self, handle: Any, call: str) -> dict[str, Any]:
        self.calls.append(call)
        failure = handle.get("fail", {}).get(call)
        if failure:
            raise _error(failure)
        return handle

    def _field(self, handle: Any, call: str, key: str) -> Any:
        gpu = self._gpu(handle, call)
        if key not in gpu:
            raise _error("NVMLError_NotSupported")
        return gpu[key]

    # --- system
    def nvmlInit(self) -> None:
        failure = self.host.get("init_error")
        if failure:
            raise _error(failure)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.host["driver"]

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.host["cuda"]

    def nvmlDeviceGetCount(self) -> int:
        if "count_error" in self.host:
            raise _error(self.host["count_error"])
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        return self._gpu(self.gpus[index], "nvmlDeviceGetHandleByIndex")

    def nvmlDeviceGetHandleByUUID(self, uuid: bytes | str) -> dict[str, Any]:
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.gpus:
            if gpu["uuid"] == wanted:
                return gpu
        raise _error("NVMLError_NotFound")

    # --- device
    def nvmlDeviceGetName(self, h: Any) -> str:
        return self._field(h, "nvmlDeviceGetName", "name")

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return self._field(h, "nvmlDeviceGetUUID", "uuid")

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return types.SimpleNamespace(busId=self._field(h, "nvmlDeviceGetPciInfo", "bus").encode())

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> _Memory:
        total, used = self._field(h, "nvmlDeviceGetMemoryInfo", "memory")
        return _Memory(total, used)

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        return self._field(h, "nvmlDeviceGetCudaComputeCapability", "cc")

    def nvmlDeviceGetCurrentEccMode(self, h: Any) -> int:
        return 1 if "ecc_uncorrected" in self._gpu(h, "nvmlDeviceGetCurrentEccMode") else 0

    def nvmlDeviceGetTotalEccErrors(self, h: Any, kind: int, counter: int) -> int:
        return self._field(h, "nvmlDeviceGetTotalEccErrors", "ecc_uncorrected")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        return self._field(h, "nvmlDeviceGetEnforcedPowerLimit", "power_mw")[0]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: Any) -> int:
        return self._field(h, "nvmlDeviceGetPowerManagementDefaultLimit", "power_mw")[1]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        value = self._field(h, "nvmlDeviceGetCurrentClocksEventReasons", "reasons")
        return value.pop(0) if isinstance(value, list) else value

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any) -> int:
        value = self._field(h, "nvmlDeviceGetCurrPcieLinkGeneration", "pcie")[0]
        return value.pop(0) if isinstance(value, list) else value

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any) -> int:
        return self._field(h, "nvmlDeviceGetMaxPcieLinkGeneration", "pcie")[1]

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: Any) -> int:
        return self._field(h, "nvmlDeviceGetGpuMaxPcieLinkGeneration", "pcie")[2]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any) -> int:
        return self._field(h, "nvmlDeviceGetCurrPcieLinkWidth", "pcie")[3]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Any) -> int:
        return self._field(h, "nvmlDeviceGetMaxPcieLinkWidth", "pcie")[4]

    def nvmlDeviceGetComputeMode(self, h: Any) -> int:
        return self._field(h, "nvmlDeviceGetComputeMode", "compute_mode")

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        gpu = self._gpu(h, "nvmlDeviceGetMigMode")
        if "mig" not in gpu:
            raise _error("NVMLError_NotSupported")
        return [1, 1] if gpu["mig"] is not False else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return len(self._field(h, "nvmlDeviceGetMaxMigDeviceCount", "mig"))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, index: int) -> dict[str, Any]:
        slot = self._field(h, "nvmlDeviceGetMigDeviceHandleByIndex", "mig")[index]
        if slot is None:
            raise _error("NVMLError_NotFound")
        return slot

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        active = self._field(h, "nvmlDeviceGetNvLinkState", "nvlink")
        if link >= 18:
            raise _error("NVMLError_InvalidArgument")
        return 1 if link < active else 0

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        value = self._field(h, "nvmlDeviceGetClockInfo", "clocks")[0]
        return value.pop(0) if isinstance(value, list) else value

    def nvmlDeviceGetMaxClockInfo(self, h: Any, kind: int) -> int:
        return self._field(h, "nvmlDeviceGetMaxClockInfo", "clocks")[1]

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        value = self._field(h, "nvmlDeviceGetPowerUsage", "power_usage_mw")
        return value.pop(0) if isinstance(value, list) else value

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        return self._field(h, "nvmlDeviceGetTemperature", "temperature")
