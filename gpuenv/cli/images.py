"""Tasks that make, share and use images: build (lock if needed, then docker build), push, run, images."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from invoke.exceptions import Exit

from gpuenv.cli.common import (
    OUTPUT_HELP,
    STACK_HELP,
    image_or_stack,
    is_dry,
    remember_stack,
    reporter,
    resolve_for_task,
    show,
    stack_options,
    task,
    team_settings,
    user_errors,
)
from gpuenv.cli.config import mirror_map
from gpuenv.stack import lock_platforms

_BUILD_HELP = {
    "platform": "the CPU architecture of the stack (linux-64, linux-aarch64; default: this host's); "
    "the Docker engine must be of it",
    **STACK_HELP,
    "base_image": "build FROM this image instead of the stack's nvidia/cuda tag (default: invoke.yaml gpuenv.base_image; a local image on air-gapped servers)",
    "tag": "an extra tag for the image, e.g. myteam/torch:prod (it always gets gpuenv/<stack>:<lock-hash> and :latest)",
    "no_cache": "rebuild every layer instead of reusing the engine's build cache",
    "ca_cert": "CA bundle (PEM) trusted for HTTPS during the build, e.g. a corporate proxy's; it stays out of every layer of the image",
    "wheelhouse": "folder of .whl files installed from before any index; when it holds every wheel of the lock the build asks "
    "no index and runs without network (air-gapped servers); also used to lock when the lock is missing (default: invoke.yaml gpuenv.wheelhouse)",
    "backend": "lock backend when the lock is missing: conda-lock or uv (default: invoke.yaml gpuenv.backend, else conda-lock; uv when a wheelhouse folder is given)",
    "team_file": "the team's extra packages, when the lock is missing (default: envs/team.yml)",
    "builder": "the engine's builder: auto (BuildKit where the engine offers it, else the classic builder), buildkit or classic",
    "offline": "ask no index and build with no network: every wheel of the (uv) lock must be in --wheelhouse (the missing ones "
    "are named first), the lock and the base image must be here (a complete wheelhouse does this without --offline too)",
    **OUTPUT_HELP,
}
_IMAGE_HELP = "run in this image instead of the stack's, e.g. HOST/gpuenv/<stack>@sha256:... as invoke push printed it; pulled (by digest) when missing"


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


def _build_plan_text(plan, lock_missing: bool) -> str:
    """What `invoke --dry build` prints: stack, lock, build arguments, labels, and the Dockerfile."""
    from gpuenv.images import plan as images

    lines = [f"stack: {plan.stack.stack_id}"]
    if lock_missing:
        lines.append(f"lock: none in {plan.lock_dir}: it would be locked first")
    else:
        lines.append(
            f"lock: {plan.lock.path} ({plan.lock.backend}, sha256 {plan.lock.sha256[:12]})"
        )
    lines.append(f"base image: {plan.base_image}")
    lines.append(f"tags: {', '.join(plan.tags or images.pending_tags(plan))}")
    if plan.no_index:
        lines.append(
            f"network: none (the wheelhouse {plan.wheelhouse} holds every wheel of the lock)"
        )
    lines.append("build arguments:")
    lines += [f"  {k}={v}" for k, v in sorted(plan.buildargs.items())]
    lines.append("labels:")
    lines += [f"  {k}={v}" for k, v in sorted(plan.labels.items())]
    lines.append(f"Dockerfile ({plan.docker_dir / 'Dockerfile'}):")
    lines += [
        f"  {line}"
        for line in (plan.docker_dir / "Dockerfile").read_text(encoding="utf-8").splitlines()
    ]
    lines.append("nothing was built (--dry)")
    return "\n".join(lines)


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
    from gpuenv.cli.paths import check_paths
    from gpuenv.compat.host import use_platform
    from gpuenv.envs import lockdir
    from gpuenv.envs.locking import ensure_lock, lock_directory
    from gpuenv.images import plan as images
    from gpuenv.images import share

    # Every option is checked before anything slow: resolving, locking, the engine.
    use_platform(platform)
    check_paths(ca_cert=ca_cert, wheelhouse=wheelhouse, team_file=team_file)
    images.check_build_options(
        tag=tag,
        ca_cert=ca_cert,
        wheelhouse=wheelhouse,
        team_file=team_file,
        backend=backend,
        builder=builder,
    )
    if (
        base_image
    ):  # the engine's grammar, as for --tag: 'x y' or 'Ubuntu' is one line here, not a failed pull
        share.parse_image_ref(base_image, "--base-image")
    report = reporter(verbose, quiet)
    # --platform resolves the stack, never takes the remembered one
    chosen = {**stack_options(locals()), "platform": platform}
    request, stack = resolve_for_task(c, chosen, backend=backend, base_image=base_image)
    wheelhouse = request.wheelhouse
    if request.base_image and not base_image:
        share.parse_image_ref(request.base_image, "gpuenv.base_image")
    lock_dir = lock_directory(stack)
    lock_missing = not lockdir.has_lock(lock_dir)
    lock_backend = request.backend or ("uv" if wheelhouse else "conda-lock")
    if offline and lock_missing:
        from gpuenv.errors import BadInput

        raise BadInput(
            f"--offline: there is no lock in {lock_dir}, and locking needs an index",
            fix="run invoke lock (same stack options, --backend uv) where PyPI answers, then carry envs/locks/ here",
        )
    settings = team_settings(c)
    mirrors = mirror_map(settings.conda_mirrors)
    options = dict(
        base_image=request.base_image,
        tag=tag,
        ca_cert=Path(ca_cert) if ca_cert else None,
        wheelhouse=Path(wheelhouse) if wheelhouse else None,
        nocache=no_cache,
        mirrors=mirrors,
    )
    if is_dry(c):
        if lock_missing:
            plan = _plan_without_lock(images, stack, lock_dir, lock_backend, options)
        else:
            plan = images.plan_build(stack, lock_dir, offline=offline, **options)
        show(_build_plan_text(plan, lock_missing))
        return
    with report:
        report.say(f"stack: {stack.stack_id}")
        if lock_missing:
            report.phase(f"no lock in {lock_dir}: locking first")
            if request.backend is None and wheelhouse:
                report.say("backend: uv (--wheelhouse given and no --backend)")
            ensure_lock(
                stack,
                backend=lock_backend,
                platforms=lock_platforms(stack, request.platforms),
                wheelhouse=Path(wheelhouse) if wheelhouse else None,
                team_file=Path(team_file) if team_file else None,
                progress=report.phase,
                conda_channels=settings.conda_channels,
                mirrors=mirrors,
            )
        plan = images.plan_build(stack, lock_dir, offline=offline, **options)
        report.say(f"lock: {plan.lock.path} ({plan.lock.backend}, sha256 {plan.lock.sha256[:12]})")
        report.say(f"base image: {plan.base_image}")
        if plan.no_index:
            report.say(
                f"wheelhouse {plan.wheelhouse} holds every wheel of the lock: no index, and no network during the build"
            )
        plan = images.supply_tools(plan, progress=report.phase)
        report.phase("sending the build context")
        result = images.build_stack_image(plan, progress=report.output, builder=builder or "auto")
        remember_stack(stack, request, "build", plan.lock.path, report.say)
    image = result.image
    first = (
        f"unchanged: reused {image.id} (same lock and inputs: every step came from the build cache)"
        if result.reused
        else f"built {image.id}"
    )
    from gpuenv.progress import format_size

    lines = [
        first,
        f"tags: {', '.join(plan.tags)}",
        f"size: {format_size(image.size)}",
        f"builder: {result.builder}",
    ]
    if result.removed:
        lines.append(
            f"removed the image the tags replaced: {', '.join(i.removeprefix('sha256:')[:12] for i in result.removed)}"
        )
    lines.append("labels:")
    lines += [
        f"  {key}={image.labels[key]}"
        for key in sorted(image.labels)
        if key != images.LABEL_PREFIX + "stack_json"
    ]
    report.result("\n".join(lines))


def _plan_without_lock(images, stack, lock_dir, backend: str, options: dict):
    """A build plan for --dry when there is no lock yet (the lock hash is not known)."""
    placeholder = images.LockFile(lock_dir / "(not locked yet)", backend, "0" * 64)
    return images.BuildPlan(
        stack=stack,
        lock=placeholder,
        lock_dir=lock_dir,
        base_image=options["base_image"] or stack.base_image,
        tags=[],
        extra_tags=(options["tag"],) if options["tag"] else (),
        buildargs=images.build_args(stack, placeholder, base_image=options["base_image"]),
        labels={
            **images.image_labels(stack, placeholder.sha256, placeholder.backend),
            **images.oci_labels(stack, placeholder, options["base_image"] or stack.base_image),
        },
    )


@task(
    help={
        **STACK_HELP,
        "registry": "the registry, HOST[:PORT] (default: invoke.yaml gpuenv.registry); the image goes to HOST/gpuenv/<stack>",
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
    """Push the stack's image (built from its current lock) to a registry; prints HOST/gpuenv/<stack>@sha256:... to share."""
    from gpuenv.cli.config import parse_registry
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
    _request, stack = resolve_for_task(c, stack_options(locals()))
    plan = share.plan_push(stack, lock_directory(stack), host)
    if is_dry(c):
        show(
            f"stack: {stack.stack_id}\nimage: {plan.source}\nwould push: {', '.join(f'{plan.repository}:{t}' for t in plan.tags)}\nnothing pushed (--dry)"
        )
        return
    with report:
        report.phase(f"pushing {plan.source} to {plan.repository} ({', '.join(plan.tags)})")
        ref = share.push(plan, progress=report.layer)
    report.result(ref)


@task(
    help={
        **STACK_HELP,
        "image": _IMAGE_HELP,
        "gpus": "GPUs given to the container: all, none, or indices/UUIDs like 0,1 (default: all; none for a CPU stack)",
        "shm_size": "size of /dev/shm for data loaders and NCCL (default: 8g)",
        "wheelhouse": "the wheel folder the image was built with (`invoke build --wheelhouse`), so the same stack is chosen "
        "(default: invoke.yaml gpuenv.wheelhouse)",
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
    from gpuenv.engine import Engine, parse_gpus, parse_shm_size

    command = _remainder_argv(c.remainder or "")
    if gpus is not None:
        parse_gpus(gpus)  # checked before the stack is resolved or the engine asked
    if shm_size is not None:
        parse_shm_size(shm_size)
    ref, _name, cpu = image_or_stack(c, image, stack_options(locals()), verbose, quiet)
    # A CPU stack asks for no GPU by default: it then runs on hosts without the NVIDIA runtime.
    gpus = gpus if gpus is not None else ("none" if cpu else "all")
    if is_dry(c):
        show(
            f"would run {shlex.join(command) or '(the image command)'} in {ref} with GPUs {gpus}, {Path.cwd()} at /workspace; nothing run (--dry)"
        )
        return
    options = {"shm_size": shm_size} if shm_size else {}
    code = Engine.local().run_container(
        ref, command, gpus=gpus, workdir_mount=Path.cwd(), **options
    )
    if code:
        raise Exit(code=code)


@task()
@user_errors
def images(c):
    """List the gpuenv images on this engine, newest first, with their stack and size."""
    from gpuenv.images import plan as images_mod

    found = images_mod.built_images()
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
