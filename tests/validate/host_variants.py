"""SYNTHETIC hosts: real captures (tests/validate/captures/, see its README) changed by one
documented edit each, to replay faults and old schemas no public capture shows together.

Each function names the real record it starts from and the edit; nothing else changes. The
spellings an edit introduces come from public captures of those drivers:
- driver 340: `<compute_processes>` / `<process_info>` (pid, process_name, used_memory) and
  `<clocks_throttle_reasons>` / `clocks_throttle_reason_*`, as in driver 340.24's
  `nvidia-smi -q -x` of a Tesla K20m with eight processes (init-at host-monitoring's nvidia-smi
  module, TEST_OUT); text "Compute Processes : None" as in 340.21's `nvidia-smi -q` of a K20Xm;
- the fabric states "Not Started", "In Progress", "Completed" (NVIDIA Fabric Manager user guide,
  https://docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf).
"""

from __future__ import annotations

import re
from pathlib import Path

CAPTURES = Path(__file__).parent / "captures"
A100_XML = CAPTURES / "nvidia-smi-xml" / "a100-sxm4-40gb-570.148.08.xml"
H100_XML = CAPTURES / "nvidia-smi-xml" / "h100x8-580.105.08.xml"
B200_XML = CAPTURES / "nvidia-smi-xml" / "b200x8-580.105.08.xml"
H100_TEXT = CAPTURES / "nvidia-smi-text" / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _one(pattern: str, replacement: str, text: str) -> str:
    """re.sub that must change at least one place (an edit that finds nothing is a broken test)."""
    changed, count = re.subn(pattern, replacement, text, flags=re.DOTALL)
    assert count, f"synthetic edit found no {pattern!r}"
    return changed


def driver340_kepler(processes: int = 8) -> str:
    """A100 capture as driver 340 printed a Kepler card: product "Tesla K20m" (its PCI id
    10de:1028), driver 340.24, `<processes>` replaced by `<compute_processes>` listing `processes`
    foreign processes (no type: 340 lists compute processes only), clock reasons under their 340
    name (clocks_throttle_*)."""
    entries = "".join(
        f"<process_info><pid>{5490 + n}</pid><process_name>/opt/solver/bin/solver</process_name>"
        "<used_memory>98 MiB</used_memory></process_info>\n"
        for n in range(processes)
    )
    text = _read(A100_XML)
    text = _one(r"<product_name>[^<]*", "<product_name>Tesla K20m", text)
    text = _one(
        r"<pci_device_id>[^<]*", "<pci_device_id>102810DE", text
    )  # 10de:1028, pci.ids "Tesla K20m"
    text = _one(r"<driver_version>[^<]*", "<driver_version>340.24", text)
    text = _one(
        r"<processes>\s*</processes>", f"<compute_processes>\n{entries}</compute_processes>", text
    )
    return _one(r"clocks_event_reason", "clocks_throttle_reason", text)


def without(path: Path, tag: str) -> str:
    """The capture with every `<tag>...</tag>` section removed (a driver that does not print it)."""
    return _one(rf"\s*<{tag}>.*?</{tag}>", "", _read(path))


def section_not_available(path: Path, tag: str) -> str:
    """The capture with `<tag>` printed as "N/A" (the driver could not read it)."""
    return _one(rf"<{tag}>.*?</{tag}>", f"<{tag}>N/A</{tag}>", _read(path))


def renamed(path: Path, name: str) -> str:
    """The capture with every GPU's product name replaced (another product, or an old driver's
    spelling of the same one) and its PCI device id taken out: identity goes by the id first, and
    the original GPU's id would name the original GPU."""
    text = _one(r"<product_name>[^<]*", f"<product_name>{name}", _read(path))
    return re.sub(r"<pci_device_id>[^<]*</pci_device_id>", "", text)


def power_brake_at_idle(path: Path = H100_XML) -> str:
    """Every GPU at idle with HW Slowdown and HW Power Brake Slowdown active and its clocks at
    86 MHz: the baseboard's power brake (issue 26's 8xH100)."""
    text = _read(path)
    for reason in ("hw_slowdown", "hw_power_brake_slowdown"):
        text = _one(
            rf"<clocks_event_reason_{reason}>Not Active",
            f"<clocks_event_reason_{reason}>Active",
            text,
        )
    return _one(
        r"(<clocks>\s*<graphics_clock>)[^<]*(</graphics_clock>\s*<sm_clock>)[^<]*",
        r"\g<1>86 MHz\g<2>86 MHz",
        text,
    )


def thermal_at_idle(path: Path = H100_XML) -> str:
    """Every GPU with HW Slowdown and HW Thermal Slowdown active."""
    text = _read(path)
    for reason in ("hw_slowdown", "hw_thermal_slowdown"):
        text = _one(
            rf"<clocks_event_reason_{reason}>Not Active",
            f"<clocks_event_reason_{reason}>Active",
            text,
        )
    return text


def power_cap_at_idle(path: Path = H100_XML) -> str:
    """Every GPU with SW Power Cap active: the power limit at work, not a fault."""
    return _one(
        r"<clocks_event_reason_sw_power_cap>Not Active",
        "<clocks_event_reason_sw_power_cap>Active",
        _read(path),
    )


def fabric(path: Path, state: str, status: str) -> str:
    """Every GPU's NVSwitch fabric in `state` / `status` (e.g. In Progress / N/A: the fabric
    manager is not running)."""
    text = _one(r"(<fabric>\s*<state>)[^<]*", rf"\g<1>{state}", _read(path))
    return _one(r"(<fabric>\s*<state>[^<]*</state>\s*<status>)[^<]*", rf"\g<1>{status}", text)


def text_old_spelling(processes: int = 0) -> str:
    """The H100 text capture as older drivers print it: "Compute Processes" (listing `processes`
    entries, or "None"), "Clocks Throttle Reasons"."""
    text = _read(H100_TEXT)
    if processes:
        block = "    Compute Processes\n" + "".join(
            f"        Process ID                                     : {7000 + n}\n"
            f"            Name                                       : /opt/solver/bin/solver\n"
            f"            Used GPU Memory                            : 98 MiB\n"
            for n in range(processes)
        )
        text = _one(r"    Processes +: None\n", block, text)
    else:
        text = _one(r"    Processes( +): None", r"    Compute Processes\1: None", text)
    return _one(r"Clocks Event Reasons\n", "Clocks Throttle Reasons\n", text)


def text_fabric(state: str) -> str:
    """The H100 text capture with every "Fabric / State" line set to `state`."""
    return _one(r"(    Fabric\n        State +: )Completed", rf"\g<1>{state}", _read(H100_TEXT))


def text_power_brake() -> str:
    """The H100 text capture with HW Slowdown and HW Power Brake Slowdown active."""
    text = _one(r"(        HW Slowdown +: )Not Active", r"\g<1>Active", _read(H100_TEXT))
    return _one(r"(            HW Power Brake Slowdown +: )Not Active", r"\g<1>Active", text)


# --- the DCGM-style health rows (validate/judge/health_watches.py)
# ---------------------------------
GB200_XML = CAPTURES / "nvidia-smi-xml" / "gb200x4-arm64.xml"
MOCK_COUNTERS_XML = (
    CAPTURES / "nvidia-smi-xml" / "MOCK-gb200-throttle-counters.xml"
)  # NVIDIA's NVML mock, not hardware


def clock_reasons_active(reasons: tuple[str, ...], path: Path = H100_XML) -> str:
    """Every GPU with exactly these clock-event reasons set Active (e.g. HW Slowdown alone,
    with neither of its sub-reasons)."""
    text = _read(path)
    for reason in reasons:
        text = _one(
            rf"<clocks_event_reason_{reason}>Not Active",
            f"<clocks_event_reason_{reason}>Active",
            text,
        )
    return text


def pcie_replays(count: int, path: Path = A100_XML) -> str:
    """Every GPU's `<replay_counter>` set to `count`."""
    return _one(r"<replay_counter>\d+", f"<replay_counter>{count}", _read(path))


def text_pcie_replays(count: int) -> str:
    """The H100 text capture with "Replays Since Reset" set to `count`."""
    return _one(r"(Replays Since Reset +: )\d+", rf"\g<1>{count}", _read(H100_TEXT))


def gpu_temperature(celsius: int, path: Path = A100_XML) -> str:
    """Every GPU's current temperature set (the A100 capture prints absolute thresholds: slowdown
    89 C, shutdown 92 C, max operating 85 C)."""
    return _one(r"<gpu_temp>\d+ C", f"<gpu_temp>{celsius} C", _read(path))


def tlimit_margin(celsius: int, path: Path = H100_XML) -> str:
    """Every GPU's T.Limit margin set (the H100 capture: slowdown at -2 C, shutdown at -8 C, max
    operating at 0 C)."""
    return _one(r"<gpu_temp_tlimit>-?\d+ C", f"<gpu_temp_tlimit>{celsius} C", _read(path))


def text_tlimit_margin(celsius: int) -> str:
    return _one(r"(GPU T\.Limit Temp +: )-?\d+ C", rf"\g<1>{celsius} C", _read(H100_TEXT))


def clock_counter(tag: str, micros: int, path: Path = MOCK_COUNTERS_XML) -> str:
    """Every GPU's clock-event counter `clocks_event_reasons_counters_<tag>` set to `micros` us."""
    return _one(
        rf"(<clocks_event_reasons_counters_{tag}>)\d+ us", rf"\g<1>{micros} us", _read(path)
    )


def text_clock_counter(label: str, micros: int) -> str:
    return _one(rf"(        {label} +: )\d+ us", rf"\g<1>{micros} us", _read(H100_TEXT))


def fabric_health(tag: str, value: str, path: Path = GB200_XML) -> str:
    """Every GPU's `<fabric><health><tag>` set to `value` (e.g. route_unhealthy True)."""
    return _one(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", _read(path))


def text_fabric_health(label: str, value: str) -> str:
    """The H100 text capture's "Fabric / Health / <label>" set to `value` (its fabric is
    Completed)."""
    return _one(rf"(            {re.escape(label)} +: )N/A", rf"\g<1>{value}", _read(H100_TEXT))


#: Every real record in captures/, and the fault variants the summary tests replay beside them.
RECORDS = sorted([*CAPTURES.glob("nvidia-smi-xml/*.xml"), *CAPTURES.glob("nvidia-smi-text/*.txt")])
VARIANTS = {
    "h100x8-power-brake.xml": power_brake_at_idle,
    "h100x8-thermal.xml": thermal_at_idle,
    "h100x8-power-cap.xml": power_cap_at_idle,
    "b200x8-fabric-not-started.xml": lambda: fabric(B200_XML, "Not Started", "N/A"),
    "k20m-driver-340.xml": driver340_kepler,
    "h100-text-old-spelling.txt": lambda: text_old_spelling(processes=3),
    "h100-text-power-brake.txt": text_power_brake,
}
