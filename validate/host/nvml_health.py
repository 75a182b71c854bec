"""The NVML readings behind the health rows DCGM's health watches and diagnostic add to the
suite's own: the PCIe replay counter, the infoROM check, the temperature against the GPU's own
thresholds, NVLink error counters, the NVSwitch fabric's health, and the clock-event counters.

Readers only: they take the NVML module (pynvml, a replayed capture, or the recorder; nvml.py
alone imports pynvml) and the probe nvml.py reads every optional field through, which returns
None for an unsupported query and raises for a lost GPU. A reading NVML does not give stays
None, so its row says "not reported", never 0 or "healthy".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

Probe = Callable[[Callable[[], Any]], Any]

#: NVML field ids (nvml.h, NVML_FI_DEV_*), the same numbers as nvidia-ml-py's constants.
FI_PERF_POLICY_POWER = 74  # NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
FI_PERF_POLICY_SYNC_BOOST = 76  # NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST
FI_SW_THERM_SLOWDOWN = 269
FI_HW_THERM_SLOWDOWN = 270
FI_HW_POWER_BRAKE_SLOWDOWN = 271
FI_TEMPERATURE_SHUTDOWN_TLIMIT = 193
FI_TEMPERATURE_SLOWDOWN_TLIMIT = 194
FI_TEMPERATURE_GPU_MAX_TLIMIT = 196

#: The clock-event counters nvidia-smi prints ("Clocks Event Reasons Counters"), by NVML field id.
#: NVML counts nanoseconds (nvml.h: "... in ns"); nvidia-smi prints microseconds.
CLOCK_EVENT_COUNTERS = {
    "sw_power_cap": FI_PERF_POLICY_POWER,
    "sync_boost": FI_PERF_POLICY_SYNC_BOOST,
    "sw_thermal_slowdown": FI_SW_THERM_SLOWDOWN,
    "hw_thermal_slowdown": FI_HW_THERM_SLOWDOWN,
    "hw_power_brake_slowdown": FI_HW_POWER_BRAKE_SLOWDOWN,
}

#: nvmlTemperatureThresholds_t: the GPU's own limits, in degrees C.
THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN, THRESHOLD_GPU_MAX = 0, 1, 3

#: nvmlNvLinkErrorCounter_t: the counters DCGM's NVLink health watch reads (NVML_NVLINK_ERROR_DL_*).
NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}

#: nvmlGpuFabricInfo_v3's healthMask: (name, shift); each 2-bit field is 0 not supported, 1 true,
#: 2 false (NVML_GPU_FABRIC_HEALTH_MASK_*). Incorrect configuration is 4 bits: 0 not supported,
#: 1 none, higher values the kind of misconfiguration.
HEALTH_MASK_FLAGS = (("degraded_bandwidth", 0), ("route_recovery", 2), ("route_unhealthy", 4), ("access_timeout_recovery", 6))
HEALTH_MASK_CONFIGURATION_SHIFT = 8
INCORRECT_CONFIGURATIONS = {
    1: "none", 2: "incorrect system GUID", 3: "incorrect chassis serial number", 4: "no partition",
    5: "insufficient NVLinks", 6: "incompatible GPU firmware", 7: "invalid location", 8: "GPU state invalid",
}
#: nvmlGpuFabricInfo_v3's healthSummary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*).
HEALTH_SUMMARIES = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}

#: nvmlValueType_t -> the member of nvmlValue_t that holds the value.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


@dataclass
class HealthReadings:
    """One GPU's readings for the DCGM-style health rows; None where NVML or the capture has none."""

    pcie_replays: int | None = None  # since the driver loaded or the GPU was reset
    inforom_valid: bool | None = None  # nvmlDeviceValidateInforom: False = NVML_ERROR_CORRUPTED_INFOROM
    temperature_c: int | None = None
    slowdown_c: int | None = None
    shutdown_c: int | None = None
    max_operating_c: int | None = None
    # T.Limit form (what the 580+ captures of Ada, Hopper and Blackwell print): degrees left below
    # the GPU's limit, and the margins at which it slows down, shuts down, and leaves its operating
    # range. Live: nvmlDeviceGetMarginTemperature and the *_TLIMIT fields (smi_health.py: unconfirmed
    # that nvidia-smi prints exactly these).
    margin_c: int | None = None
    slowdown_margin_c: int | None = None
    shutdown_margin_c: int | None = None
    max_operating_margin_c: int | None = None
    nvlink_errors: dict[str, int] | None = None  # summed over the GPU's links
    fabric_health: dict[str, Any] | None = None
    clock_event_us: dict[str, int] | None = None  # time each reason held the clocks since the driver loaded


def field_value(nv: Any, handle: Any, probe: Probe, field_id: int) -> int | float | None:
    """One NVML field (nvmlDeviceGetFieldValues with one id), or None when it is not supported."""
    answer = probe(lambda: nv.nvmlDeviceGetFieldValues(handle, [field_id]))
    if not answer:
        return None
    entry = answer[0]
    if int(getattr(entry, "nvmlReturn", 1) or 0) != 0:
        return None
    member = _VALUE_MEMBERS.get(int(getattr(entry, "valueType", -1)))
    value = getattr(getattr(entry, "value", None), member, None) if member else None
    return value if isinstance(value, (int, float)) else None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _inforom(nv: Any, handle: Any) -> bool | None:
    """True when the infoROM checksums verify, False when NVML says it is corrupted, else None.
    Not through the probe: its error is the answer, and a lost GPU is reported by other reads."""
    call = getattr(nv, "nvmlDeviceValidateInforom", None)
    if call is None:
        return None
    try:
        call(handle)
    except Exception as err:
        return False if type(err).__name__ == "NVMLError_CorruptedInforom" or getattr(err, "value", None) == 14 else None
    return True


def _nvlink_errors(nv: Any, handle: Any, probe: Probe) -> dict[str, int] | None:
    """Each counter summed over the links whose state NVML reports; None when no link answers."""
    totals: dict[str, int] = {}
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        if probe(lambda: nv.nvmlDeviceGetNvLinkState(handle, link)) is None:
            continue
        for name, counter in NVLINK_COUNTERS.items():
            value = probe(lambda: nv.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
            if value is not None:
                totals[name] = totals.get(name, 0) + int(value)
    return totals or None


def decode_fabric_health(mask: int | None, summary: int | None) -> dict[str, Any] | None:
    """healthMask and healthSummary in words; None when neither says anything."""
    out: dict[str, Any] = {}
    if summary in HEALTH_SUMMARIES:
        out["summary"] = HEALTH_SUMMARIES[summary]
    if mask is not None:
        for name, shift in HEALTH_MASK_FLAGS:
            bits = (int(mask) >> shift) & 0x3
            if bits in (1, 2):
                out[name] = bits == 1
        config = (int(mask) >> HEALTH_MASK_CONFIGURATION_SHIFT) & 0xF
        if config:
            out["incorrect_configuration"] = INCORRECT_CONFIGURATIONS.get(config, f"code {config}")
    return out or None


def _fabric_health(nv: Any, handle: Any, probe: Probe) -> dict[str, Any] | None:
    """nvmlDeviceGetGpuFabricInfoV with the v3 structure (healthMask, healthSummary; driver 550+)."""
    make, call = getattr(nv, "c_nvmlGpuFabricInfo_v3_t", None), getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None)
    if make is None or call is None:
        return None
    info = make()
    if probe(lambda: call(handle, nv.byref(info)) or True) is None:
        return None
    if int(getattr(info, "state", 0) or 0) == 0:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: no fabric
        return None
    return decode_fabric_health(_int(getattr(info, "healthMask", None)), _int(getattr(info, "healthSummary", None)))


def _clock_event_us(nv: Any, handle: Any, probe: Probe) -> dict[str, int] | None:
    out = {}
    for name, field in CLOCK_EVENT_COUNTERS.items():
        value = field_value(nv, handle, probe, field)
        if value is not None:
            out[name] = int(value) // 1000
    return out or None


def read_health(nv: Any, handle: Any, probe: Probe) -> HealthReadings:
    """Every reading of HealthReadings for one GPU, each on its own."""
    threshold = (lambda kind: _int(probe(lambda: nv.nvmlDeviceGetTemperatureThreshold(handle, kind))))
    return HealthReadings(
        pcie_replays=_int(probe(lambda: nv.nvmlDeviceGetPcieReplayCounter(handle))),
        inforom_valid=_inforom(nv, handle),
        temperature_c=_int(probe(lambda: nv.nvmlDeviceGetTemperature(handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0)))),
        slowdown_c=threshold(THRESHOLD_SLOWDOWN),
        shutdown_c=threshold(THRESHOLD_SHUTDOWN),
        max_operating_c=threshold(THRESHOLD_GPU_MAX),
        margin_c=_int(probe(lambda: nv.nvmlDeviceGetMarginTemperature(handle))),
        slowdown_margin_c=_int(field_value(nv, handle, probe, FI_TEMPERATURE_SLOWDOWN_TLIMIT)),
        shutdown_margin_c=_int(field_value(nv, handle, probe, FI_TEMPERATURE_SHUTDOWN_TLIMIT)),
        max_operating_margin_c=_int(field_value(nv, handle, probe, FI_TEMPERATURE_GPU_MAX_TLIMIT)),
        nvlink_errors=_nvlink_errors(nv, handle, probe),
        fabric_health=_fabric_health(nv, handle, probe),
        clock_event_us=_clock_event_us(nv, handle, probe),
    )
