"""What a framework should see for a given CUDA_VISIBLE_DEVICES: pure logic, tested on observations.

The CUDA runtime reads CUDA_VISIBLE_DEVICES as a comma-separated list of entries, each either an
ordinal (in CUDA_DEVICE_ORDER; we always set PCI_BUS_ID, which is NVML's order) or a GPU UUID (or
a unique prefix of one, "GPU-..."). The first entry that names no GPU ends the list: the GPUs
before it are visible, none after it. So "" and "-1" hide every GPU, and "0,7,1" on a 2-GPU host
shows only GPU 0. The masking check compares what PyTorch and TensorFlow report with this.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MaskCase:
    """One masking experiment: the variable's value and the physical GPUs (UUIDs) expected, in order."""

    name: str
    visible_devices: str
    expected_uuids: tuple[str, ...]


def _resolve_entry(entry: str, uuids: list[str]) -> str | None:
    """The UUID one entry names, or None when it names no GPU (which cuts the list)."""
    entry = entry.strip()
    if entry.isdigit():
        index = int(entry)
        return uuids[index] if index < len(uuids) else None
    if entry.startswith("GPU-"):
        matches = [uuid for uuid in uuids if uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None  # "-1", garbage, MIG entries (not expected on the hosts we validate)


def expected_visible(visible_devices: str | None, uuids: list[str]) -> list[str]:
    """Physical GPUs (UUIDs, in the order the framework numbers them) for a CUDA_VISIBLE_DEVICES.

    `uuids` is NVML's list in PCI bus order; None means the variable is unset (every GPU).
    """
    if visible_devices is None:
        return list(uuids)
    seen: list[str] = []
    for entry in visible_devices.split(","):
        uuid = _resolve_entry(entry, uuids)
        if uuid is None or uuid in seen:  # a repeated GPU is not used twice; we treat it as a cut
            break
        seen.append(uuid)
    return seen


def masking_cases(uuids: list[str]) -> list[MaskCase]:
    """The experiments the suite runs on a host with these GPUs (NVML order)."""
    raw: list[tuple[str, str | None]] = [("unset, PCI_BUS_ID order", None)]
    for index, uuid in enumerate(uuids):
        raw.append((f"index {index}", str(index)))
        raw.append((f"uuid of GPU {index}", uuid))
    if len(uuids) > 1:
        raw.append(("reversed", ",".join(str(i) for i in reversed(range(len(uuids))))))
    raw.append(("empty string", ""))
    raw.append(("-1", "-1"))
    if uuids:
        raw.append(("invalid entry cuts the list", f"0,{len(uuids) + 7},1"))
    cases = []
    for name, value in raw:
        cases.append(
            MaskCase(
                name=name,
                visible_devices="<unset>" if value is None else value,
                expected_uuids=tuple(expected_visible(value, uuids)),
            )
        )
    return cases


def env_for_case(case: MaskCase) -> dict[str, str | None]:
    """Environment changes for one case (None = remove the variable)."""
    value = None if case.visible_devices == "<unset>" else case.visible_devices
    return {"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def normalise_pci_bus_id(bus_id: str) -> str:
    """NVML says "00000000:17:00.0", TensorFlow "0000:17:00.0": compare them in one form."""
    parts = bus_id.strip().lower().split(":")
    domain = int(parts[0], 16) if len(parts) == 3 else 0
    return f"{domain:04x}:{parts[-2]}:{parts[-1]}"
