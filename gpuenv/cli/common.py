"""What every task shares: turning gpuenv errors into one-line messages with exit codes."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from invoke.exceptions import Exit

from gpuenv.errors import GpuenvError

F = TypeVar("F", bound=Callable[..., Any])

#: help= texts for the stack options that several tasks share, so they read the same everywhere.
STACK_HELP = {
    "cuda": "the container's CUDA, e.g. 12.2 as nvidia-smi shows it, or 'cpu' for a CPU-only stack; the framework build is "
    "the newest of that major whose CUDA is at most this (default: the newest the driver runs)",
    "framework": "torch or tensorflow (default: torch)",
    "torch": "pin the PyTorch release, e.g. 2.3.1 or 2.3",
    "tensorflow": "pin the TensorFlow release, e.g. 2.15",
    "python": "pin the Python version, e.g. 3.11",
    "driver": "NVIDIA driver version to plan for, e.g. 535.104.05 (default: read from this host through NVML)",
    "gpu_arch": "GPU compute capability to plan for, e.g. 8.6 or sm_86; comma-separated for several (default: detected)",
}


#: help= for --strict-driver, on the tasks that choose a stack for new work.
STRICT_DRIVER_HELP = (
    "only builds whose CUDA the driver runs natively, on their own CUDA's image (default: a build of the same CUDA major "
    "may run on an older image by CUDA minor-version compatibility, e.g. a cu126 wheel on a 535 driver)"
)


def user_errors(func: F) -> F:
    """Map GpuenvError to `Exit(message, code)`: a user mistake prints one line, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except GpuenvError as err:
            raise Exit(f"gpuenv: {err.render()}", code=err.exit_code) from None
        except BrokenPipeError:
            # the reader (`| head`) went away: stop quietly, as Unix tools do
            import os
            import sys

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise Exit(code=0) from None
        except KeyboardInterrupt:
            raise Exit("gpuenv: interrupted", code=130) from None

    return wrapper  # type: ignore[return-value]
