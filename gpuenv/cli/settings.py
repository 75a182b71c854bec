"""The team's settings and the stack a task addresses: Invoke's config layers read once per task
(this is the only module that reads Invoke's config: the library gets plain values), the one
StackRequest, the pinned / remembered / floating stack policy, and the image `run` and
`validate` use."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuenv.cli.output import reporter, show
from gpuenv.cli.task import STACK_OPTIONS, is_dry
from gpuenv.errors import BadInput, NoCompatibleStack

if TYPE_CHECKING:  # progress loads rich's helpers, compat the resolver: not at every start
    from gpuenv.compat.host import HostSource
    from gpuenv.progress import Say


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


def resolve(request: Any, host: HostSource | None = None) -> Any:
    """The stack of a StackRequest on `host` (the task's --host and --platform; None: this
    machine), by the team's pin policy (gpuenv.compat.host.resolve_request)."""
    from gpuenv.compat.host import THIS_HOST, resolve_request

    options = request.resolver_options()
    return resolve_request(options, pinned=request.pinned, host=host or THIS_HOST)


#: The options that choose a stack (the wheelhouse only narrows the choice, so it combines with a
#: remembered one).
STACK_CHOOSERS = (*(o for o in STACK_OPTIONS if o != "wheelhouse"), "platform")


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
    settings: Any,
    cli: dict[str, Any],
    announce: bool = True,
    host: HostSource | None = None,
    **extra: Any,
) -> tuple[Any, Any]:
    """(StackRequest, Stack) for a task that uses a stack (build, run, validate, push, install,
    export), resolved on `host` (the task's --host and --platform; None: this machine).

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
        return request, resolve(request, host)
    where = current.current_file(locks_root())
    try:  # the file's values, not options: a failure names the file and the gpuenv that wrote it
        request = stack_request(settings, **{**cli, **entry.options()}, **extra)
        stack = resolve(request, host)
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
