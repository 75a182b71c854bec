"""Fill a resolver Request from this host's NVIDIA driver and GPUs where the user left gaps.

The resolver stays pure; this is the one place that decides which host facts go into a request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.request import Request, parse_platform, split_arch_list
from gpuenv.stack import Stack


@dataclass(frozen=True)
class HostSource:
    """Which host a task plans for, handed down from the task to every host read (detection, the
    pinned-stack check, doctor's probes): a server's capture (`--host FILE`) instead of this
    machine, and the platform the task's `--platform` names. The default is this machine."""

    host_file: str | None = None
    platform: str | None = None

    @classmethod
    def checked(cls, host_file: str | None = None, platform: str | None = None) -> HostSource:
        """The task's `--host` and `--platform`, checked now, so a bad platform or a file that is
        no capture fails in one line before any slow work."""
        platform = parse_platform(platform) if platform else None
        if host_file:
            read_host(host_file)
        return cls(host_file or None, platform)


#: This machine, planned for its own platform: what a task without --host and --platform reads.
THIS_HOST = HostSource()


def platform_of_host(host, host_file: str | None) -> tuple[str | None, str]:
    """The platform a host's GPUs imply, and why: GH200, GB200, GB300 and GB10 are only made with
    Grace (aarch64), so a capture that names one is an aarch64 server. (None, "") when no GPU
    says."""
    from gpuenv.compat.matrix import load_matrix

    builds = load_matrix().aarch64
    if builds is None:
        return None, ""
    for gpu in host.gpus:
        product = builds.grace_gpu(gpu.name or "")
        if product:
            where = f" of --host {host_file}" if host_file else ""
            why = (
                f"inferred from the GPU: {gpu.name}{where} is only made with Grace, an Arm "
                "(aarch64) CPU"
            )
            return builds.platform, why
    return None, ""


def plan_platform(
    host: HostSource = THIS_HOST, given: str | None = None, given_by: str = "--platform"
) -> tuple[str | None, str]:
    """The platform to plan for and how it is known: the task's `--platform` (the command line
    beats the team's files), else `given` (lock's option or the team's setting), else a capture's
    Grace GPU, else this machine's CPU."""
    if host.platform:
        return host.platform, "--platform"
    if given:
        return given, given_by
    if host.host_file:
        return platform_of_host(read_host(host.host_file), host.host_file)
    return live_platform()


def live_platform() -> tuple[str | None, str]:
    """This machine's platform from `platform.machine()` (None for one gpuenv plans nothing for)."""
    import os

    from gpuenv.stack import platform_of_machine

    if hasattr(os, "uname"):  # what platform.machine() returns on POSIX, without its regexes
        machine = os.uname().machine
    else:
        import platform as host_platform

        machine = host_platform.machine()
    return platform_of_machine(machine), f"this host: platform.machine() is {machine}"


def read_host(host_file: str | None = None):
    """The driver and GPUs through NVML (`validate.host.nvml`, the one module that talks to it):
    this host's, or a server's from a capture (`nvidia-smi -q -x`, `-q`, or a `python -m validate
    --record` file) replayed through the same readers, so a stack is chosen for a server from a
    workstation. A file that is no capture is a BadInput naming it."""
    from validate.host.nvml import read_host as _read

    if not host_file:
        return _read()
    from gpuenv.errors import BadInput
    from validate.host.capture import CaptureError, load_capture
    from validate.host.replay import ReplayNvml

    try:
        recording = load_capture(host_file)
    except CaptureError as err:
        raise BadInput(f"--host {err}") from None  # each CaptureError names its own fix
    return _read(ReplayNvml(recording))


def cuda_host_refusal(host: Mapping[str, Any]) -> str | None:
    """Why no stack can be planned for this host whatever its driver, or None: a GPU driven by a
    vGPU hypervisor's manager (CUDA runs in the VMs it serves, not in containers beside it).

    The one owner of this rule: planning (`_refuse_hypervisor`) and doctor's "no stack" line
    (doctor.cuda_host_blocker) both ask it. `host` is the host as HostInfo.to_dict() writes it,
    the form doctor's report holds; the reason is validate.host.virtualization.hypervisor_reason."""
    from validate.host.virtualization import HYPERVISOR_MODES, hypervisor_reason

    for gpu in host.get("gpus") or []:
        if gpu.get("virtualization_mode") in HYPERVISOR_MODES:
            return hypervisor_reason(
                None,
                gpu["virtualization_mode"],
                gpu.get("host_vgpu_mode"),
                host.get("cuda_driver_version"),
            )
    return None


def _refuse_hypervisor(host, where: str) -> None:
    """No stack for a hypervisor: NoCompatibleStack (exit 3), as doctor's 'no stack' line."""
    from gpuenv.errors import NoCompatibleStack

    reason = cuda_host_refusal(host.to_dict())
    if reason is not None:  # the reason ends with its fix (plan inside a VM given a vGPU)
        raise NoCompatibleStack(f"{where}: {reason}")


def capture_archs(host, host_file: str) -> tuple[str, ...]:
    """The compute capabilities of a captured server's GPUs. nvidia-smi does not print them, so they
    come from validate/host/gpu_archs.yaml by product name; a product not there is an error that
    says so (never a guess) and how to go on."""
    from gpuenv.errors import BadInput

    unknown = sorted({g.name for g in host.gpus if not g.compute_capability})
    if unknown:
        raise BadInput(
            f"--host {host_file}: the compute capability of {', '.join(unknown)} is unknown (not "
            "in validate/host/gpu_archs.yaml)",
            fix="give it with --gpu-arch X.Y (https://developer.nvidia.com/cuda-gpus), or add "
            "the product there with its source",
        )
    return tuple(sorted({g.compute_capability for g in host.gpus if g.compute_capability}))


def pci_archs() -> tuple[str, ...]:
    """The compute capabilities of the NVIDIA GPUs on this host's PCI bus, known by their PCI
    device ids (validate/host/pci_ids.yaml, then gpu_archs.yaml); unknown ones are left out."""
    from validate.host.pcibus import nvidia_gpus

    gpus = nvidia_gpus()
    if not gpus:  # a machine without NVIDIA GPUs: the tables are not needed
        return ()
    from validate.host.archs import identify

    known = (identify("", gpu.device_id).known for gpu in gpus)
    return tuple(sorted({k.compute_capability for k in known if k is not None}))


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
    host: HostSource = THIS_HOST,
    origins: dict[str, str] | None = None,
    platform: str | None = None,
) -> Request:
    """A Request from command-line values; the driver and GPU architectures come from NVML when not
    given (from a captured server's with `host.host_file`).

    With a wheelhouse folder the resolver considers only the framework wheels it holds.
    """
    wheels = None
    if wheelhouse:
        from gpuenv.envs.wheelhouse import wheel_names

        wheels = wheel_names(wheelhouse)
    archs = tuple(split_arch_list(gpu_arch))
    source = "--driver"
    blamed = dict(origins or {})
    wants_gpu = str(cuda or "").strip().lower() not in ("cpu", "none")
    host_file = host.host_file
    # The platform even when the driver and GPUs are not detected (a pinned stack): a lock or image
    # is for one CPU architecture whatever the driver.
    given_by = dict(origins or {}).get("platform", "--platform")
    platform, platform_source = plan_platform(host, platform, given_by)
    if host_file and detect and wants_gpu and (driver is None or not archs):
        seen = read_host(host_file)
        if seen.error or not seen.driver_version:
            from gpuenv.errors import BadInput

            raise BadInput(
                f"--host {host_file}: the capture names no driver "
                f"({seen.error or 'no driver version'})",
                fix="capture it with nvidia-smi -q -x on the server",
            )
        _refuse_hypervisor(seen, f"--host {host_file}")
        if driver is None:
            driver, source = seen.driver_version, f"read from {host_file}"
        if not archs:
            archs = capture_archs(seen, host_file)
            blamed["gpu_archs"] = f"the GPUs of --host {host_file}"
    elif detect and wants_gpu and (driver is None or not archs):
        seen = read_host()
        if seen.error is None and seen.driver_version:
            _refuse_hypervisor(seen, "this host")
            if driver is None:
                driver, source = seen.driver_version, "detected by NVML"
            if not archs:
                archs = tuple(
                    sorted({g.compute_capability for g in seen.gpus if g.compute_capability})
                )
                blamed["gpu_archs"] = "this host's GPUs (NVML)"
        elif not archs:  # no driver: the GPUs the PCI bus lists still choose the kernels
            archs = pci_archs()
            if archs:
                blamed["gpu_archs"] = "this host's GPUs on the PCI bus (no driver)"
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
        origins=tuple(sorted(blamed.items())),
        platform=platform,
        platform_source=platform_source or "--platform",
    )


def resolve_for_host(host: HostSource = THIS_HOST, **options: str | bool | None) -> Stack:
    """The stack for these command-line options on `host` (this machine, or a capture): what
    every task that takes them uses."""
    return resolve_stack(request_for_host(host=host, **options))  # type: ignore[arg-type]


#: The way out when this host cannot run the stack the team pinned.
PIN_FIX = (
    "upgrade the driver, or pin another stack "
    "(gpuenv.cuda / gpuenv.torch / gpuenv.tensorflow in invoke.yaml)"
)


def resolve_request(
    options: dict[str, str | bool | None], *, pinned: bool, host: HostSource = THIS_HOST
) -> Stack:
    """The stack for a task's options (`StackRequest.resolver_options()`) on `host`.

    A pinned request (CUDA, Python and the framework release, from invoke.yaml or the command
    line) names one stack whatever the host: it is resolved without the host's driver and GPUs,
    which are then only checked. A host that cannot run it is an error that says so, never a
    silently different stack.
    """
    from gpuenv.errors import NoCompatibleStack

    if not pinned:
        return resolve_for_host(host, **options)
    stack = resolve_for_host(host, **{**options, "driver": None, "gpu_arch": None}, detect=False)
    if stack.is_cpu:
        return stack
    try:
        here = resolve_for_host(host, **options)
    except NoCompatibleStack as err:
        raise NoCompatibleStack(
            f"this host cannot run the pinned stack {stack.stack_id}: {err.message}", fix=PIN_FIX
        ) from None
    if here.stack_id != stack.stack_id:
        raise NoCompatibleStack(
            f"on this host the pinned options give {here.stack_id}, not the team's "
            f"{stack.stack_id} (driver >= {stack.min_driver})",
            fix=PIN_FIX,
        )
    return stack
