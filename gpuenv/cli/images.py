"""Tasks that make, share and use images: build (lock if needed, then docker build), push, run,
images."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from invoke.exceptions import Exit

from gpuenv.cli.output import reporter, show
from gpuenv.cli.settings import image_or_stack, remember_stack, resolve_for_task, team_settings
from gpuenv.cli.task import OUTPUT_HELP, STACK_HELP, is_dry, stack_options, task, user_errors

if TYPE_CHECKING:  # compat loads the resolver: not at every command's start
    from gpuenv.compat.host import HostSource

_BUILD_HELP = {
    "platform": "the CPU architecture of the stack (linux-64, linux-aarch64; default: this "
    "host's); the Docker engine must be of it",
    **STACK_HELP,
    "base_image": "build FROM this image instead of the stack's nvidia/cuda tag (default: "
    "invoke.yaml gpuenv.base_image; a local image on air-gapped servers)",
    "tag": "an extra tag for the image, e.g. myteam/torch:prod (it always gets "
    "gpuenv/<stack>:<lock-hash> and :latest)",
    "no_cache": "rebuild every layer instead of reusing the engine's build cache",
    "ca_cert": "CA bundle (PEM) trusted for HTTPS during the build, e.g. a corporate proxy's; "
    "it stays out of every layer of the image",
    "wheelhouse": "folder of .whl files installed from before any index; when it holds every "
    "wheel of the lock the build asks no index and runs without network (air-gapped servers); "
    "also used to lock when the lock is missing (default: invoke.yaml gpuenv.wheelhouse)",
    "backend": "lock backend when the lock is missing: conda-lock or uv (default: invoke.yaml "
    "gpuenv.backend, else conda-lock; uv when a wheelhouse folder is given)",
    "team_file": "the team's extra packages, when the lock is missing (default: envs/team.yml)",
    "builder": "the engine's builder: auto (BuildKit where the engine offers it, else the "
    "classic builder), buildkit or classic",
    "offline": "ask no index and build with no network: every wheel of the (uv) lock must be in "
    "--wheelhouse (the missing ones are named first), the lock and the base image must be here "
    "(a complete wheelhouse does this without --offline too)",
    **OUTPUT_HELP,
}
_IMAGE_HELP = (
    "run in this image instead of the stack's, e.g. HOST/gpuenv/<stack>@sha256:... as invoke "
    "push printed it; pulled (by digest) when missing"
)


def _remainder_argv(remainder: str) -> list[str]:
    """The words after `--`, exactly as the shell passed them.

    Invoke joins them with spaces (losing quoting: `python -c "import os; ..."` would split), so
    they are taken from sys.argv when that is where the remainder came from.
    """
    argv = sys.argv
    if "--" in argv:
        words = argv[argv.index("--") + 1 :]
        if " ".join(words) == remainder:
            return words
    return shlex.split(remainder)


@task(help=_BUILD_HELP)
@user_errors
def build(
    c,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    driver=None,
    gpu_arch=None,
    base_image=None,
    tag=None,
    no_cache=False,
    ca_cert=None,
    wheelhouse=None,
    backend=None,
    team_file=None,
    strict_driver=False,
    offline=False,
    builder=None,
    verbose=False,
    quiet=False,
    platform=None,
):
    """Build the stack's image from its lock (locking first when there is none) and tag it."""
    from gpuenv.images.build import build_stack, describe_build, describe_plan, plan_stack_build

    # Every option is checked before anything slow: resolving, locking, the engine.
    host = check_build_arguments(locals())
    report = reporter(verbose, quiet)
    settings = team_settings(c)
    # --platform resolves the stack, never takes the remembered one
    chosen = {**stack_options(locals()), "platform": platform}
    request, stack = resolve_for_task(
        settings, chosen, host=host, backend=backend, base_image=base_image
    )
    order = build_order(stack, request, settings, locals())
    if is_dry(c):
        show(describe_plan(*plan_stack_build(order)))
        return
    from gpuenv.engine import Engine

    with report:
        built = build_stack(
            Engine.local(), order, say=report.say, phase=report.phase, log=report.output
        )
        remember_stack(stack, request, "build", built.plan.lock.path, report.say)
    report.result(describe_build(built))


def check_build_arguments(given: dict) -> HostSource:
    """`invoke build`'s own options (`given`: the task's arguments), each one line naming the value
    and the fix, before any work; the host the stack is planned for (this machine, or the
    platform --platform names)."""
    from gpuenv.cli.paths import check_paths
    from gpuenv.compat.host import HostSource
    from gpuenv.images import plan as images
    from gpuenv.images import share

    host = HostSource.checked(platform=given["platform"])
    paths = {name: given[name] for name in ("ca_cert", "wheelhouse", "team_file")}
    check_paths(**paths)
    images.check_build_options(
        tag=given["tag"], backend=given["backend"], builder=given["builder"], **paths
    )
    base_image = given["base_image"]
    if base_image:  # the engine's grammar, as for --tag: 'x y' is one line here, not a failed pull
        share.parse_image_ref(base_image, "--base-image")
    return host


def build_order(stack, request, settings, given: dict):
    """The build `given` (the task's arguments) and the settings ask for
    (gpuenv.images.build.BuildOrder)."""
    from gpuenv.cli.config import mirror_map
    from gpuenv.images import share
    from gpuenv.images.build import BuildOrder

    if request.base_image and not given["base_image"]:  # from invoke.yaml: checked as --base-image
        share.parse_image_ref(request.base_image, "gpuenv.base_image")
    ca_cert, team_file = given["ca_cert"], given["team_file"]
    return BuildOrder(
        stack=stack,
        backend=request.backend,
        platforms=tuple(request.platforms),
        base_image=request.base_image,
        tag=given["tag"],
        ca_cert=Path(ca_cert) if ca_cert else None,
        wheelhouse=Path(request.wheelhouse) if request.wheelhouse else None,
        team_file=Path(team_file) if team_file else None,
        nocache=given["no_cache"],
        offline=given["offline"],
        builder=given["builder"] or "auto",
        conda_channels=tuple(settings.conda_channels),
        mirrors=mirror_map(settings.conda_mirrors),
    )


@task(
    help={
        **STACK_HELP,
        "registry": "the registry, HOST[:PORT] (default: invoke.yaml gpuenv.registry); the "
        "image goes to HOST/gpuenv/<stack>",
        **OUTPUT_HELP,
    }
)
@user_errors
def push(
    c,
    registry=None,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    driver=None,
    gpu_arch=None,
    strict_driver=False,
    wheelhouse=None,
    verbose=False,
    quiet=False,
):
    """Push the stack's image (built from its current lock) to a registry, to share by digest.

    Prints HOST/gpuenv/<stack>@sha256:... to share.
    """
    from gpuenv.cli.config import parse_registry
    from gpuenv.engine import Engine
    from gpuenv.envs.locking import lock_directory
    from gpuenv.errors import BadInput
    from gpuenv.images import share

    settings = team_settings(c)
    if registry:
        host = parse_registry(registry)
    elif settings.registry:
        host = settings.registry
    else:
        raise BadInput(
            "no registry given",
            fix="pass --registry HOST[:PORT], or set gpuenv.registry in invoke.yaml",
        )
    report = reporter(verbose, quiet)
    _request, stack = resolve_for_task(settings, stack_options(locals()))
    engine = Engine.local()
    plan = share.plan_push(engine, stack, lock_directory(stack), host)
    if is_dry(c):
        show(
            f"stack: {stack.stack_id}\nimage: {plan.source}\n"
            f"would push: {', '.join(f'{plan.repository}:{t}' for t in plan.tags)}\n"
            "nothing pushed (--dry)"
        )
        return
    with report:
        report.phase(f"pushing {plan.source} to {plan.repository} ({', '.join(plan.tags)})")
        ref = share.push(engine, plan, progress=report.layer)
    report.result(ref)


@task(
    help={
        **STACK_HELP,
        "image": _IMAGE_HELP,
        "gpus": "GPUs given to the container: all, none, or indices/UUIDs like 0,1 (default: "
        "all; none for a CPU stack)",
        "shm_size": "size of /dev/shm for data loaders and NCCL (default: 8g)",
        "wheelhouse": "the wheel folder the image was built with (`invoke build --wheelhouse`), "
        "so the same stack is chosen (default: invoke.yaml gpuenv.wheelhouse)",
        **OUTPUT_HELP,
    }
)
@user_errors
def run(
    c,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    driver=None,
    gpu_arch=None,
    image=None,
    gpus=None,
    shm_size=None,
    strict_driver=False,
    wheelhouse=None,
    verbose=False,
    quiet=False,
):
    """Run a command in the stack's image: `invoke run --cuda 12.1 -- python train.py`.

    The current folder is mounted at /workspace (the working directory), logs are streamed,
    the container is removed, and the command's exit code is returned. With --image REF a
    missing image is pulled (by digest); the stack's own image is never pulled.
    """
    from gpuenv.engine import parse_gpus, parse_shm_size

    command = _remainder_argv(c.remainder or "")
    if gpus is not None:
        parse_gpus(gpus)  # checked before the stack is resolved or the engine asked
    if shm_size is not None:
        parse_shm_size(shm_size)
    chosen = image_or_stack(c, team_settings(c), image, stack_options(locals()), verbose, quiet)
    ref = chosen.ref
    # A CPU stack asks for no GPU by default: it then runs on hosts without the NVIDIA runtime.
    gpus = gpus if gpus is not None else ("none" if chosen.cpu else "all")
    if is_dry(c):
        show(
            f"would run {shlex.join(command) or '(the image command)'} in {ref} with GPUs "
            f"{gpus}, {Path.cwd()} at /workspace; nothing run (--dry)"
        )
        return
    options = {"shm_size": shm_size} if shm_size else {}
    code = chosen.engine.run_container(ref, command, gpus=gpus, workdir_mount=Path.cwd(), **options)
    if code:
        raise Exit(code=code)


@task()
@user_errors
def images(c):
    """List the gpuenv images on this engine, newest first, with their stack and size."""
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images_mod

    found = images_mod.built_images(Engine.local())
    if not found:
        show("no gpuenv images: build one with invoke build --cuda <version>|cpu")
        return
    from gpuenv.progress import format_size

    rows = []
    for img in found:
        labels = img.labels
        rows.append(
            [
                "\n".join(sorted(img.tags)) or "<untagged>",
                labels.get(images_mod.STACK_LABEL, ""),
                labels.get(images_mod.LABEL_PREFIX + "cuda", ""),
                labels.get(images_mod.LABEL_PREFIX + "min_driver", "") or "-",
                format_size(img.size),
                img.created[:19].replace("T", " "),
            ]
        )
    print_table(["IMAGE", "STACK", "CUDA", "MIN DRIVER", "SIZE", "CREATED"], rows)


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """A rich table on a terminal; the plain formatter's columns when piped (scripts parse them)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*headers, box=None, header_style="bold")
        for row in rows:
            table.add_row(*row)
        Console().print(table)
    else:
        from validate.report.tables import format_table

        show(format_table(headers, [[cell.replace("\n", ", ") for cell in row] for row in rows]))
