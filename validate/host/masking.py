"""What a framework should see for a given CUDA_VISIBLE_DEVICES: pure logic, tested on observations.

The CUDA runtime reads CUDA_VISIBLE_DEVICES as a comma-separated list of entries, each either an
ordinal (in CUDA_DEVICE_ORDER; the suite always sets PCI_BUS_ID, which is NVML's order) or a UUID
(or a unique prefix of one: "GPU-..." for whole GPUs, "MIG-..." for MIG instances). The first
entry that names no device ends the list: the devices before it are visible, none after it. So
"" and "-1" hide every GPU, "0,7,1" on a 2-GPU host shows only GPU 0, and "0,0" names a GPU twice,
which hides every GPU. The masking check compares what PyTorch and TensorFlow report with this.

Children only ever NARROW the caller's mask: a suite started with CUDA_VISIBLE_DEVICES=1,3 (or in a
container given GPUs 1 and 3) measures memory and masking on those GPUs only, never on 0 and 2.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

#: CUDA_DEVICE_ORDER as the suite sets it for itself and every child: NVML's order, so an
#: ordinal in CUDA_VISIBLE_DEVICES names the GPU NVML numbers so (CUDA's default is fastest first).
DEVICE_ORDER = "PCI_BUS_ID"
#: NVIDIA_VISIBLE_DEVICES under Kubernetes' "volume-mounts" device-list strategy: the device
#: plugin mounts one file per device under this folder, named by the device's UUID or index, and
#: the NVIDIA container runtime reads the names (NVIDIA/k8s-device-plugin, DEVICE_LIST_STRATEGY).
VOLUME_MOUNTS_DIR = "/var/run/nvidia-container-devices"


@dataclass(frozen=True)
class MaskCase:
    """One masking experiment: the variable's value and the physical GPUs (UUIDs) expected, in
    order."""

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


def expected_visible(
    visible_devices: str | None, uuids: list[str], mig_uuids: list[str] | None = None
) -> list[str]:
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


#: A UUID no GPU has: in a list of UUIDs it ends the list, as an ordinal past the last GPU does.
NO_SUCH_UUID = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff"


def masking_cases(
    uuids: list[str], caller: str | None = None, only: list[str] | None = None
) -> list[MaskCase]:
    """The experiments the suite runs on a host with these GPUs (NVML order), inside the caller's
    CUDA_VISIBLE_DEVICES (`caller`; None: unset). Every case names only GPUs the caller lets the
    suite see (by their ordinals in PCI order, which is what CUDA reads with
    CUDA_DEVICE_ORDER=PCI_BUS_ID), so a child sees the caller's GPUs or fewer, never others.

    `only` (a host with some GPUs in MIG mode): the whole GPUs to check. CUDA numbers MIG
    instances among the GPUs, so ordinals and "every GPU" cannot be predicted there; those GPUs
    are then named by UUID only."""
    visible = expected_visible(caller, uuids)
    if only is not None:
        visible = [u for u in visible if u in only]
    ordinal = {uuid: number for number, uuid in enumerate(uuids)}
    name = (lambda u: u) if only is not None else (lambda u: str(ordinal[u]))
    raw: list[tuple[str, str | None]] = []
    if only is None:
        raw.append((UNSET_CASE, None) if caller is None else (CALLER_CASE, caller))
    for uuid in visible:
        if only is None:
            raw.append((f"index {ordinal[uuid]}", str(ordinal[uuid])))
        raw.append((f"uuid of GPU {ordinal[uuid]}", uuid))
    if len(visible) > 1:
        raw.append(("reversed", ",".join(name(u) for u in reversed(visible))))
    raw.append(("empty string", ""))
    raw.append(("-1", "-1"))
    if visible:
        first = name(visible[0])
        bogus = NO_SUCH_UUID if only is not None else str(len(uuids) + 7)
        after = f",{name(visible[1])}" if len(visible) > 1 else ""
        raw.append(("invalid entry cuts the list", f"{first},{bogus}{after}"))
        raw.append(("repeated entry hides every GPU", f"{first},{first}"))
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
#: plus the first ordinal and the last GPU's UUID.
QUICK_CASES = ("empty string", "invalid entry cuts the list", "repeated entry hides every GPU")
#: The case a process already running the suite answers without a new child, when the caller
#: left CUDA_VISIBLE_DEVICES unset (PyTorch in the pytest process, TensorFlow's info probe).
UNSET_CASE = f"unset, {DEVICE_ORDER} order"
#: The first case when the caller set CUDA_VISIBLE_DEVICES: the child keeps the caller's value.
CALLER_CASE = "as the caller set it"


def quick_cases(cases: list[MaskCase], uuids: list[str]) -> list[MaskCase]:
    indexes = [c for c in cases if c.name.startswith("index ")]
    uuid_cases = [c for c in cases if c.name.startswith("uuid of GPU ")]
    keep = {UNSET_CASE, CALLER_CASE, *QUICK_CASES}
    keep |= {indexes[0].name} if indexes else set()
    keep |= {uuid_cases[-1].name} if uuid_cases else set()
    return [c for c in cases if c.name in keep]


def env_for_case(case: MaskCase) -> dict[str, str | None]:
    """Environment changes for one case (None = remove the variable)."""
    value = None if case.visible_devices == "<unset>" else case.visible_devices
    return {"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": DEVICE_ORDER}


def narrows(
    child: str | None, caller: str | None, uuids: list[str], mig_uuids: list[str] | None = None
) -> bool:
    """Does a child given CUDA_VISIBLE_DEVICES=`child` see only devices the caller's value lets it
    see?"""
    allowed = set(expected_visible(caller, uuids, mig_uuids))
    return set(expected_visible(child, uuids, mig_uuids)) <= allowed


def device_list(
    value: str | None, listdir: Callable[[str], list[str]] = os.listdir
) -> list[str] | None:
    """The devices NVIDIA_VISIBLE_DEVICES asks for: its comma-separated entries, or, for a path
    (Kubernetes' volume-mounts strategy, VOLUME_MOUNTS_DIR), the names of the files mounted there
    (UUIDs or indexes), sorted. None when the value is unset/void/none, or the folder is
    unreadable."""
    text = (value or "").strip()
    if text.lower() in ("", "void", "none"):
        return None
    if text.startswith("/"):
        try:
            names = listdir(text)
        except OSError:
            return None
        return sorted(n for n in names if n and not n.startswith("."))
    return [entry.strip() for entry in text.split(",") if entry.strip()]


def normalise_pci_bus_id(bus_id: str) -> str:
    """NVML says "00000000:17:00.0", TensorFlow "0000:17:00.0": compare them in one form.
    Anything else ("unknown" when NVML could not read it) comes back lower-cased as it is, so
    it matches no real bus id instead of raising."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) not in (2, 3) or not all(
        re.fullmatch(r"[0-9a-f]+(\.[0-9a-f]+)?", p) for p in parts
    ):
        return bus_id.strip().lower()
    domain = int(parts[0], 16) if len(parts) == 3 else 0
    return f"{domain:04x}:{parts[-2]}:{parts[-1]}"
