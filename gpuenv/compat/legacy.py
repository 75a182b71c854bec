"""GPUs no current build targets: which driver branch and CUDA release line still serve them,
or that none gpuenv knows does (pure: the host's GPUs and the compatibility data in, lines out).

The facts are envs/compat.yaml's gpu_architectures: last_cuda (the last toolkit that builds for
the family) and last_driver_branch (NVIDIA's Unix graphics feature deprecation schedule: R470
runs Kepler last, R580 Maxwell, Pascal and Volta).
"""

from __future__ import annotations

from typing import Any

from gpuenv.compat.matrix import GpuArchitecture, Matrix


def _branch(driver: str | None) -> int | None:
    head = (driver or "").split(".")[0]
    return int(head) if head.isdigit() else None


def last_served(arch: GpuArchitecture, cc: str) -> str:
    """What still serves a legacy GPU, in the words `doctor` and the resolver's refusal share:
    "Kepler (cc 3.5): the last driver branch that runs it is R470, the last CUDA that builds for it
    11.8"."""
    return (
        f"{arch.name} (cc {cc}): the last driver branch that runs it is "
        f"R{arch.last_driver_branch}, the last CUDA that builds for it {arch.last_cuda}"
    )


def legacy_lines(gpus: list[dict[str, Any]], driver: str | None, matrix: Matrix) -> list[str]:
    """One line per GPU model that is unknown or whose architecture is past its last driver or
    CUDA line; nothing for GPUs current drivers and builds serve."""
    lines, seen = [], set()
    for gpu in gpus:
        name, cc = gpu.get("name") or "unnamed GPU", gpu.get("compute_capability")
        if (name, cc) in seen:
            continue
        seen.add((name, cc))
        if not cc:
            lines.append(
                f"{name}: unknown product, compute capability not reported: add it to "
                "validate/host/gpu_archs.yaml from https://developer.nvidia.com/cuda-gpus, or "
                "give --gpu-arch X.Y"
            )
            continue
        arch = matrix.architecture_of(cc)
        if arch is None:
            lines.append(
                f"{name} (cc {cc}): no architecture in envs/compat.yaml has this compute "
                "capability: no driver branch or CUDA release line gpuenv knows serves it"
            )
            continue
        if arch.last_driver_branch is None:
            continue
        last = int(arch.last_driver_branch)
        where = f"{name}: {last_served(arch, cc)}"
        have = _branch(driver)
        if have is not None and have < last:
            lines.append(
                f"{where}: driver {driver} is older: install an R{last} driver, then a CUDA "
                f"{arch.last_cuda} (or older) stack (--cuda {arch.last_cuda})"
            )
        else:
            lines.append(
                f"{where}: stay on R{last} and CUDA {arch.last_cuda} or older (--cuda "
                f"{arch.last_cuda}); no newer driver or CUDA line serves it"
            )
    return lines


def probe_legacy(nvml: dict[str, Any]) -> dict[str, Any]:
    """The doctor's probe: lines for the host's legacy or unknown GPUs (none when NVML is not
    read)."""
    from gpuenv.compat.matrix import load_matrix

    if not nvml.get("available"):
        return {"available": True, "lines": []}
    return {
        "available": True,
        "lines": legacy_lines(nvml.get("gpus", []), nvml.get("driver_version"), load_matrix()),
    }
