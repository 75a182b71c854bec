"""Fake sysfs trees in a tmp folder, as the kernel writes them ("0x10de\\n"), for the PCI-bus
readers (validate/host/pcibus.py) and the suite run with VALIDATE_SYSFS_ROOT pointing at one."""

from __future__ import annotations

from pathlib import Path


def pci_function(
    root: Path,
    address: str,
    vendor: int,
    device: int,
    klass: int,
    driver: str | None = None,
    subsystem: tuple[int, int] = (0x10DE, 0x1795),
) -> None:
    """One /sys/bus/pci/devices/<address>/ folder, each file as the kernel prints it."""
    folder = root / "sys" / "bus" / "pci" / "devices" / address
    folder.mkdir(parents=True)
    for name, value in (
        ("vendor", f"0x{vendor:04x}"),
        ("device", f"0x{device:04x}"),
        ("class", f"0x{klass:06x}"),
        ("subsystem_vendor", f"0x{subsystem[0]:04x}"),
        ("subsystem_device", f"0x{subsystem[1]:04x}"),
    ):
        (folder / name).write_text(value + "\n", encoding="ascii")
    if driver:
        target = root / "sys" / "bus" / "pci" / "drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        (folder / "driver").symlink_to(target)


def hgx_h100(root: Path) -> Path:
    """Two H100 SXM5 (3D controllers), each chip's NVSwitch bridge, an HD-audio function of a
    GeForce, an Intel host bridge: only the two H100s are GPUs."""
    pci_function(root, "0000:18:00.0", 0x10DE, 0x2330, 0x030200)
    pci_function(root, "0000:2a:00.0", 0x10DE, 0x2330, 0x030200, driver="vfio-pci")
    pci_function(root, "0000:05:00.0", 0x10DE, 0x22A3, 0x068000)  # NVSwitch: class 0x0680, a bridge
    pci_function(root, "0000:65:00.1", 0x10DE, 0x10F8, 0x040300)  # TU104 HD Audio Controller
    pci_function(root, "0000:00:00.0", 0x8086, 0x09A2, 0x060000)
    return root
