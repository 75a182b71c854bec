"""What a framework should see for a given CUDA_VISIBLE_DEVICES: pure logic, tested on observations.

The CUDA runtime reads CUDA_VISIBLE_DEVICES as a comma-separated list of entries, each either an
ordinal (in CUDA_DEVICE_ORDER; the suite always sets PCI_BUS_ID, which is NVML's order) or a UUID
(or a unique prefix of one: "GPU-..." for whole GPUs, "MIG-..." for MIG instances). The first
entry that names no device ends the list: the devices before it are visible, none after it. So
"" and "-1" hide every GPU, "0,7,1" on a 2-GPU host shows only GPU 0, and "0,0" names a GPU twice,
which hides every GPU. The masking check compares what PyTorch and TensorFlow report with this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MaskCase:
    """One masking experiment: the variable's value and the physical GPUs (UUIDs) expected, in order."""

    name: str
    visible_devices: str
    expected_uuids: tuple[str, ...]


def _strtoul(entry: str) -> int:
    """The number an entry starts with, as CUDA's strtoul reads it ("1gpu" -> 1); -1 for none."""
    match = re.match(r"^[+-]?\d+", entry.strip())
    return int(match.group(0)) if match else -1


def _resolve_prefix(entry: str, candidates: list[str]) -> str | None:
    """The one UUID `entry` is a prefix of; None when it names none or several."""
    matches = [uuid for uuid in candidates if uuid.startswith(entry)]
    return matches[0] if len(matches) == 1 else None


def expected_visible(visible_devices: str | None, uuids: list[str], mig_uuids: list[str] | None = None) -> list[str]:
    """Physical GPUs or MIG instances (UUIDs, in the order the framework numbers them) for a
    CUDA_VISIBLE_DEVICES value, following the rules PyTorch copies from CUDA
    (torch/cuda/__init__.py, `_parse_visible_devices` and `_transform_uuid_to_ordinals`):

    - a list of UUIDs (all "GPU-..." or all "MIG-...", unique prefixes allowed) ends at the first
      entry of another kind or naming no single device;
    - a list of ordinals is read like strtoul ("1gpu" is 1) and ends at the first negative or
      unreadable entry; an ordinal past the last GPU ends it too;
    - a device named twice makes the whole list empty.

    `uuids` is NVML's list in PCI bus order; None means the variable is unset (every GPU).
    """
    if visible_devices is None:
        return list(uuids)
    value = visible_devices.strip()
    for prefix, candidates in (("GPU-", uuids), ("MIG-", list(mig_uuids or []))):
        if value.startswith(prefix):
            picked: list[str] = []
            for entry in (e.strip() for e in value.split(",")):
                if not entry.startswith(prefix):
                    break
                uuid = _resolve_prefix(entry, candidates)
                if uuid is None:
                    break
                if uuid in picked:
                    return []
                picked.append(uuid)
            return picked
    ordinals: list[int] = []
    for entry in value.split(","):
        number = _strtoul(entry)
        if number in ordinals:
            return []
        if number < 0:
            break
        ordinals.append(number)
    out = []
    for number in ordinals:
        if number >= len(uuids):
            break
        out.append(uuids[number])
    return out


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
        raw.append(("repeated entry hides every GPU", "0,0"))
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


#: What --quick keeps: one case per rule ("-1" follows the same rule as "", hiding every GPU),
#: plus the last GPU's UUID.
QUICK_CASES = ("unset, PCI_BUS_ID order", "index 0", "empty string", "invalid entry cuts the list", "repeated entry hides every GPU")
#: The case a process already running the suite answers without a new child, when the caller
#: left CUDA_VISIBLE_DEVICES unset (PyTorch in the pytest process, TensorFlow's info probe).
UNSET_CASE = "unset, PCI_BUS_ID order"


def quick_cases(cases: list[MaskCase], uuids: list[str]) -> list[MaskCase]:
    last = f"uuid of GPU {len(uuids) - 1}"
    return [c for c in cases if c.name in QUICK_CASES or c.name == last]


def env_for_case(case: MaskCase) -> dict[str, str | None]:
    """Environment changes for one case (None = remove the variable)."""
    value = None if case.visible_devices == "<unset>" else case.visible_devices
    return {"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def normalise_pci_bus_id(bus_id: str) -> str:
    """NVML says "00000000:17:00.0", TensorFlow "0000:17:00.0": compare them in one form.
    Anything else ("unknown" when NVML could not read it) comes back lower-cased as it is, so
    it matches no real bus id instead of raising."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) not in (2, 3) or not all(re.fullmatch(r"[0-9a-f]+(\.[0-9a-f]+)?", p) for p in parts):
        return bus_id.strip().lower()
    domain = int(parts[0], 16) if len(parts) == 3 else 0
    return f"{domain:04x}:{parts[-2]}:{parts[-1]}"
