"""The request read once: every option parsed and checked against the others, in one `Wishes`
that each rule step of gpuenv.compat.resolve receives beside the candidates it narrows."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.rules.fixes import FixSearch, Resolver
from gpuenv.compat.rules.frameworks import pick_patch
from gpuenv.compat.rules.request import (
    FRAMEWORK_NAMES,
    Request,
    parse_cuda,
    parse_driver,
    parse_framework,
    parse_gpu_arch,
    parse_platform,
    parse_python,
    split_arch_list,
)
from gpuenv.errors import BadInput
from gpuenv.stack import CPU, LINUX_64


@dataclass
class Wishes:
    """What the request asks for, parsed: the framework and its pin, the CUDA wish (None, 'cpu'
    or X.Y), the driver, the Python pin, the GPUs' compute capabilities; the fixes a refusal
    offers; and the notes the steps leave for the stack's reasons."""

    request: Request
    matrix: Matrix
    fixes: FixSearch
    framework: str
    pin: str | None
    cuda: str | None
    driver: str | None
    python: str | None
    archs: list[str]
    notes: list[str] = field(default_factory=list)
    #: The CPU architecture of the server (linux-64 unless the request says otherwise).
    platform: str = LINUX_64

    @property
    def name(self) -> str:
        """The framework as people write it: PyTorch, TensorFlow."""
        return FRAMEWORK_NAMES[self.framework]

    @property
    def what(self) -> str:
        """The framework and its pin, for messages: "PyTorch 2.3", "TensorFlow"."""
        return f"{self.name} {self.pin}" if self.pin else self.name

    @property
    def gpu(self) -> bool:
        """Not --cuda cpu: the GPU rules apply (also with no CUDA wish at all)."""
        return self.cuda != CPU

    @property
    def cuda_version(self) -> str | None:
        """--cuda X.Y, when given as a version (not absent, not cpu)."""
        return self.cuda if self.cuda and self.cuda != CPU else None


def read_wishes(request: Request, matrix: Matrix, resolve: Resolver) -> Wishes:
    """Parse and cross-check the request's options; a BadInput names the bad value and the fix.
    `resolve` is the whole resolver, which the fixes of a refusal re-run."""
    platform = parse_platform(request.platform, request.platform_source)
    cuda = parse_cuda(request.cuda, matrix, request.blame("cuda"))
    driver = parse_driver(request.driver, request.driver_source)
    python = parse_python(request.python, request.blame("python"))
    archs = [
        parse_gpu_arch(a, matrix, request.blame("gpu_archs"))
        for a in split_arch_list(request.gpu_archs)
    ]
    framework = parse_framework(request.framework)
    for pin, label, releases, key in (
        (request.torch, "PyTorch", matrix.torch_releases, "torch"),
        (request.tensorflow, "TensorFlow", matrix.tensorflow_releases, "tensorflow"),
    ):
        if pin:  # an unknown release, blamed on where it came from (candidates are listed later)
            pick_patch(pin, label, list(releases), request.blame(key))
    if request.torch and request.tensorflow:
        raise BadInput(
            f"{request.blame('torch')} and {request.blame('tensorflow')} were both given",
            fix="a stack has one framework: build one image per framework",
        )
    implied = "torch" if request.torch else "tensorflow" if request.tensorflow else None
    if framework and implied and framework != implied:
        raise BadInput(
            f"--{implied} was given with --framework {framework}",
            fix=f"drop one, or use --framework {implied}",
        )
    framework = framework or implied or "torch"
    pin = request.torch if framework == "torch" else request.tensorflow
    fixes = FixSearch(request, matrix, resolve)
    return Wishes(
        request, matrix, fixes, framework, pin, cuda, driver, python, archs, platform=platform
    )
