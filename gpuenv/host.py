"""Fill a resolver Request from this host's NVIDIA driver and GPUs where the user left gaps.

The resolver stays pure; this is the one place that decides which host facts go into a request.
"""

from __future__ import annotations

from gpuenv.resolve import Request, resolve_stack, split_arch_list
from gpuenv.stack import Stack


def read_host():
    """This host's driver and GPUs through NVML (`validate.nvml`, the one module that talks to it)."""
    from validate.nvml import read_host as _read

    return _read()


def request_for_host(
    *,
    driver: str | None = None,
    cuda: str | None = None,
    framework: str | None = None,
    torch: str | None = None,
    tensorflow: str | None = None,
    python: str | None = None,
    gpu_arch: str | None = None,
    detect: bool = True,
    strict_driver: bool = False,
    wheelhouse: str | None = None,
) -> Request:
    """A Request from command-line values; the driver and GPU architectures come from NVML when not given.

    With a wheelhouse folder the resolver considers only the framework wheels it holds.
    """
    from gpuenv.wheelhouse import wheel_names

    wheels = wheel_names(wheelhouse) if wheelhouse else None
    archs = tuple(split_arch_list(gpu_arch))
    source = "--driver"
    wants_gpu = str(cuda or "").strip().lower() not in ("cpu", "none")
    if detect and wants_gpu and (driver is None or not archs):
        host = read_host()
        if host.error is None and host.driver_version:
            if driver is None:
                driver, source = host.driver_version, "detected by NVML"
            if not archs:
                archs = tuple(sorted({g.compute_capability for g in host.gpus if g.compute_capability}))
    return Request(
        driver=driver,
        cuda=cuda,
        framework=framework,
        torch=torch,
        tensorflow=tensorflow,
        python=python,
        gpu_archs=archs,
        driver_source=source,
        strict_driver=bool(strict_driver),
        wheelhouse=wheels,
        wheelhouse_dir=str(wheelhouse) if wheelhouse else None,
    )


def resolve_for_host(**options: str | bool | None) -> Stack:
    """The stack for these command-line options on this host: what every task that takes them uses."""
    return resolve_stack(request_for_host(**options))  # type: ignore[arg-type]
