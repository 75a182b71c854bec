"""The resolved stack: the one record every other part (locks, images, validation) is built from."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

CPU = "cpu"
FRAMEWORKS = ("torch", "tensorflow")
#: The conda platform names gpuenv plans for; a stack is of one of them (x86_64 is the default).
LINUX_64 = "linux-64"
LINUX_AARCH64 = "linux-aarch64"
#: What `platform.machine()` and Docker's engine info say, per platform.
MACHINES = {"x86_64": LINUX_64, "amd64": LINUX_64, "aarch64": LINUX_AARCH64, "arm64": LINUX_AARCH64}


def platform_of_machine(machine: str) -> str | None:
    """linux-64 / linux-aarch64 for a machine name (x86_64, aarch64, arm64), None for another."""
    return MACHINES.get(str(machine).strip().lower())


@dataclass(frozen=True)
class Stack:
    """A combination of CUDA, base image, Python and framework build that exists and works together.

    `cuda` is the container's CUDA minor ("12.1") or "cpu"; `cuda_version` the full version the
    base image ships ("12.1.1"); `framework_cuda` the CUDA the framework build was made for, which
    may be older (CUDA rule) or, under minor-version compatibility, newer within the same major.
    `pip_requirement` is the exact requirement line that installs the framework build (with
    `index_url` as its index when not PyPI).
    """

    cuda: str
    cuda_version: str | None
    min_driver: str | None
    base_image: str
    python: str
    framework: str
    framework_version: str
    wheel_variant: str | None
    index_url: str | None
    pip_requirement: str
    cudnn: str | None = None
    require_cuda: str | None = None
    gpu_archs: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default=(), compare=False)
    #: None in stack.json files written before it existed: the build's CUDA was then `cuda`.
    framework_cuda: str | None = None
    #: The CPU architecture it is built for, as a conda platform (linux-64, linux-aarch64); stack
    #: records written before it existed are linux-64.
    platform: str = LINUX_64

    def __post_init__(self) -> None:
        # A stack written without framework_cuda (older stack.json, hand-written) has its build on
        # its own CUDA.
        if self.framework_cuda is None and self.cuda != CPU:
            object.__setattr__(self, "framework_cuda", self.cuda)

    @property
    def is_cpu(self) -> bool:
        return self.cuda == CPU

    @property
    def stack_id(self) -> str:
        """A short name safe for folders and image tags, e.g. ``torch2.5.1-cu121-py3.11``."""
        accel = self.wheel_variant or (CPU if self.is_cpu else f"cuda{self.cuda}")
        if (
            self.wheel_variant
            and not self.is_cpu
            and self.framework_cuda
            and self.framework_cuda != self.cuda
        ):
            accel += f"-cuda{self.cuda}"  # the same build on another base image is another stack
        arch = "" if self.platform == LINUX_64 else "-" + self.platform.removeprefix("linux-")
        return f"{self.framework}{self.framework_version}-{accel}-py{self.python}{arch}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpu_archs"] = list(self.gpu_archs)
        data["reasons"] = list(self.reasons)
        data["stack_id"] = self.stack_id
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Stack":
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["gpu_archs"] = tuple(values.get("gpu_archs") or ())
        values["reasons"] = tuple(values.get("reasons") or ())
        values["platform"] = values.get("platform") or LINUX_64
        return cls(**values)


def lock_platforms(stack: Stack, asked: "list[str] | tuple[str, ...]") -> list[str]:
    """The platforms to lock `stack` for: the asked ones (default: the stack's own). A stack for
    another platform than linux-64 is that platform's builds only (an aarch64 build is not the
    x86_64 one), so it locks for itself alone; a platform the stack is not for is refused."""
    from gpuenv.errors import BadInput

    chosen = list(dict.fromkeys(asked)) or [stack.platform]
    if stack.platform not in chosen or (stack.platform != LINUX_64 and len(chosen) > 1):
        other = next(p for p in chosen if p != stack.platform)
        raise BadInput(
            f"{stack.stack_id} is a {stack.platform} stack; it cannot be locked for {other} "
            "(that platform's builds differ)",
            fix=f"lock each platform with its own stack: invoke lock --platform {other} resolves "
            f"the stack for {other}",
        )
    return chosen


def check_engine_platform(stack: Stack, arch: str) -> None:
    """An image is of its engine's architecture: a stack for another platform is refused in one
    line (its wheels would not run in the image), never built and found broken later."""
    from gpuenv.errors import BadInput

    engine_platform = platform_of_machine(arch)
    if engine_platform is not None and engine_platform != stack.platform:
        raise BadInput(
            f"{stack.stack_id} is a {stack.platform} stack, but the Docker engine builds {arch} "
            "images",
            fix=f"build it on a {stack.platform} engine (DOCKER_HOST), or plan for this one with "
            f"--platform {engine_platform}",
        )


def check_image_platform(ref: str, image_arch: str, engine_arch: str) -> None:
    """An image given by --image runs only on an engine of its architecture: another is refused
    in one line before a container starts (it would end in 'exec format error')."""
    from gpuenv.errors import BadInput

    image_platform, engine_platform = (
        platform_of_machine(image_arch),
        platform_of_machine(engine_arch),
    )
    if image_platform is None or engine_platform is None or image_platform == engine_platform:
        return
    raise BadInput(
        f"{ref} is a {image_platform} image ({image_arch}), but the Docker engine runs "
        f"{engine_arch} containers",
        fix=f"run it on a {image_platform} engine (DOCKER_HOST), or build the stack for this one "
        f"(invoke build --platform {engine_platform})",
    )


def stack_json(stack: Stack) -> str:
    """The stack record as compact, stable JSON (label value and /opt/gpuenv/stack.json)."""
    return json.dumps(stack.to_dict(), sort_keys=True, separators=(",", ":"))
