"""Which driver to install for these GPUs, asked of the resolver itself (declare once): the
branch of the stack `doctor` would pick, and the oldest driver under which any stack resolves.

Used where the driver is the question: a server whose GPUs are on the PCI bus with no driver,
and a driver too old for every supported framework build (418 runs CUDA 10.1).
"""

from __future__ import annotations

from gpuenv.compat.matrix import Matrix, load_matrix, version_key
from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.request import Request
from gpuenv.errors import GpuenvError
from gpuenv.stack import Stack


def candidate_drivers(matrix: Matrix) -> list[str]:
    """Every driver floor the data names, oldest first: where the resolver's answer can change."""
    floors = {m.minor_compat_min_driver for m in matrix.cuda_majors}
    floors |= {u.min_driver for c in matrix.cuda_releases for u in c.updates if u.min_driver}
    floors |= {f"{b.branch}.0" for b in matrix.driver_branches}
    return sorted(floors, key=version_key)


def stack_for(
    archs: tuple[str, ...], framework: str, driver: str | None, matrix: Matrix
) -> Stack | None:
    request = Request(driver=driver, framework=framework, gpu_archs=archs, explain=False)
    try:
        return resolve_stack(request, matrix)
    except GpuenvError:
        return None


def oldest_serving_driver(
    archs: tuple[str, ...], framework: str, matrix: Matrix | None = None
) -> Stack | None:
    """The stack the resolver picks under the oldest driver that gets one for these GPUs (its
    min_driver is that driver's floor), or None: no driver in the data serves them."""
    matrix = matrix or load_matrix()
    for driver in candidate_drivers(matrix):
        stack = stack_for(archs, framework, driver, matrix)
        if stack is not None:
            return stack
    return None


def branch(driver: str | None) -> str:
    head = (driver or "").split(".")[0]
    return f"R{head}" if head.isdigit() else "an unknown branch"


def advice_lines(
    archs: tuple[str, ...], driver: str | None, matrix: Matrix | None = None
) -> list[str]:
    """doctor's driver lines: for no driver, the branch of the stack it would pick and the oldest
    that serves these GPUs; for a driver too old for any build, that driver named as the blocker."""
    matrix = matrix or load_matrix()
    oldest = {fw: oldest_serving_driver(archs, fw, matrix) for fw in ("torch", "tensorflow")}
    served = [s for s in oldest.values() if s is not None and s.min_driver]
    if not served:
        ccs = ", ".join(archs) or "unknown"
        return [f"no driver in envs/compat.yaml serves GPUs of compute capability {ccs}"]
    floor = min(served, key=lambda s: version_key(str(s.min_driver)))
    oldest_text = (
        f"the oldest branch that serves these GPUs is {branch(floor.min_driver)} "
        f"(>= {floor.min_driver}, for {floor.stack_id})"
    )
    if driver is None:
        picked = stack_for(archs, "torch", None, matrix)
        newest = ""
        if picked is not None and picked.min_driver:
            newest = (
                f"install {branch(picked.min_driver)} or newer (>= {picked.min_driver}) "
                f"for the stack doctor picks, {picked.stack_id}; "
            )
        return [f"not installed: {newest}{oldest_text}"]
    if version_key(driver) < version_key(str(floor.min_driver)):
        blocker = (
            f"driver {driver} is the blocker: no supported PyTorch or TensorFlow build runs on it"
        )
        return [f"{blocker}; {oldest_text}"]
    return []
