"""NVIDIA GPUs by PCI device id (pure, stdlib only): the table pci_ids.yaml, made by
scripts/pci_ids.py from the PCI ID Repository's pci.ids (BSD-3-Clause, PCI_IDS_NOTICE).

A GPU's PCI device id is what the hardware says it is, whatever the driver calls it: a GTX 1660
that driver 418 names "Graphics Device", a vGPU guest's profile ("GRID P4-1Q"), or a GPU with no
driver at all, seen only on the PCI bus. Identity goes by the id first, the name second.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

PCI_IDS_FILE = Path(__file__).with_name("pci_ids.yaml")
NVIDIA_VENDOR = 0x10DE


class PciIdsError(ValueError):
    """pci_ids.yaml is malformed; the message names the entry."""


@dataclass(frozen=True)
class PciProduct:
    """One NVIDIA PCI device id: its chip and product as pci.ids names them."""

    device_id: int
    chip: str
    name: str
    source: str
    confirmed: bool = True

    @property
    def label(self) -> str:
        """'H100 SXM5 80GB (PCI 10de:2330)', with '(unconfirmed)' when pci.ids names several."""
        note = ", unconfirmed" if not self.confirmed else ""
        return f"{self.name} (PCI 10de:{self.device_id:04x}{note})"


@dataclass(frozen=True)
class PciTable:
    products: dict[int, PciProduct]
    version: str  # pci.ids "Version:" the table was made from

    def get(self, device_id: int | None) -> PciProduct | None:
        return self.products.get(device_id) if device_id is not None else None


_COMBINED = re.compile(r"^\s*(?:0x)?([0-9a-fA-F]{4})([0-9a-fA-F]{4})\s*$")


def device_id_of(text: object) -> int | None:
    """The 16-bit NVIDIA device id from how NVML and nvidia-smi print the combined id: NVML's
    pciDeviceId (an int, device << 16 | vendor: 0x233010DE), nvidia-smi's "0x233010DE" (text and
    new XML) or "233010DE" (older XML). None for anything else, or another vendor's id."""
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, int):
        value = text
    else:
        match = _COMBINED.match(str(text))
        if match is None:
            return None
        value = int(match.group(1) + match.group(2), 16)
    if value & 0xFFFF != NVIDIA_VENDOR or not 0 <= value <= 0xFFFFFFFF:
        return None
    return value >> 16


@lru_cache(maxsize=4)
def load_pci_ids(path: Path = PCI_IDS_FILE) -> PciTable:
    """pci_ids.yaml as a lookup by device id; an id listed twice is an error."""
    from validate.simpleyaml import load_table

    data = load_table(path)
    release = (data.get("release") or [{}])[0]
    products: dict[int, PciProduct] = {}
    for number, entry in enumerate(data.get("gpus", []), start=1):
        ident, chip, name, source = (entry.get(k) for k in ("id", "chip", "name", "source"))
        well_formed = isinstance(ident, str) and re.match(r"^[0-9a-f]{4}$", ident)
        if not well_formed or not chip or not name or not source:
            raise PciIdsError(
                f"{path}: entry {number} needs id (4 hex digits, quoted), chip, name and source"
            )
        device = int(ident, 16)
        if device in products:
            raise PciIdsError(f"{path}: device id {ident} is listed twice (entry {number})")
        confirmed = entry.get("confirmed", True) not in (False, "false")
        products[device] = PciProduct(device, str(chip), str(name), str(source), confirmed)
    return PciTable(products, str(release.get("version") or "unknown"))


def product_for(device_id: int | None, table: PciTable | None = None) -> PciProduct | None:
    """The product of an NVIDIA device id, or None: not in the table (never guessed)."""
    return (table if table is not None else load_pci_ids()).get(device_id)


def capture_pci_info(bus: str | None, gpu: Any) -> dict[str, Any] | None:
    """nvmlDeviceGetPciInfo's answer from one GPU section of an nvidia-smi capture: the bus id,
    and the combined device id as NVML gives it (an int, device << 16 | vendor) where the capture
    prints one (<pci><pci_device_id>0x233010DE, older XML 20B010DE; text "Device Id : 0x...").
    None when the capture names no bus id."""
    if not bus:
        return None
    answer: dict[str, Any] = {"busId": bus}
    device = device_id_of(gpu.value("pci/pci_device_id|PCI/Device Id"))
    if device is not None:
        answer["pciDeviceId"] = device << 16 | NVIDIA_VENDOR
    return answer
