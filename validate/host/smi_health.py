"""The sections of an nvidia-smi capture behind the DCGM-style health rows, as the NVML answers
validate/host/nvml_health.py reads (pure, stdlib only). A section the capture does not hold, or
prints as "N/A", gives no answer: the reader leaves it None and the row says "not reported".

Spellings read (XML tag / `nvidia-smi -q` label), with the public captures they were checked
against (tests/validate/captures/):
- PCIe replays: `pci/replay_counter` / "PCI / Replays Since Reset" (drivers 570 to 610);
- temperature, absolute form: `gpu_temp_slow_threshold`, `gpu_temp_max_threshold` (shutdown),
  `gpu_temp_max_gpu_threshold` / "GPU Slowdown Temp", "GPU Shutdown Temp", "GPU Max Operating
  Temp" (A100 on 570, RTX 2080 Super on 595 and 610);
- temperature, T.Limit form (degrees left below the GPU's limit): `gpu_temp_tlimit`,
  `gpu_temp_slow_tlimit_threshold`, `gpu_temp_max_tlimit_threshold`,
  `gpu_temp_max_gpu_tlimit_threshold` / "GPU T.Limit Temp", "GPU Slowdown T.Limit Temp", "GPU
  Shutdown T.Limit Temp", "GPU Max Operating T.Limit Temp" (H100, H200, B200, GB200, L40S on
  580 to 595). The T.Limit temperature is answered as NVML's margin temperature
  (nvmlDeviceGetMarginTemperature, "distance to nearest slowdown threshold" in nvml.h) and its
  thresholds as the NVML_FI_DEV_TEMPERATURE_*_TLIMIT fields; that nvidia-smi prints exactly these
  readings is assumed from the names (unconfirmed: no capture shows both forms side by side);
- clock-event counters: `clocks_event_reasons_counters/clocks_event_reasons_counters_*` / "Clocks
  Event Reasons Counters" (drivers 580 to 610; not printed by 570);
- NVSwitch fabric health: `fabric/health/*` / "Fabric / Health" (580 to 610; summary and the
  route/timeout flags read "Healthy", "True", "False"; "Full" bandwidth is the only bandwidth
  word in a public capture, so "Degraded" for a degraded one is assumed from NVML's
  NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW and not confirmed).
nvidia-smi -q does not print the infoROM check or NVLink error counters: those are read live
(NVML) and from gpuenv's own recording only.
"""

from __future__ import annotations

from typing import Any

from validate.host.bounds import ERROR_KEY, call_key
from validate.host.nvml_health import (
    FI_TEMPERATURE_GPU_MAX_TLIMIT,
    FI_TEMPERATURE_SHUTDOWN_TLIMIT,
    FI_TEMPERATURE_SLOWDOWN_TLIMIT,
    HEALTH_MASK_CONFIGURATION_SHIFT,
    HEALTH_MASK_FLAGS,
    HEALTH_SUMMARIES,
    INCORRECT_CONFIGURATIONS,
    THRESHOLD_GPU_MAX,
    THRESHOLD_SHUTDOWN,
    THRESHOLD_SLOWDOWN,
    clock_event_fields,
)
from validate.host.smi_values import Node, error_of, number, yes

#: Clock-event counters: the name nvml_health.clock_event_fields gives, its XML tag suffix and
#: label.
_COUNTER_SPELLINGS = {
    "sw_power_cap": ("sw_power_cap", "SW Power Capping"),
    "sync_boost": ("sync_boost", "Sync Boost"),
    "sw_thermal_slowdown": ("sw_therm_slowdown", "SW Thermal Slowdown"),
    "hw_thermal_slowdown": ("hw_therm_slowdown", "HW Thermal Slowdown"),
    "hw_power_brake_slowdown": ("hw_power_brake", "HW Power Braking"),
}
#: nvmlValueType_t of the answers written here.
_SIGNED_INT, _UNSIGNED_LONG_LONG = 5, 3


def _put(out: dict[str, Any], key: str, raw: str | None, value: Any) -> None:
    """An answer, the NVML error nvidia-smi printed instead, or nothing (not reported)."""
    error = error_of(raw)
    if error:
        out[key] = {ERROR_KEY: error}
    elif value is not None:
        out[key] = value


def _field(field_id: int, value_type: int, member: str, value: int) -> list[dict[str, Any]]:
    """One nvmlDeviceGetFieldValues answer, as nvidia-ml-py's c_nvmlFieldValue_t holds it."""
    return [
        {"fieldId": field_id, "nvmlReturn": 0, "valueType": value_type, "value": {member: value}}
    ]


def _int(text: str | None) -> int | None:
    value = number(text)
    return None if value is None else int(value)


def _temperatures(gpu: Node, out: dict[str, Any]) -> None:
    section = gpu.find("temperature|Temperature")
    if section is None:
        return
    for kind, path in (
        (THRESHOLD_SLOWDOWN, "gpu_temp_slow_threshold|GPU Slowdown Temp"),
        (THRESHOLD_SHUTDOWN, "gpu_temp_max_threshold|GPU Shutdown Temp"),
        (THRESHOLD_GPU_MAX, "gpu_temp_max_gpu_threshold|GPU Max Operating Temp"),
    ):
        raw = section.worst(path, higher=False)  # the lowest of twins: the strictest limit
        _put(out, call_key("nvmlDeviceGetTemperatureThreshold", kind), raw, _int(raw))
    raw = section.worst(
        "gpu_temp_tlimit|GPU T.Limit Temp", higher=False
    )  # degrees left: the fewest
    _put(out, "nvmlDeviceGetMarginTemperature", raw, _int(raw))
    for field, path in (
        (
            FI_TEMPERATURE_SLOWDOWN_TLIMIT,
            "gpu_temp_slow_tlimit_threshold|GPU Slowdown T.Limit Temp",
        ),
        (FI_TEMPERATURE_SHUTDOWN_TLIMIT, "gpu_temp_max_tlimit_threshold|GPU Shutdown T.Limit Temp"),
        (
            FI_TEMPERATURE_GPU_MAX_TLIMIT,
            "gpu_temp_max_gpu_tlimit_threshold|GPU Max Operating T.Limit Temp",
        ),
    ):
        raw = section.worst(path)  # a margin limit: the highest of twins is the strictest
        value = _int(raw)
        _put(
            out,
            call_key("nvmlDeviceGetFieldValues", [field]),
            raw,
            None if value is None else _field(field, _SIGNED_INT, "siVal", value),
        )


def _clock_event_counters(gpu: Node, out: dict[str, Any], driver_version: str | None) -> None:
    """Under the field ids the capture's driver answers them by (nvml_fields.yaml); a counter whose
    id on that driver is unconfirmed is left out, as the live reader would not ask for it."""
    section = gpu.find("clocks_event_reasons_counters|Clocks Event Reasons Counters")
    if section is None:
        return
    fields = clock_event_fields(driver_version)
    for name, (tag, label) in _COUNTER_SPELLINGS.items():
        raw = section.worst(f"clocks_event_reasons_counters_{tag}|{label}")
        micros = _int(raw)
        field = fields.get(name)
        if field is None:
            continue
        _put(
            out,
            call_key("nvmlDeviceGetFieldValues", [field]),
            raw,
            None if micros is None else _field(field, _UNSIGNED_LONG_LONG, "ullVal", micros * 1000),
        )


def fabric_health_mask(gpu: Node) -> tuple[int, int] | None:
    """(healthMask, healthSummary) as nvmlGpuFabricInfo_v3 holds them, from the capture's
    `<fabric><health>` words; None when the section is absent or says nothing."""
    health = gpu.find("fabric/health|Fabric/Health")
    if health is None:
        return None
    mask = 0
    words = {
        "degraded_bandwidth": {"full": 2, "degraded": 1}.get(
            (health.value("bandwidth|Bandwidth") or "").lower(), 0
        ),
    }
    for name, path in (
        ("route_recovery", "route_recovery_in_progress|Route Recovery in progress"),
        ("route_unhealthy", "route_unhealthy|Route Unhealthy"),
        ("access_timeout_recovery", "access_timeout_recovery|Access Timeout Recovery"),
    ):
        flag = yes(health.value(path))
        words[name] = 0 if flag is None else (1 if flag else 2)
    for name, shift in HEALTH_MASK_FLAGS:
        mask |= words[name] << shift
    config_text = (
        (health.value("incorrect_configuration|Incorrect Configuration") or "").strip().lower()
    )
    codes = {text.lower(): code for code, text in INCORRECT_CONFIGURATIONS.items()}
    if config_text and config_text not in ("n/a", "not supported"):
        mask |= codes.get(config_text, 15) << HEALTH_MASK_CONFIGURATION_SHIFT
    summaries = {text.lower(): code for code, text in HEALTH_SUMMARIES.items()}
    summary = summaries.get((health.value("summary|Summary") or "").strip().lower(), 0)
    return (mask, summary) if mask or summary else None


def answers(
    gpu: Node, fabric: dict[str, Any] | None, driver_version: str | None = None
) -> dict[str, Any]:
    """The NVML answers these sections give for one GPU (`fabric`: smi_sections.fabric's answer;
    `driver_version`: the capture's, which picks the clock-event counters' field ids)."""
    out: dict[str, Any] = {}
    raw = gpu.worst("pci/replay_counter|PCI/Replays Since Reset")
    _put(out, "nvmlDeviceGetPcieReplayCounter", raw, _int(raw))
    _temperatures(gpu, out)
    _clock_event_counters(gpu, out, driver_version)
    health = fabric_health_mask(gpu)
    if fabric is not None and health is not None:
        out["nvmlDeviceGetGpuFabricInfoV"] = dict(
            fabric, healthMask=health[0], healthSummary=health[1]
        )
    return out
