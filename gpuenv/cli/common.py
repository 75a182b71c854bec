"""What every task shares: the Task class (fixed short flags), the team's settings read from
Invoke's config, the one StackRequest, progress, --dry, and errors mapped to exit codes.

This is the only place that reads Invoke's config: the library gets plain values.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

import invoke
from invoke.exceptions import Exit

from gpuenv.errors import BadInput, GpuenvError, NoCompatibleStack
from validate.signals import handling
from validate.text import mask_credentials, safe_text

if TYPE_CHECKING:  # progress loads rich's helpers: not at every command's start
    from gpuenv.progress import Say

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


def show(
    *parts: Any, sep: str = " ", end: str = "\n", file: Any = None, flush: bool = False
) -> None:
    """print(), for everything a task prints: paths and values may come from untrusted input (a
    capture's file name, a node's report, a config value), so control characters are shown as
    \\xNN, never sent to the terminal (an ESC in a --host file name could clear the screen or
    set the window title). Newlines and tabs, the layout of tables, are kept."""
    import sys

    text = sep.join(str(part) for part in parts).replace(
        "\r", "\\r"
    )  # a carriage return would hide what came before it
    text = mask_credentials(text)  # a mirror URL's password, quoted anywhere, is never printed
    print(
        safe_text(text, newlines=True, limit=len(text)),
        end=end,
        file=file or sys.stdout,
        flush=flush,
    )


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


# ---------------------------------------------------------------- the team's settings (Invoke's
# config)


def _label(path: Any, fallback: str) -> str:
    if not path:
        return fallback
    p = Path(str(path))
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def config_layers(config: Any) -> list[Any]:
    """Invoke's layers, in its merge order, as (label, `gpuenv` section, folder) for
    gpuenv.cli.config.

    Invoke merges them but keeps each one on the Config object; reading them here is how
    `invoke doctor` knows where a value came from, and how a `null` in one file is kept from
    hiding another file's value.
    """
    from gpuenv.cli.config import DEFAULT_ORIGIN, SECTION, Layer

    def section(name: str) -> Any:
        data = getattr(config, f"_{name}", None) or {}
        return data.get(SECTION) if isinstance(data, dict) else None

    def file_layer(name: str, fallback: str) -> Any:
        path = getattr(config, f"_{name}_path", None)
        folder = str(Path(str(path)).expanduser().resolve().parent) if path else None
        return Layer(_label(path, fallback), section(name), folder=folder)

    return [
        Layer(DEFAULT_ORIGIN, section("defaults") or {}),
        Layer(DEFAULT_ORIGIN, section("collection") or {}),
        file_layer("system", "system config"),
        file_layer("user", "user config"),
        file_layer("project", "project config"),
        Layer("environment", section("env") or {}, is_env=True),
        file_layer("runtime", "-f file"),
        Layer(
            "overrides", section("overrides") or {}
        ),  # Invoke's last layer: a program's own Config(overrides=...)
    ]


def team_settings(c: Any) -> Any:
    """The checked `gpuenv:` settings of this run (BadInput naming file, key or variable, and the
    fix). Read once per task and passed down: every helper below takes the Settings, not `c`."""
    from gpuenv.cli.config import check_variables, settings_from

    check_variables(os.environ)
    return settings_from(None, config_layers(c.config))


def stack_request(settings: Any, **cli: Any) -> Any:
    """The one StackRequest of a task: command-line values over invoke.yaml over defaults."""
    from gpuenv.cli.config import stack_request as build

    return build(cli, settings)


def resolve(request: Any) -> Any:
    """The stack of a StackRequest on this host, by the team's pin policy
    (gpuenv.compat.host.resolve_request)."""
    from gpuenv.compat.host import resolve_request

    return resolve_request(request.resolver_options(), pinned=request.pinned)


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


#: The options that choose a stack (the wheelhouse only narrows the choice, so it combines with a
#: remembered one).
STACK_CHOOSERS = (
    "cuda",
    "framework",
    "torch",
    "tensorflow",
    "python",
    "driver",
    "gpu_arch",
    "strict_driver",
    "platform",
)


def current_stack_reason(settings: Any, cli: dict[str, Any]) -> tuple[str, Any]:
    """Why a task with these options addresses the stack it does: ("options" | "pinned" |
    "remembered" | "floats", entry).

    Command-line stack options win, then the team's invoke.yaml pins, then the stack that `lock`
    or `build` last recorded for this project (envs/locks/current.json), else the stack floats
    (resolved for this host).
    """
    from gpuenv.envs import current
    from gpuenv.envs.locking import locks_root

    if any(cli.get(name) not in (None, "", False) for name in STACK_CHOOSERS):
        return "options", None
    if settings.pins() or settings.strict_driver:
        return "pinned", None
    entry = current.read(locks_root())
    return ("remembered", entry) if entry else ("floats", None)


def resolve_for_task(
    settings: Any, cli: dict[str, Any], announce: bool = True, **extra: Any
) -> tuple[Any, Any]:
    """(StackRequest, Stack) for a task that uses a stack (build, run, validate, push, install,
    export).

    With no stack option and no invoke.yaml pin, it is the project's remembered stack, said in
    one line on stderr (stdout stays the task's result).
    """
    import sys

    from gpuenv.envs import current
    from gpuenv.envs.locking import locks_root
    from gpuenv.errors import DataError

    why, entry = current_stack_reason(settings, cli)
    if why != "remembered":
        request = stack_request(settings, **cli, **extra)
        return request, resolve(request)
    where = current.current_file(locks_root())
    try:  # the file's values, not options: a failure names the file and the gpuenv that wrote it
        request = stack_request(settings, **{**cli, **entry.options()}, **extra)
        stack = resolve(request)
    except (BadInput, NoCompatibleStack) as err:
        raise entry.unusable(where, err.message) from None
    if stack.stack_id != entry.stack_id:
        raise DataError(
            f"{where} names {entry.stack_id}, but its options give {stack.stack_id} today (the "
            "compatibility data changed)",
            fix="give stack options, or rebuild with them so the project remembers the new stack",
        )
    if announce:
        show(
            f"stack: {stack.stack_id}, remembered from the last `invoke {entry.made_by}` "
            f"({where}); stack options choose another",
            file=sys.stderr,
            flush=True,
        )
    return request, stack


def remember_stack(stack: Any, request: Any, made_by: str, lock_file: Path, say: Say) -> None:
    """After `lock` or `build`: make `stack` the project's current stack, and say which lock is now
    current."""
    from gpuenv.envs import current
    from gpuenv.envs.locking import locks_root

    path, changed = current.record(
        locks_root(),
        stack,
        made_by=made_by,
        lock_file=lock_file,
        strict_driver=request.strict_driver,
    )
    if changed:
        say(
            f"current stack: {stack.stack_id} (lock {lock_file}), recorded in {path}: build, "
            "run, validate, push, install and export use it when no stack option is given"
        )


def is_dry(c: Any) -> bool:
    """Invoke's own `--dry` (`invoke --dry build ...`): print the plan, change nothing."""
    try:
        return bool(c.config.run.dry)
    except AttributeError:
        return False


def reporter(verbose: bool = False, quiet: bool = False) -> Any:
    from gpuenv.errors import BadInput
    from gpuenv.progress import Reporter

    if verbose and quiet:
        raise BadInput("--verbose and --quiet contradict each other", fix="give one of them")
    return Reporter.choose(verbose=verbose, quiet=quiet)


@dataclass(frozen=True)
class ChosenImage:
    """The image `run` and `validate` use, and the engine that has it (None only under --dry with
    --image: nothing asked the engine)."""

    ref: str
    name: str  # for people: the reference, or the stack and the image's tag
    cpu: bool  # a CPU image (from the stack, or from the image's labels): no GPU by default
    engine: Any


def image_or_stack(
    c: Any,
    settings: Any,
    image: str | None,
    stack_options: dict[str, Any],
    verbose: bool,
    quiet: bool,
) -> ChosenImage:
    """--image REF (pulled when missing), or the image of the stack the options resolve to, on
    this machine's engine (opened here, once for the task)."""
    from gpuenv.engine import Engine
    from gpuenv.errors import BadInput
    from gpuenv.images import plan as images
    from gpuenv.images import share
    from gpuenv.images.identity import checkout_suite
    from gpuenv.stack import check_image_platform

    if image:
        given = [f"--{k.replace('_', '-')}" for k, v in stack_options.items() if v]
        if given:
            raise BadInput(
                f"--image names the image, so {', '.join(given)} cannot choose one",
                fix="drop " + " ".join(given) + " or --image",
            )
        ref = share.parse_image_ref(image)
        if is_dry(c):
            return ChosenImage(ref, ref, False, None)
        engine = Engine.local()
        report = reporter(verbose, quiet)
        with report:
            share.ensure_image(engine, ref, progress=report.layer, say=report.phase)
        given_image = engine.image_info(ref)
        if given_image is not None:
            check_image_platform(ref, given_image.architecture, engine.architecture())
        return ChosenImage(ref, ref, images.is_cpu_image(engine, ref), engine)
    _request, stack = resolve_for_task(settings, stack_options)
    engine = Engine.local()
    ref = images.image_for_stack(engine, stack)
    info = engine.image_info(ref)
    suite = checkout_suite()
    if info is not None and suite is not None and info.labels.get(images.SUITE_LABEL) != suite:
        import sys

        # Never silent: the image of this lock was built with another suite (another checkout, or
        # before the suite changed here), and that is the suite that will judge this server.
        show(
            f"gpuenv: the image of {stack.stack_id} carries another validation suite than this "
            "checkout's: invoke build to use this one",
            file=sys.stderr,
        )
    return ChosenImage(ref, f"{stack.stack_id} ({engine.image_name(ref)})", stack.is_cpu, engine)
