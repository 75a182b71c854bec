"""The NVML readings behind the health rows DCGM's health watches and diagnostic add to the
suite's own: the PCIe replay counter, the infoROM check, the temperature against the GPU's own
thresholds, NVLink error counters, the NVSwitch fabric's health, and the clock-event counters.

Readers only: they take the NVML module (pynvml, a replayed capture, or the recorder; nvml.py
alone imports pynvml) and the probe nvml.py reads every optional field through, which returns
None for an unsupported query and raises for a lost GPU. A reading NVML does not give stays
None, so its row says "not reported", never 0 or "healthy".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

Probe = Callable[[Callable[[], Any]], Any]

#: NVML field ids (nvml.h, NVML_FI_DEV_*), the same numbers as nvidia-ml-py's constants.
FI_PERF_POLICY_POWER = 74  # NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
FI_PERF_POLICY_THERMAL = 75  # the same in every release: nvmlDeviceGetViolationStatus(THERMAL)
FI_PERF_POLICY_SYNC_BOOST = 76  # NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST
FI_TEMPERATURE_SHUTDOWN_TLIMIT = 193
FI_TEMPERATURE_SLOWDOWN_TLIMIT = 194
FI_TEMPERATURE_GPU_MAX_TLIMIT = 196

#: The clock-event counters whose field ids never moved. NVML counts nanoseconds (nvml.h:
#: "... in ns"); nvidia-smi prints microseconds. "thermal_violation" is the thermal perf-policy
#: counter DCGM reads as DCGM_FI_DEV_THERMAL_VIOLATION: the stable reading of thermal time.
STABLE_CLOCK_EVENT_COUNTERS = {
    "sw_power_cap": FI_PERF_POLICY_POWER,
    "thermal_violation": FI_PERF_POLICY_THERMAL,
    "sync_boost": FI_PERF_POLICY_SYNC_BOOST,
}
#: The counters NVIDIA renumbered between driver releases (nvml_fields.yaml holds the ids).
RENUMBERED_CLOCK_EVENT_COUNTERS = (
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
FIELDS_FILE = Path(__file__).with_name("nvml_fields.yaml")

#: nvmlTemperatureThresholds_t: the GPU's own limits, in degrees C.
THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN, THRESHOLD_GPU_MAX = 0, 1, 3

#: nvmlNvLinkErrorCounter_t: the counters DCGM's NVLink health watch reads (NVML_NVLINK_ERROR_DL_*).
NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}

#: nvmlGpuFabricInfo_v3's healthMask: (name, shift); each 2-bit field is 0 not supported, 1 true,
#: 2 false (NVML_GPU_FABRIC_HEALTH_MASK_*). Incorrect configuration is 4 bits: 0 not supported,
#: 1 none, higher values the kind of misconfiguration.
HEALTH_MASK_FLAGS = (
    ("degraded_bandwidth", 0),
    ("route_recovery", 2),
    ("route_unhealthy", 4),
    ("access_timeout_recovery", 6),
)
HEALTH_MASK_CONFIGURATION_SHIFT = 8
INCORRECT_CONFIGURATIONS = {
    1: "none",
    2: "incorrect system GUID",
    3: "incorrect chassis serial number",
    4: "no partition",
    5: "insufficient NVLinks",
    6: "incompatible GPU firmware",
    7: "invalid location",
    8: "GPU state invalid",
}
#: nvmlGpuFabricInfo_v3's healthSummary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*).
HEALTH_SUMMARIES = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}

#: nvmlValueType_t -> the member of nvmlValue_t that holds the value.
_VALUE_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


@dataclass
class HealthReadings:
    """One GPU's readings for the DCGM-style health rows; None where NVML or the capture has
    none."""

    pcie_replays: int | None = None  # since the driver loaded or the GPU was reset
    inforom_valid: bool | None = (
        None  # nvmlDeviceValidateInforom: False = NVML_ERROR_CORRUPTED_INFOROM
    )
    temperature_c: int | None = None
    slowdown_c: int | None = None
    shutdown_c: int | None = None
    max_operating_c: int | None = None
    # T.Limit form (what the 580+ captures of Ada, Hopper and Blackwell print): degrees left below
    # the GPU's limit, and the margins at which it slows down, shuts down, and leaves its operating
    # range. Live: nvmlDeviceGetMarginTemperature and the *_TLIMIT fields (smi_health.py:
    # unconfirmed that nvidia-smi prints exactly these).
    margin_c: int | None = None
    slowdown_margin_c: int | None = None
    shutdown_margin_c: int | None = None
    max_operating_margin_c: int | None = None
    nvlink_errors: dict[str, int] | None = None  # summed over the GPU's links
    fabric_health: dict[str, Any] | None = None
    clock_event_us: dict[str, int] | None = (
        None  # time each reason held the clocks since the driver loaded
    )
    clock_event_note: str | None = None  # why the renumbered counters were not read, when not


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
        return (
            False
            if type(err).__name__ == "NVMLError_CorruptedInforom"
            or getattr(err, "value", None) == 14
            else None
        )
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
    """nvmlDeviceGetGpuFabricInfoV with the v3 structure (healthMask, healthSummary; driver 550+),
    else the v2 one (healthMask only) for a driver that refuses v3 (ArgumentVersionMismatch)."""
    call = getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None)
    if call is None:
        return None
    for structure in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
        make = getattr(nv, structure, None)
        if make is None:
            continue
        info = make()
        if probe(lambda: call(handle, nv.byref(info)) or True) is None:
            continue
        if (
            int(getattr(info, "state", 0) or 0) == 0
        ):  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: no fabric
            return None
        return decode_fabric_health(
            _int(getattr(info, "healthMask", None)), _int(getattr(info, "healthSummary", None))
        )
    return None


def _version(text: str) -> tuple[int, int] | None:
    """'580.65.06' (or the NVML version '12.580.65.06') -> (580, 65); None when unreadable."""
    parts = re.findall(r"\d+", text or "")
    if len(parts) >= 4 or (
        len(parts) == 3 and int(parts[0]) < 100
    ):  # the NVML version's CUDA major
        parts = parts[1:]
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else None


@lru_cache(maxsize=4)
def load_clock_event_ranges(
    path: Path = FIELDS_FILE,
) -> tuple[tuple[tuple[int, int], tuple[int, int], dict[str, int]], ...]:
    """nvml_fields.yaml's clock-event ranges: ((first, last) driver, ids), oldest first."""
    from validate.simpleyaml import TableError, load_table

    out = []
    for number, entry in enumerate(load_table(path).get("clock_event_counters", []), 1):
        first, last = (
            _version(str(entry.get("first_driver"))),
            _version(str(entry.get("last_driver"))),
        )
        ids = {name: entry.get(name) for name in RENUMBERED_CLOCK_EVENT_COUNTERS}
        if (
            first is None
            or last is None
            or not entry.get("source")
            or not all(isinstance(i, int) for i in ids.values())
        ):
            raise TableError(
                f"{path}: clock_event_counters entry {number} needs first_driver, last_driver, "
                f"{', '.join(RENUMBERED_CLOCK_EVENT_COUNTERS)} and source"
            )
        out.append((first, last, ids))
    return tuple(sorted(out))


def clock_event_field_ids(
    driver_version: str | None, ranges=None
) -> tuple[dict[str, int] | None, str]:
    """The field ids of the renumbered counters on this driver, or (None, why not). An id whose
    meaning on this driver no public source confirms is never asked for: on another release the
    same id is a power-smoothing setting, and its value would read as seconds of slowdown."""
    ranges = load_clock_event_ranges() if ranges is None else ranges
    known = "; ".join(
        f"{a[0]}.{a[1]:02d} to {b[0]}.{b[1]:02d}: {min(i.values())}-{max(i.values())}"
        for a, b, i in ranges
    )
    version = _version(driver_version or "")
    if version is None:
        return None, "the driver version is not reported, so their NVML field ids cannot be chosen"
    for first, last, ids in ranges:
        if first <= version <= last:
            return dict(ids), ""
    if ranges and version < ranges[0][0]:
        return (
            None,
            f"driver {driver_version}'s NVML has no such counters (added in driver "
            f"{ranges[0][0][0]}.{ranges[0][0][1]})",
        )
    return None, (
        f"which NVML field ids driver {driver_version} uses for them is unconfirmed (known: "
        f"{known}; validate/host/nvml_fields.yaml)"
    )


def clock_event_fields(driver_version: str | None) -> dict[str, int]:
    """Every clock-event counter's field id on this driver: the stable ones, and the renumbered
    ones where nvml_fields.yaml confirms their ids."""
    return dict(STABLE_CLOCK_EVENT_COUNTERS, **(clock_event_field_ids(driver_version)[0] or {}))


def _clock_event_us(
    nv: Any, handle: Any, probe: Probe, driver_version: str | None
) -> tuple[dict[str, int] | None, str | None]:
    """The counters in microseconds, and why the renumbered ones were not read (None if they
    were)."""
    why = clock_event_field_ids(driver_version)[1]
    fields = clock_event_fields(driver_version)
    out = {}
    for name, field in fields.items():
        value = field_value(nv, handle, probe, field)
        if value is not None:
            out[name] = int(value) // 1000
    return out or None, (why or None)


def read_health(
    nv: Any, handle: Any, probe: Probe, driver_version: str | None = None
) -> HealthReadings:
    """Every reading of HealthReadings for one GPU, each on its own. `driver_version` (NVML's
    nvmlSystemGetDriverVersion) picks the field ids of the counters NVIDIA renumbered."""
    counters, note = _clock_event_us(nv, handle, probe, driver_version)

    def threshold(kind: int) -> int | None:
        return _int(probe(lambda: nv.nvmlDeviceGetTemperatureThreshold(handle, kind)))

    return HealthReadings(
        pcie_replays=_int(probe(lambda: nv.nvmlDeviceGetPcieReplayCounter(handle))),
        inforom_valid=_inforom(nv, handle),
        temperature_c=_int(
            probe(
                lambda: nv.nvmlDeviceGetTemperature(handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
            )
        ),
        slowdown_c=threshold(THRESHOLD_SLOWDOWN),
        shutdown_c=threshold(THRESHOLD_SHUTDOWN),
        max_operating_c=threshold(THRESHOLD_GPU_MAX),
        margin_c=_int(probe(lambda: nv.nvmlDeviceGetMarginTemperature(handle))),
        slowdown_margin_c=_int(field_value(nv, handle, probe, FI_TEMPERATURE_SLOWDOWN_TLIMIT)),
        shutdown_margin_c=_int(field_value(nv, handle, probe, FI_TEMPERATURE_SHUTDOWN_TLIMIT)),
        max_operating_margin_c=_int(field_value(nv, handle, probe, FI_TEMPERATURE_GPU_MAX_TLIMIT)),
        nvlink_errors=_nvlink_errors(nv, handle, probe),
        fabric_health=_fabric_health(nv, handle, probe),
        clock_event_us=counters,
        clock_event_note=note,
    )
