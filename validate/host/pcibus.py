"""NVIDIA GPUs on the PCI bus, read from sysfs (stdlib only): a GPU without its driver is
still a GPU.

NVML needs the driver; the PCI bus does not. A fresh server before its driver goes in, or a
container started without `--gpus` on a GPU host, has no libnvidia-ml and no /dev/nvidia*, but
the kernel still lists its GPUs under /sys/bus/pci/devices/<address>/ with `vendor` 0x10de and
`class` 0x0300xx (VGA controller) or 0x0302xx (3D controller), as the kernel writes them
("0x10de\\n"; Documentation/ABI/testing/sysfs-bus-pci). The same chip's audio (0x0403), USB
(0x0c03) and UCSI functions, and NVSwitch (0x0680, a bridge), are not GPUs and are skipped.

Every reader takes the filesystem root as an argument, so tests pass a fake sysfs tree in a
folder; the suite's VALIDATE_SYSFS_ROOT (a test and diagnostic seam) sets it for a whole run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from validate.envvars import sysfs_root
from validate.host.pci_ids import NVIDIA_VENDOR, PciTable, product_for

#: PCI base class 0x03 (display), subclasses VGA-compatible (0x00) and 3D controller (0x02).
GPU_CLASSES = (0x0300, 0x0302)


@dataclass(frozen=True)
class PciGpu:
    """One NVIDIA GPU function on the PCI bus."""

    address: str  # "0000:65:00.0"
    device_id: int
    class_code: int  # 24 bits: 0x030200
    subsystem_vendor: int | None = None
    subsystem_device: int | None = None
    driver: str | None = None  # the kernel driver bound to it (nvidia, vfio-pci, nouveau), if any

    def product(self, table: PciTable | None = None) -> str:
        """'H100 SXM5 80GB (PCI 10de:2330)', or the bare id when the table does not know it."""
        known = product_for(self.device_id, table)
        if known is None:
            return f"unknown NVIDIA GPU (PCI 10de:{self.device_id:04x}, not in pci_ids.yaml)"
        return known.label


def default_root() -> Path:
    """The root the suite reads: VALIDATE_SYSFS_ROOT when set, else the real one."""
    return sysfs_root()


def _hex(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii", errors="replace").strip(), 16)
    except (OSError, ValueError):
        return None


def nvidia_gpus(root: Path | str | None = None) -> list[PciGpu]:
    """The NVIDIA display and 3D controllers under `root`/sys/bus/pci/devices, by address; empty
    when sysfs cannot be read (not Linux, a sandbox): then the bus says nothing, never 'no GPU'
    as a fact the caller could not tell from that."""
    base = Path(root if root is not None else default_root()) / "sys" / "bus" / "pci" / "devices"
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    out = []
    for entry in entries:
        if _hex(entry / "vendor") != NVIDIA_VENDOR:
            continue
        device, klass = _hex(entry / "device"), _hex(entry / "class")
        if device is None or klass is None or klass >> 8 not in GPU_CLASSES:
            continue
        try:
            driver: str | None = (entry / "driver").resolve(strict=True).name
        except OSError:
            driver = None
        out.append(
            PciGpu(
                entry.name,
                device,
                klass,
                _hex(entry / "subsystem_vendor"),
                _hex(entry / "subsystem_device"),
                driver,
            )
        )
    return out


def in_container(root: Path | str | None = None) -> bool:
    """Docker (/.dockerenv), Podman (/run/.containerenv), or a container cgroup of PID 1."""
    base = Path(root if root is not None else default_root())
    if (base / ".dockerenv").exists() or (base / "run" / ".containerenv").exists():
        return True
    try:
        cgroup = (base / "proc" / "1" / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(word in cgroup for word in ("docker", "containerd", "kubepods", "libpod", "lxc"))
