"""Why the engine refused, as pure functions from its words to a cause and the fix: the GPU
runtime (GpuRuntimeError, GPU_RUNTIME_CAUSES), a registry (push and pull) and a build.
An SSH engine that cannot be reached has its causes beside the connection (connection.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuenv.engine.common import short_reason
from gpuenv.errors import ToolError

# ---------------------------------------------------------------- why a GPU container did not start


class GpuRuntimeError(ToolError):
    """The engine could not give GPUs to a container; `cause` names why (see
    gpu_runtime_problem)."""

    def __init__(self, cause: str, message: str, *, fix: str | None = None) -> None:
        self.cause = cause
        super().__init__(message, fix=fix)


def run_error(err: Any, image: str, gpus: str) -> ToolError:
    """The error for a container the engine would not create or start: a GpuRuntimeError when GPUs
    were the cause."""
    reason = short_reason(err)
    problem = gpu_runtime_problem(str(err))
    if problem is not None:
        cause, fix = problem
        return GpuRuntimeError(cause, f"could not run {image}: {reason}", fix=fix)
    return ToolError(
        f"could not run {image}: {reason}", fix=f"check the command and the image (gpus={gpus})"
    )


@dataclass(frozen=True)
class GpuRuntimeCause:
    """One reason the engine could not give GPUs to a container, how it reads, and its fix."""

    cause: str
    pattern: str  # a regular expression, matched case-insensitively against the engine's error
    fix: str


#: Matched in order, first match wins. Each pattern is tested against real engine errors recorded
#: from public reports in tests/engine/nvidia_container_errors.yaml, which names where each came
#: from.
GPU_RUNTIME_CAUSES: tuple[GpuRuntimeCause, ...] = (
    GpuRuntimeCause(
        "driver too old",
        r"requirement error: unsatisfied condition: cuda",
        "the host's NVIDIA driver is older than the CUDA of the image: upgrade the driver "
        "there, or use an image built for an older CUDA (invoke resolve --driver VERSION picks "
        "one)",
    ),
    GpuRuntimeCause(
        "driver/library mismatch",
        r"driver/library version mismatch|rm version mismatch|api mismatch",
        "the loaded NVIDIA kernel module and the driver's libraries differ (a driver upgrade "
        "without a reboot): reboot the host, or unload and reload the nvidia kernel modules",
    ),
    GpuRuntimeCause(
        "gpu lost",
        r"gpu is lost|fallen off the bus",
        "a GPU fell off the bus: drain the host, then reset the GPU (nvidia-smi -r) or "
        "power-cycle the host",
    ),
    GpuRuntimeCause(
        "unknown device",
        r"device error: .*unknown device",
        "--gpus names a GPU this host does not have (or the toolkit lost track of it): check "
        "the indices/UUIDs with nvidia-smi -L there",
    ),
    GpuRuntimeCause(
        "driver not installed",
        r"load library failed: libnvidia-ml\.so|libnvidia-ml\.so\.1: cannot open shared object",
        "the NVIDIA driver is not installed (or not loaded) on the host: install it so "
        "nvidia-smi works there, then restart dockerd",
    ),
    GpuRuntimeCause(
        "driver rpc failed",
        r"driver rpc error|driver error: failed to process request",
        "the driver did not answer the toolkit: enable persistence mode there (nvidia-smi -pm "
        "1, or run nvidia-persistenced)",
    ),
    GpuRuntimeCause(
        "driver broken",
        r"nvml error: unknown error",
        "NVML fails on the host, usually a broken driver install: run nvidia-smi there; if it "
        "fails too, reinstall the driver",
    ),
    GpuRuntimeCause(
        "no gpu runtime",
        r"could not select device driver .*capabilities: \[\[gpu\]\]|unknown or invalid runtime "
        r"name: nvidia",
        "this engine cannot give GPUs to containers: install the NVIDIA Container Toolkit and "
        "restart dockerd, or pass --gpus none",
    ),
    GpuRuntimeCause(
        "toolkit failed",
        r"nvidia-container-cli|nvidia-container-runtime",
        "the NVIDIA Container Toolkit could not set up the container: run nvidia-container-cli "
        "-k -d /dev/tty info on the host to see why",
    ),
)


def gpu_runtime_problem(reason: str) -> tuple[str, str] | None:
    """(cause, fix) when an engine error says GPUs could not be given to a container, else None.
    Pure."""
    for entry in GPU_RUNTIME_CAUSES:
        if re.search(entry.pattern, reason, re.I):
            return entry.cause, entry.fix
    return None


# ---------------------------------------------------------------- why a build failed

_TLS_FAILURE = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|invalid peer certificate|UnknownIssuer|certificate verify failed",
    re.I,
)


def build_fix(reason: str, log: list[str]) -> str:
    """The fix for a failed build, from the engine's reason and the last lines of the build log."""
    text = reason.lower()
    if any(
        word in text
        for word in (
            "pull access denied",
            "manifest unknown",
            "registry",
            "no such host",
            "manifest for",
        )
    ):
        return (
            "the base image is not present locally and cannot be pulled: pull it, or pass "
            "--base-image with a local image"
        )
    # pip/requests say CERTIFICATE_VERIFY_FAILED, uv "invalid peer certificate: UnknownIssuer".
    if "certificate" in text or any(_TLS_FAILURE.search(line) for line in log[-40:]):
        return (
            "HTTPS inside the build does not trust your proxy: pass --ca-cert "
            "/etc/ssl/certs/ca-certificates.crt"
        )
    return "see the build log above; nothing was tagged"


# ---------------------------------------------------------------- why a registry refused


def registry_problem(reason: str, registry: str) -> tuple[str, str]:
    """(what happened, the fix) for an engine error while talking to `registry`. Pure."""
    text = reason.lower()
    if (
        "connection refused" in text
        or "connect: no route" in text
        or "i/o timeout" in text
        or "connection reset" in text
    ):
        return (
            f"the registry {registry} does not answer",
            f"start it or check --registry {registry} (HOST[:PORT]); nothing local was removed",
        )
    if "no such host" in text or "server misbehaving" in text or "lookup " in text:
        return (
            f"the registry host {registry.split(':')[0]} is unknown",
            "check the spelling of --registry (HOST[:PORT]); nothing local was removed",
        )
    if "server gave http response to https client" in text:
        return (
            f"the registry {registry} speaks plain HTTP",
            f'serve it with TLS, or add "{registry}" to insecure-registries in '
            "/etc/docker/daemon.json and restart dockerd",
        )
    if any(
        word in text
        for word in (
            "unauthorized",
            "authentication required",
            "denied",
            "forbidden",
            "no basic auth credentials",
        )
    ):
        return (
            f"the registry {registry} refused the credentials",
            f"run docker login {registry} (gpuenv uses the Docker credential store)",
        )
    if "manifest unknown" in text or "not found" in text:
        return (
            f"the registry {registry} has no such image",
            "check the reference (copy the HOST/gpuenv/<stack>@sha256:... that invoke push "
            "printed)",
        )
    return (
        f"the registry {registry} refused the request",
        "see the engine's reason above; nothing local was removed",
    )


def registry_of(ref: str) -> str:
    """The registry host a reference names (Docker Hub when its first part is no host)."""
    first = ref.split("/", 1)[0]
    return (
        first
        if "/" in ref and ("." in first or ":" in first or first == "localhost")
        else "docker.io"
    )
