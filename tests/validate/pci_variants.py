"""SYNTHETIC variants of real captures (tests/validate/captures/, see its README and licences)
for identity by PCI device id: each function names the real capture it starts from and its
edits; nothing else changes. The device ids are the PCI ID Repository's
(validate/host/pci_ids.yaml); the names are what the issue reports drivers printing: driver 418
calling a GTX 1660 "Graphics Device", vGPU guests naming their profile.
"""

from __future__ import annotations

import re
from pathlib import Path

CAPTURES = Path(__file__).parent / "captures"
A100_XML = CAPTURES / "nvidia-smi-xml" / "a100-sxm4-40gb-570.148.08.xml"
RTX2080_TEXT = (
    CAPTURES / "nvidia-smi-text" / "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt"
)


def _sub(pattern: str, replacement: str, text: str) -> str:
    changed, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    assert count, f"synthetic edit found no {pattern!r}"
    return changed


def xml_gpu(
    name: str, device_id: str | None, driver: str = "570.148.08", cuda: str = "12.8"
) -> str:
    """The A100 capture (driver 570.148.08) with product_name `name`, pci_device_id `device_id`
    ("1BB310DE"; None takes the element out), driver and CUDA version replaced."""
    text = A100_XML.read_text(encoding="utf-8")
    text = _sub(r"<product_name>[^<]*", f"<product_name>{name}", text)
    text = _sub(r"<driver_version>[^<]*", f"<driver_version>{driver}", text)
    text = _sub(r"<cuda_version>[^<]*", f"<cuda_version>{cuda}", text)
    if device_id is None:
        return _sub(r"<pci_device_id>[^<]*</pci_device_id>", "", text)
    return _sub(r"<pci_device_id>[^<]*", f"<pci_device_id>{device_id}", text)


def text_driver418_gtx1660() -> str:
    """The RTX 2080 SUPER `nvidia-smi -q` capture (595.71.05) as driver 418.67 printed a GTX 1660:
    Product Name "Graphics Device", Device Id 0x218410DE (pci.ids: TU116 [GeForce GTX 1660]),
    Driver Version 418.67, CUDA Version 10.1 (418's CUDA)."""
    text = RTX2080_TEXT.read_text(encoding="utf-8")
    text = _sub(r"^(    Product Name\s+: ).*$", r"\g<1>Graphics Device", text)
    text = _sub(r"^(        Device Id\s+: ).*$", r"\g<1>0x218410DE", text)
    text = _sub(r"^(Driver Version\s+: ).*$", r"\g<1>418.67", text)
    return _sub(r"^(CUDA Version\s+: ).*$", r"\g<1>10.1", text)
