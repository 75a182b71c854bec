"""Which driver a GPU server needs (pure): the oldest that runs any supported framework build,
and the branch to install on a server whose GPUs are on the PCI bus without a driver.

The facts are driver_floor.yaml's, envs/compat.yaml's repeated for the suite (images carry only
validate/); tests/compat/test_driver_floor.py holds them equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from validate.host.archs import ArchTable, identify, load_archs
from validate.host.pcibus import PciGpu
from validate.judge.driver_gate import version_tuple

FLOOR_FILE = Path(__file__).with_name("driver_floor.yaml")


@dataclass(frozen=True)
class DriverFloors:
    framework_driver: str  # "450.80.02"
    framework_what: str
    branches: dict[str, str]  # compute capability -> first driver branch that runs it ("520")


@lru_cache(maxsize=2)
def load_floors(path: Path = FLOOR_FILE) -> DriverFloors:
    from validate.simpleyaml import load_table

    data = load_table(path)
    frameworks = (data.get("frameworks") or [{}])[0]
    driver = str(frameworks.get("driver") or "")
    if version_tuple(driver) is None or not frameworks.get("source"):
        raise ValueError(f'{path}: frameworks needs driver ("450.80.02") and source')
    branches: dict[str, str] = {}
    for number, entry in enumerate(data.get("branches", []), start=1):
        if not entry.get("source") or not str(entry.get("branch", "")).isdigit():
            raise ValueError(f'{path}: branches entry {number} needs branch ("520") and source')
        for cc in entry.get("compute_capabilities") or []:
            branches[str(cc)] = str(entry["branch"])
    return DriverFloors(driver, str(frameworks.get("what") or ""), branches)


def branch_of(driver: str) -> int:
    return (version_tuple(driver) or (0,))[0]


def too_old_for_frameworks(driver: str | None, floors: DriverFloors | None = None) -> str | None:
    """The complaint when `driver` runs no framework build gpuenv supports (None: it runs one,
    or its version cannot be read)."""
    floors = floors or load_floors()
    have, need = version_tuple(driver or ""), version_tuple(floors.framework_driver)
    if have is None or need is None or have >= need:
        return None
    return (
        f"driver {driver} runs no PyTorch or TensorFlow build gpuenv supports: the oldest "
        f"that does is {floors.framework_driver} ({floors.framework_what}); install a driver "
        f"of branch R{branch_of(floors.framework_driver)} or newer (`invoke doctor` names the "
        "branch for these GPUs)"
    )


def branch_to_install(
    compute_capabilities: list[str | None],
    floors: DriverFloors | None = None,
    table: ArchTable | None = None,
) -> str:
    """'R520 or newer': the oldest branch that runs these GPUs and a supported framework build;
    'R470 (the last that runs Kepler ...)' for a legacy family whose support ended."""
    floors, table = floors or load_floors(), table or load_archs()
    firsts = [int(floors.branches[c]) for c in compute_capabilities if c in floors.branches]
    branch = max([branch_of(floors.framework_driver), *firsts])
    last = [
        (int(b), arch) for arch, ccs, b, _ in table.legacy for c in compute_capabilities if c in ccs
    ]
    if last:
        newest, arch = min(last)
        if newest < branch:
            return (
                f"R{newest} (the last branch that runs {arch}; no supported framework build "
                "runs on it)"
            )
        return f"R{branch} to R{newest} (the last branch that runs {arch})"
    unknown = ""
    if None in compute_capabilities:
        unknown = " (a product not in gpu_archs.yaml may need a newer one)"
    return f"R{branch} or newer{unknown}"


def driverless_text(
    gpus: list[PciGpu], container: bool, nvml_error: str | None, table: ArchTable | None = None
) -> str:
    """The one line a server with NVIDIA GPUs on the PCI bus and no usable NVML gets: how many,
    their ids and products, why NVML failed, and the fix (a driver branch, or --gpus)."""
    table = table or load_archs()
    groups: dict[int, list[PciGpu]] = {}
    for gpu in gpus:
        groups.setdefault(gpu.device_id, []).append(gpu)
    named = ", ".join(f"{len(same)}x {same[0].product()}" for same in groups.values())
    known = [identify("", device, table).known for device in groups]
    ccs = [k.compute_capability if k is not None else None for k in known]
    bound = sorted({g.driver for g in gpus if g.driver and g.driver != "nvidia"})
    held = f"; bound to {', '.join(bound)}, not to nvidia" if bound else ""
    if container:
        fix = (
            "this is a container: start it with the host's GPUs (docker run --gpus all, or the "
            "NVIDIA runtime / CDI device); the host needs an NVIDIA driver of branch "
            + branch_to_install(ccs, table=table)
        )
    else:
        wanted = branch_to_install(ccs, table=table)
        fix = f"install an NVIDIA driver of branch {wanted} for them, then load it (or reboot)"
    why = nvml_error or "NVML sees no GPU"
    return f"{len(gpus)} NVIDIA GPU(s) on the PCI bus ({named}{held}) but {why}: {fix}"


def driverless_brief(gpus: list[PciGpu]) -> str:
    """driverless_text in short, for the lines around the one failing row that carries it in full
    (the start line, the host header, each skip): one run says the fix once."""
    return (
        f"{len(gpus)} NVIDIA GPU(s) on the PCI bus but no usable NVML "
        "(the 'NVML GPU count' row names them and the fix)"
    )
