"""Docker engines, through the Docker SDK for Python: the only gpuenv package that imports `docker`
(and paramiko, the SDK's SSH transport). tests/test_engine_owner.py keeps that true.

An `Engine` wraps one `docker.DockerClient` and serves every call made of that engine, as the
SDK's own `DockerClient` wraps one `APIClient`: `Engine.local()` for this machine's engine
(DOCKER_HOST and friends honoured) and `Engine.connect("ssh://user@host")` for a remote one.
Every wait is bounded: the SSH connect, the API handshake (a version is given, never negotiated
without a limit) and every read. The SDK's exceptions and streams become gpuenv errors with the
fix in the message. Builds use BuildKit where the engine offers it (through the engine's API:
the SDK cannot ask for it), else the classic builder, and tag only after a build succeeded; every
container started here is removed.

The package is split by concern, as docker-py's `APIClient` is composed of one mixin per concern
(docker/api/build.py, image.py, container.py), and imports run down this list:
- `common`: what every part shares (one-line reasons, wire failures, quiet cleanup);
- `causes`: why the engine refused (GPU runtime, registry, build), pure;
- `connection`: reaching an engine, local or over SSH, and why a remote one cannot be used;
- `images`: images, tags, push and pull; `build`: building one (`buildkit`: BuildKit's request
  and its progress trace); `containers`: running them;
- here: `Engine`, those parts composed into the one object a caller holds.

The SDK itself is imported inside the calls that need it, so importing this package stays cheap.
"""

from __future__ import annotations

from gpuenv.engine.build import BuildMixin, BuildResult
from gpuenv.engine.causes import (
    GPU_RUNTIME_CAUSES,
    GpuRuntimeCause,
    GpuRuntimeError,
    gpu_runtime_problem,
    registry_problem,
)
from gpuenv.engine.common import short_reason
from gpuenv.engine.connection import (
    AUTH_REFUSED,
    CONNECT_TIMEOUT,
    ENGINE_FIX,
    ENGINE_NOT_ANSWERING,
    NO_DOCKER,
    READ_TIMEOUT,
    UNREACHABLE,
    Connection,
    EngineUnavailable,
    SshTarget,
    bounded_call,
    remote_engine_problem,
    ssh_problem,
    ssh_target,
)
from gpuenv.engine.containers import (
    DEFAULT_SHM_SIZE,
    WORKDIR_IN_CONTAINER,
    Container,
    ContainersMixin,
    caller_user,
    container_options,
    device_requests,
    parse_gpus,
    parse_shm_size,
)
from gpuenv.engine.images import PULL_LIMIT, ImageInfo, ImagesMixin, LayerCallback, LayerProgress


class Engine(Connection, ImagesMixin, BuildMixin, ContainersMixin):
    """One Docker engine and the one SDK client that serves every call made of it: opened and
    described by `Connection`, its images, builds and containers by the mixins."""


__all__ = [
    "AUTH_REFUSED",
    "CONNECT_TIMEOUT",
    "DEFAULT_SHM_SIZE",
    "ENGINE_FIX",
    "ENGINE_NOT_ANSWERING",
    "GPU_RUNTIME_CAUSES",
    "NO_DOCKER",
    "PULL_LIMIT",
    "READ_TIMEOUT",
    "UNREACHABLE",
    "WORKDIR_IN_CONTAINER",
    "BuildResult",
    "Container",
    "Engine",
    "EngineUnavailable",
    "GpuRuntimeCause",
    "GpuRuntimeError",
    "ImageInfo",
    "LayerCallback",
    "LayerProgress",
    "SshTarget",
    "bounded_call",
    "caller_user",
    "container_options",
    "device_requests",
    "gpu_runtime_problem",
    "parse_gpus",
    "parse_shm_size",
    "registry_problem",
    "remote_engine_problem",
    "short_reason",
    "ssh_problem",
    "ssh_target",
]
