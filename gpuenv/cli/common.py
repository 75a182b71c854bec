"""What every task shares: turning gpuenv errors into one-line messages with exit codes."""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from typing import Any, Callable, Iterator, TypeVar

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


class Terminated(KeyboardInterrupt):
    """SIGTERM (a cancelled CI job, `kill`, `docker stop`), raised where the program is.

    A KeyboardInterrupt, so every cleanup that Ctrl-C runs (temporary lock folders removed,
    containers killed, builds cancelled) runs for SIGTERM too.
    """


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into `Terminated` while a task runs (main thread only, where signals land)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def user_errors(func: F) -> F:
    """Map GpuenvError to `Exit(message, code)`: a user mistake prints one line, never a traceback.

    SIGTERM and Ctrl-C end the task cleanly (cleanups run) with 143 and 130, as shells report them.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with terminate_as_interrupt():
                return func(*args, **kwargs)
        except Terminated:
            raise Exit("gpuenv: terminated (SIGTERM); nothing half-written was left", code=143) from None
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
