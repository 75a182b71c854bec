"""NVML's numbers named as nvidia-smi prints them: the clock-event reason bits, the compute
modes, the CUDA version the driver encodes. Pure names, no NVML call: the readers (nvml.py), the
judges and the tests share them."""

from __future__ import annotations

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
#: sw_power_cap is not among them: a GPU under full load at its (default) power limit shows it.
BAD_THROTTLE_REASONS = frozenset(
    {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)

#: nvmlDeviceGetComputeMode values, named as nvidia-smi prints them.
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def cuda_version_text(encoded: int) -> str:
    """NVML encodes the CUDA version the driver supports as 1000*major + 10*minor (12040 ->
    12.4)."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def throttle_reason_names(mask: int) -> list[str]:
    """Decode NVML's clock-event bitmask into names (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(hex(unknown))
    return names
