"""Tasks that make and use images: build (lock if needed, then docker build), run, images."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from gpuenv.cli.common import STACK_HELP, STRICT_DRIVER_HELP, user_errors

_BUILD_HELP = {
    **STACK_HELP,
    "base_image": "build FROM this image instead of the stack's nvidia/cuda tag (a local image on air-gapped servers)",
    "tag": "an extra tag for the image, e.g. myteam/torch:prod (it always gets gpuenv/<stack>:<lock-hash> and :latest)",
    "no_cache": "rebuild every layer instead of reusing the engine's build cache",
    "ca_cert": "CA bundle (PEM) trusted for HTTPS during the build, e.g. a corporate proxy's; it stays out of every layer of the image",
    "wheelhouse": "folder of .whl files installed from before any index (air-gapped servers); also used to lock when the lock is missing",
    "backend": "lock backend when the lock is missing: conda-lock (default) or uv (the default when a wheelhouse folder is given)",
    "strict_driver": STRICT_DRIVER_HELP,
    "team_file": "the team's extra packages, when the lock is missing (default: envs/team.yml)",
}



def _remainder_argv(remainder: str) -> list[str]:
    """The words after `--`, exactly as the shell passed them.

    Invoke joins them with spaces (losing quoting: `python -c "import os; ..."` would split), so
    they are taken from sys.argv when that is where the remainder came from.
    """
    argv = sys.argv
    if "--" in argv:
        words = argv[argv.index("--") + 1:]
        if " ".join(words) == remainder:
            return words
    return shlex.split(remainder)


def _say(line: str) -> None:
    print(f"  {line}", flush=True)


@task(help=_BUILD_HELP, auto_shortflags=False)
@user_errors
def build(
    c, cuda=None, framework=None, torch=None, tensorflow=None, python=None, driver=None, gpu_arch=None,
    base_image=None, tag=None, no_cache=False, ca_cert=None, wheelhouse=None, backend=None, team_file=None, strict_driver=False,
):
    """Build the stack's image from its lock (locking first when there is none) and tag it."""
    from gpuenv import images, lockdir
    from gpuenv.locking import ensure_lock, lock_directory
    from gpuenv.host import resolve_for_host

    # Every option is checked before anything slow: resolving, locking, the engine.
    images.check_build_options(tag=tag, ca_cert=ca_cert, wheelhouse=wheelhouse, team_file=team_file, backend=backend)

    stack = resolve_for_host(
        driver=driver, cuda=cuda, framework=framework, torch=torch, tensorflow=tensorflow, python=python, gpu_arch=gpu_arch,
        strict_driver=strict_driver, wheelhouse=wheelhouse,
    )
    print(f"stack: {stack.stack_id}")
    lock_dir = lock_directory(stack)
    if not lockdir.has_lock(lock_dir):
        print(f"no lock in {lock_dir}: locking first", flush=True)
        if backend is None and wheelhouse:
            backend = "uv"
            print("backend: uv (--wheelhouse given: conda-lock cannot lock from a wheel folder)")
        options = {"backend": backend} if backend else {}
        ensure_lock(
            stack,
            wheelhouse=Path(wheelhouse) if wheelhouse else None,
            team_file=Path(team_file) if team_file else None,
            progress=_say,
            **options,
        )
    plan = images.plan_build(
        stack,
        lock_dir,
        base_image=base_image,
        tag=tag,
        ca_cert=Path(ca_cert) if ca_cert else None,
        wheelhouse=Path(wheelhouse) if wheelhouse else None,
        nocache=no_cache,
    )
    print(f"lock: {plan.lock.path} ({plan.lock.backend}, sha256 {plan.lock.sha256[:12]})")
    print(f"base image: {plan.base_image}", flush=True)
    plan = images.supply_tools(plan, progress=_say)
    result = images.build_stack_image(plan)
    image = result.image
    print(f"built {image.id}")
    print(f"tags: {', '.join(plan.tags)}")
    print(f"size: {images.format_size(image.size)}")
    print("labels:")
    for key in sorted(image.labels):
        if key != images.LABEL_PREFIX + "stack_json":
            print(f"  {key}={image.labels[key]}")


@task(
    help={
        **STACK_HELP,
        "gpus": "GPUs given to the container: all, none, or indices/UUIDs like 0,1 (default: all; none for a CPU stack)",
        "shm_size": "size of /dev/shm for data loaders and NCCL (default: 8g)",
        "strict_driver": STRICT_DRIVER_HELP,
        "wheelhouse": "the wheel folder the image was built with (`invoke build --wheelhouse`), so the same stack is chosen",
    },
    auto_shortflags=False,
)
@user_errors
def run(c, cuda=None, framework=None, torch=None, tensorflow=None, python=None, driver=None, gpu_arch=None, gpus=None, shm_size=None, strict_driver=False, wheelhouse=None):
    """Run a command in the stack's image: `invoke run --cuda 12.1 -- python train.py`.

    The current folder is mounted at /workspace (the working directory), logs are streamed,
    the container is removed, and the command's exit code is returned. Never pulls.
    """
    from gpuenv import engine, images

    command = _remainder_argv(c.remainder or "")
    from gpuenv.host import resolve_for_host

    if gpus is not None:
        engine.parse_gpus(gpus)  # checked before the stack is resolved or the engine asked
    if shm_size is not None:
        engine.parse_shm_size(shm_size)
    stack = resolve_for_host(
        driver=driver, cuda=cuda, framework=framework, torch=torch, tensorflow=tensorflow, python=python, gpu_arch=gpu_arch,
        strict_driver=strict_driver, wheelhouse=wheelhouse,
    )
    # A CPU stack asks for no GPU by default: it then runs on hosts without the NVIDIA runtime.
    gpus = gpus if gpus is not None else ("none" if stack.is_cpu else "all")
    image = images.image_for_stack(stack)
    options = {"shm_size": shm_size} if shm_size else {}
    code = engine.run_container(image, command, gpus=gpus, workdir_mount=Path.cwd(), **options)
    if code:
        raise Exit(code=code)


@task
@user_errors
def images(c):
    """List the gpuenv images on this engine, newest first, with their stack and size."""
    from gpuenv import images as images_mod
    from validate.tables import format_table

    found = images_mod.built_images()
    if not found:
        print("no gpuenv images: build one with invoke build --cuda <version>|cpu")
        return
    rows = []
    for img in found:
        labels = img.labels
        rows.append(
            [
                ", ".join(sorted(img.tags)) or "<untagged>",
                labels.get(images_mod.STACK_LABEL, ""),
                labels.get(images_mod.LABEL_PREFIX + "cuda", ""),
                labels.get(images_mod.LABEL_PREFIX + "min_driver", "") or "-",
                images_mod.format_size(img.size),
                img.created[:19].replace("T", " "),
            ]
        )
    print(format_table(["IMAGE", "STACK", "CUDA", "MIN DRIVER", "SIZE", "CREATED"], rows))
