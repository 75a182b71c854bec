"""Replay a recorded host through the suite's NVML seam, and record a live one.

`ReplayNvml(recording)` stands in for the pynvml module: every `validate/host/nvml.py` reader takes
the module as an argument, so a captured server is read by the same code as a live one. Calls
the recording holds answer as recorded (a recorded error raises an exception of the same name);
calls it does not hold raise NVMLError_NotSupported, as NVML does for a feature a GPU lacks.
It needs no nvidia-ml-py: a workstation without a GPU replays a server's capture.

`RecordingNvml(nv)` wraps a real pynvml module (or a replay) and keeps each answer the suite
used, per device and argument. The model is NVIDIA DCGM's nvml_api_recorder.py and NVML
injection (NVIDIA/DCGM, nvml-injection/README.md): there each NVML function's return value or
error is stored under the function and its extra arguments in a YAML file that the injection
library answers from. DCGM's recorder calls every NVML function; this one keeps only the calls
the suite made, as JSON (no PyYAML in images). Its `recording()` is gpuenv's own
`gpuenv-nvml-recording/1` file, which replays like a capture.
"""

from __future__ import annotations

import ctypes
import types
from typing import Any, Callable

from validate.host.capture import ERROR_KEY, RECORDING_FORMAT, NvmlConstants, call_key, error_answer


class NVMLError(Exception):
    """Base of the replayed errors; subclasses carry nvidia-ml-py's class names."""


def _error_class(name: str) -> type[NVMLError]:
    cls = _ERRORS.get(name)
    if cls is None:
        cls = type(name, (NVMLError,), {})
        _ERRORS[name] = cls
    return cls


_ERRORS: dict[str, type[NVMLError]] = {}
for _name in (
    "NVMLError_NotSupported",
    "NVMLError_NotFound",
    "NVMLError_GpuIsLost",
    "NVMLError_NoPermission",
    "NVMLError_Unknown",
    "NVMLError_LibraryNotFound",
    "NVMLError_DriverNotLoaded",
    "NVMLError_InvalidArgument",
    "NVMLError_ResetRequired",
    "NVMLError_LibRmVersionMismatch",
):
    _error_class(_name)


def _answer(value: Any) -> Any:
    """A recorded value as pynvml returns it: structs as attribute objects, lists element-wise."""
    if isinstance(value, dict):
        if ERROR_KEY in value:
            raise _error_class(str(value[ERROR_KEY]))()
        return types.SimpleNamespace(**{k: _answer(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_answer(v) for v in value]
    return value


class _Handle:
    """A replayed device: a GPU (its answers) or one of its MIG instances."""

    def __init__(self, calls: dict[str, Any], label: str) -> None:
        self.calls, self.label = calls, label


class ReplayNvml(NvmlConstants):
    """The pynvml calls `validate/host/nvml.py` makes, answered from one recording (the constants
    are pynvml's, inherited)."""

    #: nvmlDeviceGetGpuFabricInfo fills a structure passed by reference; replayed, the structure
    #: is a plain object and the reference the object itself.
    c_nvmlGpuFabricInfo_t = types.SimpleNamespace
    c_nvmlGpuFabricInfo_v3_t = (
        types.SimpleNamespace
    )  # nvmlDeviceGetGpuFabricInfoV: adds healthMask, healthSummary

    @staticmethod
    def byref(obj: Any) -> Any:
        return obj

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording
        self.system: dict[str, Any] = recording.get("system", {})
        self.devices: list[dict[str, Any]] = recording.get("devices", [])
        self.source: str = str(recording.get("source", "recording"))
        self.replayed_from: str = self.source  # read_host marks the host as replayed

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVMLError"):
            return _error_class(name)
        if name == "NVMLLibraryMismatchError":
            return _error_class(name)
        if name.startswith("nvmlDevice"):
            return lambda handle, *args: self._device_call(name, handle, *args)
        if name.startswith("nvmlSystem"):
            return lambda *args: self._system_call(name, *args)
        raise AttributeError(name)

    NVMLError = NVMLError

    def _system_call(self, name: str, *args: Any) -> Any:
        key = call_key(name, *args)
        if key not in self.system:
            raise _error_class("NVMLError_NotSupported")()
        return _answer(self.system[key])

    def _device_call(self, name: str, handle: Any, *args: Any) -> Any:
        if not isinstance(handle, _Handle):
            raise _error_class("NVMLError_InvalidArgument")()
        key = call_key(name, *args)
        if key not in handle.calls:
            raise _error_class("NVMLError_NotSupported")()
        return _answer(handle.calls[key])

    def nvmlInit(self) -> None:
        if "nvmlInit" in self.system:
            _answer(self.system["nvmlInit"])  # a recorded init failure raises

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return int(_answer(self.system.get("nvmlDeviceGetCount", len(self.devices))))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.devices):
            raise _error_class("NVMLError_InvalidArgument")()
        calls = self.devices[index]
        if "nvmlDeviceGetHandleByIndex" in calls:
            _answer(calls["nvmlDeviceGetHandleByIndex"])  # a GPU that could not even be opened
        return _Handle(calls, f"GPU {index}")

    def nvmlDeviceGetHandleByUUID(self, uuid: Any) -> _Handle:
        wanted = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        for index, calls in enumerate(self.devices):
            if calls.get("nvmlDeviceGetUUID") == wanted:
                return _Handle(calls, f"GPU {index}")
            for slot, mig in (calls.get("mig") or {}).items():
                if mig.get("nvmlDeviceGetUUID") == wanted:
                    return _Handle(mig, f"GPU {index} MIG {slot}")
        raise _error_class("NVMLError_NotFound")()

    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, info: Any) -> None:
        """Fills `info` with the recorded state and status, as NVML fills the structure."""
        for key, value in vars(self._device_call("nvmlDeviceGetGpuFabricInfo", handle)).items():
            setattr(info, key, value)

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> None:
        """Fills `info` with the recorded state, status and fabric health."""
        for key, value in vars(self._device_call("nvmlDeviceGetGpuFabricInfoV", handle)).items():
            setattr(info, key, value)

    def nvmlErrorString(self, code: int) -> str:
        return f"NVML error {code}"

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, slot: int) -> _Handle:
        if not isinstance(handle, _Handle):
            raise _error_class("NVMLError_InvalidArgument")()
        mig = (handle.calls.get("mig") or {}).get(str(slot))
        if mig is None:
            raise _error_class("NVMLError_NotFound")()
        return _Handle(mig, f"{handle.label} MIG {slot}")


# --- recording a live host ------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """An NVML answer as JSON: bytes as text, ctypes structures as dicts of their fields."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(
        value, (list, tuple, ctypes.Array)
    ):  # nvmlDeviceGetFieldValues answers a ctypes array
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {name: _plain(getattr(value, name)) for name, *_ in fields}
    if isinstance(value, types.SimpleNamespace):
        return {k: _plain(v) for k, v in vars(value).items()}
    return str(value)


class _RecordedHandle:
    """A device handle as the recorder hands it out: the real handle and where its answers go."""

    def __init__(self, real: Any, calls: dict[str, Any]) -> None:
        self.real, self.calls = real, calls


class RecordingNvml:
    """Wraps an NVML module and keeps the first answer of every call the suite makes."""

    def __init__(self, nv: Any, source: str = "") -> None:
        self.nv = nv
        replayed = getattr(nv, "replayed_from", None) if isinstance(nv, ReplayNvml) else None
        self.source = f"{source}, replaying {replayed}" if replayed else source
        self.system: dict[str, Any] = {}
        self.devices: dict[int, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.nv, name)
        if not name.startswith("nvml") or not callable(target):
            return target  # constants and error classes pass through
        if name == "nvmlInit":  # a host whose NVML cannot start replays as that host
            return lambda: self._keep(self.system, "nvmlInit", target)
        if name == "nvmlShutdown":
            return target
        if name == "nvmlDeviceGetHandleByIndex":
            return self._by_index
        if name == "nvmlDeviceGetHandleByUUID":
            return self._by_uuid
        if name == "nvmlDeviceGetMigDeviceHandleByIndex":
            return self._mig
        if name in ("nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV"):
            return self._fabric(name, target)
        if name.startswith("nvmlDevice") and name != "nvmlDeviceGetCount":
            return self._wrap_device(name, target)
        return self._wrap_system(name, target)

    def _keep(self, store: dict[str, Any], key: str, call: Callable[[], Any]) -> Any:
        try:
            value = call()
        except Exception as err:
            store.setdefault(key, error_answer(type(err).__name__))
            raise
        store.setdefault(key, _plain(value))
        return value

    def _wrap_system(self, name: str, target: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args: self._keep(self.system, call_key(name, *args), lambda: target(*args))

    def _wrap_device(self, name: str, target: Callable[..., Any]) -> Callable[..., Any]:
        def call(handle: Any, *args: Any) -> Any:
            if not isinstance(handle, _RecordedHandle):
                return target(handle, *args)
            return self._keep(
                handle.calls, call_key(name, *args), lambda: target(handle.real, *args)
            )

        return call

    def _fabric(self, name: str, target: Callable[..., Any]) -> Callable[..., Any]:
        """nvmlDeviceGetGpuFabricInfo(V) answers by filling the structure it is given: keep the
        structure's state, status and (V) fabric health, not the call's return value."""

        def call(handle: Any, ref: Any) -> Any:
            if not isinstance(handle, _RecordedHandle):
                return target(handle, ref)

            def filled() -> dict[str, Any]:
                target(handle.real, ref)
                info = getattr(ref, "_obj", ref)  # ctypes.byref keeps the structure as _obj
                kept = (
                    ("state", "status", "healthMask", "healthSummary")
                    if name.endswith("V")
                    else ("state", "status")
                )
                return {field: _plain(getattr(info, field, None)) for field in kept}

            return self._keep(handle.calls, name, filled)

        return call

    def _by_index(self, index: int) -> _RecordedHandle:
        calls = self.devices.setdefault(int(index), {})
        try:
            real = self.nv.nvmlDeviceGetHandleByIndex(index)
        except Exception as err:
            calls.setdefault("nvmlDeviceGetHandleByIndex", error_answer(type(err).__name__))
            raise
        return _RecordedHandle(real, calls)

    def _by_uuid(self, uuid: Any) -> Any:
        real = self.nv.nvmlDeviceGetHandleByUUID(uuid)
        wanted = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        for calls in self.devices.values():
            if calls.get("nvmlDeviceGetUUID") == wanted:
                return _RecordedHandle(real, calls)
            for mig in (calls.get("mig") or {}).values():
                if mig.get("nvmlDeviceGetUUID") == wanted:
                    return _RecordedHandle(real, mig)
        return real  # a device read_host never met: used, not recorded

    def _mig(self, handle: Any, slot: int) -> Any:
        if not isinstance(handle, _RecordedHandle):
            return self.nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        real = self.nv.nvmlDeviceGetMigDeviceHandleByIndex(
            handle.real, slot
        )  # an empty slot raises, unrecorded
        return _RecordedHandle(real, handle.calls.setdefault("mig", {}).setdefault(str(slot), {}))

    def recording(self) -> dict[str, Any]:
        """What was recorded, as a `gpuenv-nvml-recording/1` document (without the suite's
        figures)."""
        count = max(self.devices) + 1 if self.devices else 0
        system = dict(self.system)
        system.setdefault("nvmlDeviceGetCount", count)
        return {
            "format": RECORDING_FORMAT,
            "source": self.source,
            "system": system,
            "devices": [self.devices.get(i, {}) for i in range(count)],
        }
