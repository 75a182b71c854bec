"""What every task is: the Task class (one short flag per meaning), the help texts of the shared
options, the stack options' names, --dry, and the mapping of errors and ending signals to exit
codes (a user mistake is one line, never a traceback)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from typing import Any, Callable, Iterator, TypeVar

import invoke
from invoke.exceptions import Exit

from gpuenv.errors import GpuenvError
from validate.signals import handling
from validate.text import mask_credentials, safe_text

F = TypeVar("F", bound=Callable[..., Any])

#: help= texts for the stack options that several tasks share, so they read the same everywhere.
STACK_HELP = {
    "cuda": "the container's CUDA, e.g. 12.2 as nvidia-smi shows it, or 'cpu' for a CPU-only "
    "stack; the framework build is the newest of that major whose CUDA is at most this "
    "(default: invoke.yaml gpuenv.cuda, else the newest the driver runs)",
    "framework": "torch or tensorflow (default: invoke.yaml gpuenv.framework, else torch)",
    "torch": "pin the PyTorch release, e.g. 2.3.1 or 2.3 (default: invoke.yaml gpuenv.torch)",
    "tensorflow": "pin the TensorFlow release, e.g. 2.15 (default: invoke.yaml gpuenv.tensorflow)",
    "python": "pin the Python version, e.g. 3.11 (default: invoke.yaml gpuenv.python)",
    "driver": "NVIDIA driver version to plan for, e.g. 535.104.05 (default: read from this host "
    "through NVML)",
    "gpu_arch": "GPU compute capability to plan for, e.g. 8.6 or sm_86; comma-separated for "
    "several (default: detected)",
    "strict_driver": "only builds whose CUDA the driver runs natively, on their own CUDA's "
    "image (default: invoke.yaml gpuenv.strict_driver, else a build of the same CUDA major may "
    "run on an older image by CUDA minor-version compatibility, e.g. a cu126 wheel on a 535 "
    "driver)",
    "wheelhouse": "folder of .whl files (air-gapped servers): when it holds framework wheels, "
    "only the releases, builds and Pythons it holds are considered (default: invoke.yaml "
    "gpuenv.wheelhouse)",
}
#: Options for long work, the same in every task that has them.
OUTPUT_HELP = {
    "verbose": "print the full log of the tools (every builder and installer line) instead of "
    "progress",
    "quiet": "print only the result and errors",
}

#: One short flag per meaning, the same in every task (Invoke's automatic ones differ per task).
SHORT_FLAGS = {
    "cuda": "c",
    "framework": "f",
    "python": "p",
    "backend": "b",
    "registry": "r",
    "image": "i",
    "gpus": "g",
    "tag": "t",
    "wheelhouse": "w",
    "output": "o",
    "json": "j",
    "json_": "j",
    "verbose": "v",
    "quiet": "q",
}


class GpuenvTask(invoke.Task):
    """An Invoke task whose short flags come from SHORT_FLAGS, so `-c` is --cuda everywhere."""

    def arg_opts(self, name: str, default: Any, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        short = SHORT_FLAGS.get(name)
        if short and short not in taken_names and short not in opts["names"]:
            opts["names"].append(short)
            taken_names.add(short)
        return opts


def task(**options: Any) -> Callable[[F], Any]:
    """`@task(help=...)`: Invoke's decorator with gpuenv's Task class and short flags."""
    options.setdefault("klass", GpuenvTask)
    options["auto_shortflags"] = False
    return invoke.task(**options)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a cancelled CI job, `kill`, `docker stop`) or SIGHUP (the operator's SSH session
    dropped), raised where the program is.

    A KeyboardInterrupt, so every cleanup that Ctrl-C runs (temporary lock folders removed,
    containers killed, builds cancelled, the suite container on a remote host removed) runs for
    them too. `signal_name` and `exit_code` say which, as shells report it (143, 129).
    """

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + int(signum)


#: The signals that end a task as Ctrl-C does, with their cleanups (SIGINT is Python's own).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into `Terminated` while a task runs (main thread only, where signals
    land). A signal the program was started ignoring (nohup) stays ignored."""
    with handling(ENDING_SIGNALS, _raise_terminated):
        yield


def user_errors(func: F) -> F:
    """Map GpuenvError to `Exit(message, code)`: a user mistake prints one line, never a traceback.

    SIGTERM and Ctrl-C end the task cleanly (cleanups run) with 143 and 130, as shells report them.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with terminate_as_interrupt():
                return func(*args, **kwargs)
        except Terminated as err:
            raise Exit(
                f"gpuenv: terminated ({err.signal_name}); nothing half-written was left",
                code=err.exit_code,
            ) from None
        except (
            GpuenvError
        ) as err:  # its text may quote a capture, a report or a path: made safe for the terminal
            raise Exit(
                f"gpuenv: {safe_text(mask_credentials(err.render()), limit=4000)}",
                code=err.exit_code,
            ) from None
        except BrokenPipeError:
            # the reader (`| head`) went away: stop quietly, as Unix tools do
            import sys

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise Exit(code=0) from None
        except KeyboardInterrupt:
            raise Exit("gpuenv: interrupted", code=130) from None

    return wrapper  # type: ignore[return-value]


#: The stack options, the same in every task that addresses a stack (tests/team walks every task's
#: signature against this list): what `stack_options(locals())` hands to stack_request.
STACK_OPTIONS = (
    "cuda",
    "framework",
    "torch",
    "tensorflow",
    "python",
    "driver",
    "gpu_arch",
    "strict_driver",
    "wheelhouse",
)


def stack_options(values: dict[str, Any]) -> dict[str, Any]:
    """The stack options out of a task's arguments (`stack_options(locals())`)."""
    return {name: values.get(name) for name in STACK_OPTIONS}


def is_dry(c: Any) -> bool:
    """Invoke's own `--dry` (`invoke --dry build ...`): print the plan, change nothing."""
    try:
        return bool(c.config.run.dry)
    except AttributeError:
        return False
