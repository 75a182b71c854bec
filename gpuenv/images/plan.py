"""What an image of a stack is called, what it carries and what its build is made of.

Render, then act: everything here is decided from the stack, the lock directory, the files of
the build context and the base image's id (`identify`), so it is tested on its output. The Docker
engine is touched only through `gpuenv.engine`'s `Engine`: the helpers at the end
(`image_for_stack`, `built_images`, `supply_tools`, `build_stack_image`) ask the engine they are
given (the task opens `Engine.local()` once; the fleet or a test may pass another).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from gpuenv import PROJECT_ROOT, VALIDATE_DIR, __version__
from gpuenv.envs import conda, lockdir
from gpuenv.envs.offline import require_local_channels
from gpuenv.errors import BadInput, DataError, GpuenvError, ToolError
from gpuenv.images import identity
from gpuenv.images.context import (  # noqa: F401 (Tree and write_context: named here too)
    Tree,
    context_entries,
    label_instruction,
    suite_entries,
    write_context,
)
from gpuenv.images.reference import check_image_reference
from gpuenv.progress import Say
from gpuenv.stack import Stack, check_engine_platform, stack_json

if TYPE_CHECKING:  # the engine module imports the Docker SDK: only at run time, lazily
    from gpuenv.compat.matrix import Matrix
    from gpuenv.engine import BuildResult, Engine, ImageInfo
    from gpuenv.envs.buildtools import BuildTools

#: Every gpuenv image lives under this repository prefix: gpuenv/<stack_id>:<inputs-hash-12>, the
#: hash of everything in the image (gpuenv/images/identity.py), so two different images never share
#: a name.
REPOSITORY_PREFIX = "gpuenv"
#: The moving tag that always names the newest build of a stack.
MOVING_TAG = "latest"
#: Characters of a hash used in a tag (the full hash is in a label).
TAG_HASH_LENGTH = 12
LABEL_PREFIX = "io.gpuenv."
STACK_LABEL = LABEL_PREFIX + "stack"
LOCK_HASH_LABEL = LABEL_PREFIX + "lock_hash"
#: The full hash of the image's inputs (its tag holds the first 12 characters).
INPUTS_LABEL = LABEL_PREFIX + "inputs"
#: The hash of the validation suite in the image (`validate` prefers this checkout's suite).
SUITE_LABEL = LABEL_PREFIX + "suite"
#: The id of the base image the image was built on.
BASE_ID_LABEL = LABEL_PREFIX + "base_id"
#: Set by docker/Dockerfile on the install stage: the mark that an image under the cache name is
#: gpuenv's.
INSTALL_STAGE_LABEL = LABEL_PREFIX + "build_cache"
#: The hash of the install stage's inputs: its cache name (build_cache_tag) holds the first 12
#: characters.
INSTALL_HASH_LABEL = LABEL_PREFIX + "install_hash"
#: The diff_id of the image's environment layer (/opt/gpuenv/env): given by a second, one-LABEL
#: build once the first has made the layer (a build cannot name a layer it is still making).
ENV_LAYER_LABEL = LABEL_PREFIX + "env_layer"
SOURCE_URL = "https://github.com/gpuenv/gpuenv"

DOCKER_DIR = PROJECT_ROOT / "docker"
#: The engine's builders `invoke build --builder` takes: auto is BuildKit where the engine offers
#: it.
BUILDERS = ("auto", "buildkit", "classic")
#: Path of the Dockerfile inside the build context (gpuenv/images/context.py lays the context out).
DOCKERFILE_IN_CONTEXT = "docker/Dockerfile"
#: Lock files, by backend, in the order `invoke build` looks for them.
LOCK_FILES = lockdir.LOCK_FILES


# ---------------------------------------------------------------- names and labels


def image_repository(stack: Stack) -> str:
    """``gpuenv/torch2.13.0-cpu-py3.11``: one repository per stack (Docker wants lower case)."""
    return f"{REPOSITORY_PREFIX}/{stack.stack_id}".lower()


#: Where a classic build keeps its install stage (the build cache of the next rebuild), instead of
#: leaving it as a dangling <none> image: gpuenv-cache/<stack_id>:<install-hash-12>, the hash of
#: every input of that stage, the base image included (identity.install_hash).
CACHE_REPOSITORY = "gpuenv-cache"


def build_cache_tag(stack: Stack, install_hash: str) -> str:
    """``gpuenv-cache/torch2.13.0-cpu-py3.11:5ff00e74a961``: the install stage of exactly those
    inputs."""
    return f"{CACHE_REPOSITORY}/{stack.stack_id}".lower() + f":{install_hash[:TAG_HASH_LENGTH]}"


def image_tags(stack: Stack, inputs_hash: str, extra: Iterable[str] = ()) -> list[str]:
    """The tags a successful build gets: the stack with its inputs hash, the moving tag, extras."""
    repo = image_repository(stack)
    tags = [f"{repo}:{inputs_hash[:TAG_HASH_LENGTH]}", f"{repo}:{MOVING_TAG}"]
    return tags + [t for t in extra if t and t not in tags]


def require_cuda(stack: Stack) -> str:
    """NVIDIA_REQUIRE_CUDA for the stack: the runtime refuses drivers that cannot run it.

    The matrix's own constraint (copied from the nvidia/cuda image) wins; otherwise CUDA and the
    minimum driver are ANDed (comma) in the NVIDIA container runtime's constraint syntax. Empty
    for CPU stacks: there is nothing to require.
    """
    if stack.is_cpu:
        return ""
    if stack.require_cuda:
        return stack.require_cuda
    parts = [f"cuda>={stack.cuda}"]
    if stack.min_driver:
        parts.append(f"driver>={stack.min_driver}")
    return ",".join(parts)


def image_labels(stack: Stack, lock_hash: str, backend: str) -> dict[str, str]:
    """The io.gpuenv.* labels a built image of `stack` carries (CONTRACTS.md, "Image labels")."""
    return {
        STACK_LABEL: stack.stack_id,
        LABEL_PREFIX + "cuda": stack.cuda,
        LABEL_PREFIX + "cuda_version": stack.cuda_version or "",
        LABEL_PREFIX + "framework": stack.framework,
        LABEL_PREFIX + "framework_version": stack.framework_version,
        LABEL_PREFIX + "python": stack.python,
        LABEL_PREFIX + "min_driver": stack.min_driver or "",
        LOCK_HASH_LABEL: lock_hash,
        LABEL_PREFIX + "lock_backend": backend,
        LABEL_PREFIX + "stack_json": stack_json(stack),
    }


def oci_labels(stack: Stack, lock: "LockFile", base_image: str) -> dict[str, str]:
    """The org.opencontainers.image.* labels: what the image is, from the stack and the lock alone.

    No build time: `created` is the lock's date (SOURCE_DATE_EPOCH when set, else when the lock
    was made), so the same inputs give the same labels, and the same image.
    """
    labels = {
        "org.opencontainers.image.title": f"gpuenv {stack.stack_id}",
        "org.opencontainers.image.description": (
            f"Locked {stack.framework} {stack.framework_version} environment "
            f"(CUDA {stack.cuda}, Python {stack.python}) built by gpuenv"
        ),
        "org.opencontainers.image.version": lock.sha256,
        "org.opencontainers.image.source": SOURCE_URL,
        "org.opencontainers.image.base.name": base_image,
        "org.opencontainers.image.vendor": f"gpuenv {__version__}",
    }
    epoch = source_date_epoch(lock)
    if epoch is not None:
        labels["org.opencontainers.image.created"] = datetime.fromtimestamp(
            epoch, timezone.utc
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
    return labels


def source_date_epoch(lock: "LockFile") -> int | None:
    """The image's date: SOURCE_DATE_EPOCH (the reproducible-builds convention) when set, else the
    lock's."""
    import os

    value = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if value.isdigit():
        return int(value)
    return lock.locked_at


def stack_from_labels(labels: dict[str, str]) -> Stack | None:
    """The stack an image was built for, read back from its labels (None for foreign images)."""
    raw = labels.get(LABEL_PREFIX + "stack_json")
    if not raw:
        return None
    try:
        return Stack.from_dict(json.loads(raw))
    except (ValueError, TypeError):
        return None


# ---------------------------------------------------------------- the lock


@dataclass(frozen=True)
class LockFile:
    """The one file of a lock directory that the image installs, and its identity."""

    path: Path
    backend: str
    sha256: str
    #: When it was locked (epoch seconds), from its metadata; None for locks made before gpuenv
    #: recorded it.
    locked_at: int | None = None


def read_lock(lock_dir: Path, stack: Stack | None = None) -> LockFile:
    """The lock file of `lock_dir`, verified against its metadata (and `stack`): its hash names the
    image.

    Through gpuenv.envs.lockdir, the owner of the lock directory: the backend's file that the
    metadata names (never a stray file of the other backend), unchanged since it was locked.
    """
    lock = lockdir.verify(Path(lock_dir), stack)
    return LockFile(lock.path, lock.backend, lock.sha256, lock.metadata.locked_at)


# ---------------------------------------------------------------- the build


@dataclass(frozen=True)
class BuildPlan:
    """Everything one `docker build` needs, decided before the engine is asked anything."""

    stack: Stack
    lock: LockFile
    lock_dir: Path
    base_image: str
    #: Every tag of the image: empty until the inputs are known (`identify`), unless a caller names
    #: them.
    tags: list[str]
    buildargs: dict[str, str]
    labels: dict[str, str]
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    validate_dir: Path = VALIDATE_DIR
    docker_dir: Path = DOCKER_DIR
    dockerfile: str = DOCKERFILE_IN_CONTEXT
    nocache: bool = False
    #: The wheelhouse holds every wheel of the lock: the install asks no index and the build has no
    #: network.
    no_index: bool = False
    #: What the host supplies (uv, a standalone Python, a conda lock's environment); None: not
    #: gathered yet.
    tools: BuildTools | None = None
    #: The user's extra tag (--tag), given to the image beside the stack's tags.
    extra_tags: tuple[str, ...] = ()
    #: The wheels of the wheelhouse the lock allows: the only ones sent to the engine.
    locked_wheels: tuple[Path, ...] = ()
    #: --offline: the engine is never asked to pull (a missing base image is an error).
    offline: bool = False
    #: The base image's id on the engine, and the install stage's cache name: known after
    #: `identify`.
    base_id: str | None = None
    cache_tag: str | None = None
    #: Conda channel URL -> mirror URL (the team's settings), for a conda lock's install on the
    #: host.
    mirrors: dict[str, str] = field(default_factory=dict)
    #: The time of every file of an environment the host installed (SOURCE_DATE_EPOCH, else when
    #: the lock was made, else 0): its layer then depends on the lock and nothing else.
    epoch: int = 0


def cuda_driver_floors(stack: Stack, matrix: Matrix | None = None) -> str:
    """``"12.4=550.54.14 12.1=530.30.02 ..."``: what the image's start-up driver gate suggests.

    The CUDA releases of the stack's major at or below its own, newest first, each with the
    driver it needs, so a container on an older driver can name the `--cuda` it could run.
    Empty for CPU stacks (no gate).
    """
    if stack.is_cpu or not stack.min_driver:
        return ""
    from gpuenv.compat.matrix import load_matrix, version_key

    matrix = matrix or load_matrix()
    own = version_key(stack.cuda)
    mine = [
        r
        for r in matrix.cuda_releases
        if r.major == own.major and version_key(r.minor) <= own and r.floor
    ]
    mine.sort(key=lambda r: version_key(r.minor), reverse=True)
    return " ".join(f"{r.minor}={r.floor}" for r in mine)


def build_args(stack: Stack, lock: LockFile, *, base_image: str | None = None) -> dict[str, str]:
    """The Dockerfile's build arguments for `stack` (names match the ARGs in docker/Dockerfile).

    Only what the instructions use: the labels are given to the build once (`BuildPlan.labels`),
    and nothing here depends on when the build runs.
    """
    return {
        "BASE_IMAGE": base_image or stack.base_image,
        "PYTHON_VERSION": stack.python,
        "REQUIRE_CUDA": require_cuda(stack),
        "CUDA_DRIVER_FLOORS": cuda_driver_floors(stack),
        "MIN_DRIVER": stack.min_driver or "",
        # The time of every file of the uv environment (docker/install-env.sh), as of a conda
        # lock's archive (BuildPlan.epoch): the environment layer depends on the lock alone.
        "ENV_EPOCH": str(source_date_epoch(lock) or 0),
    }


#: The first Docker Engine release whose BuildKit reads the build argument SOURCE_DATE_EPOCH for
#: the image config's and history's times: BuildKit v0.11 (moby/buildkit#2918), vendored by
#: moby/moby#45367 (BuildKit v0.11.6) for Docker Engine 24.0. Earlier engines (20.10 here) take
#: the argument and use the build's time.
SOURCE_DATE_EPOCH_ENGINE = (24, 0)


def source_date_epoch_arg(engine_version: str, builder: str, epoch: int) -> dict[str, str]:
    """The build argument SOURCE_DATE_EPOCH for a build on an engine of `engine_version` by
    `builder` ("buildkit" or "classic"): only where the engine's BuildKit reads it (never the
    classic builder; a BuildKit build the engine refuses falls back to it with the argument, which
    it ignores), so no image claims a date its engine did not use."""
    import re

    match = re.match(r"(\d+)\.(\d+)", engine_version or "")
    version = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if builder != "buildkit" or version < SOURCE_DATE_EPOCH_ENGINE:
        return {}
    return {"SOURCE_DATE_EPOCH": str(epoch)}


def check_build_options(
    *,
    tag: str | None = None,
    ca_cert: str | Path | None = None,
    wheelhouse: str | Path | None = None,
    team_file: str | Path | None = None,
    backend: str | None = None,
    builder: str | None = None,
) -> None:
    """The build's own options, checked before the stack is resolved, locked or built (BadInput)."""
    if tag is not None:
        check_image_reference(tag)
    if ca_cert is not None and not Path(ca_cert).is_file():
        raise BadInput(f"--ca-cert {ca_cert}: no such file", fix="give the path of a PEM CA bundle")
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        raise BadInput(
            f"--wheelhouse {wheelhouse}: no such folder", fix="give a folder of .whl files"
        )
    if wheelhouse is not None:
        from gpuenv.envs.wheelhouse import wheel_names

        wheel_names(
            wheelhouse
        )  # every .whl a regular file: a folder or FIFO named x.whl is one line now
    if team_file is not None and not Path(team_file).exists():
        raise BadInput(
            f"--team-file {team_file}: no such file",
            fix="give the path of a team file like envs/team.yml",
        )
    if backend is not None and backend not in LOCK_FILES:
        raise BadInput(
            f"--backend {backend!r} is not known", fix=f"use one of {', '.join(LOCK_FILES)}"
        )
    if builder is not None and builder not in BUILDERS:
        raise BadInput(
            f"--builder {builder!r} is not known", fix=f"use one of {', '.join(BUILDERS)}"
        )


def plan_build(
    stack: Stack,
    lock_dir: Path,
    *,
    base_image: str | None = None,
    tag: str | None = None,
    ca_cert: Path | None = None,
    wheelhouse: Path | None = None,
    nocache: bool = False,
    validate_dir: Path = VALIDATE_DIR,
    offline: bool = False,
    arch: str | None = None,
    mirrors: dict[str, str] | None = None,
) -> BuildPlan:
    """Check the user's paths and decide tags, build arguments and labels for one build.

    A wheelhouse that holds every wheel of a uv lock makes the build ask no index and run
    without network (`no_index`); `offline` requires that, naming every missing wheel first.
    """
    if tag is not None:
        check_image_reference(tag)
    lock = read_lock(lock_dir, stack)
    if ca_cert is not None:
        ca_cert = Path(ca_cert)
        if not ca_cert.is_file():
            raise BadInput(
                f"--ca-cert {ca_cert}: no such file", fix="give the path of a PEM CA bundle"
            )
    if wheelhouse is not None:
        wheelhouse = Path(wheelhouse)
        if not wheelhouse.is_dir():
            raise BadInput(
                f"--wheelhouse {wheelhouse}: no such folder", fix="give a folder of .whl files"
            )
        from gpuenv.envs.wheelhouse import wheel_names

        wheel_names(
            wheelhouse
        )  # every .whl a regular file: a folder or FIFO named x.whl is one line now
    if not Path(validate_dir).is_dir():
        raise DataError(
            f"validation suite folder {validate_dir} is missing",
            fix="restore validate/ from the repository",
        )
    no_index, wheels = _wheels_only(
        stack, lock, wheelhouse, offline, arch, conda.check_mirrors(mirrors or {})
    )
    extra = (tag,) if tag else ()
    for ref in image_tags(
        stack, "0" * 64, extra
    ):  # every tag, before the build: the engine must not refuse one after it
        check_image_reference(ref, "image tag")
    plan = BuildPlan(
        stack=stack,
        lock=lock,
        lock_dir=Path(lock_dir),
        base_image=base_image or stack.base_image,
        tags=[],
        buildargs=build_args(stack, lock, base_image=base_image),
        labels={
            **image_labels(stack, lock.sha256, lock.backend),
            **oci_labels(stack, lock, base_image or stack.base_image),
        },
        ca_cert=ca_cert,
        wheelhouse=wheelhouse,
        validate_dir=Path(validate_dir),
        nocache=nocache,
        no_index=no_index,
        extra_tags=extra,
        locked_wheels=wheels,
        offline=offline,
        mirrors=conda.check_mirrors(mirrors or {}),
        epoch=source_date_epoch(lock) or 0,
    )
    return replace(
        plan,
        labels={**plan.labels, SUITE_LABEL: identity.suite_hash(suite_entries(plan.validate_dir))},
    )


def pending_tags(plan: BuildPlan) -> list[str]:
    """The tags `plan` will get, with a placeholder for the inputs hash (known once the base is
    inspected)."""
    return [
        t.replace("0" * TAG_HASH_LENGTH, identity.PENDING)
        for t in image_tags(plan.stack, "0" * 64, plan.extra_tags)
    ]


def identify(plan: BuildPlan, base_id: str) -> BuildPlan:
    """`plan` named from its inputs: the image's tags (unless a caller named them), its inputs and
    base labels, and the install stage's cache name. Needs the installers and the base's id."""
    entries = context_entries(
        plan, labelled=False
    )  # the labels are hashed as labels, the Dockerfile as written
    install = identity.install_hash(entries, buildargs=plan.buildargs, base_id=base_id)
    labels = {**plan.labels, BASE_ID_LABEL: base_id, INSTALL_HASH_LABEL: install}
    labels.pop(INPUTS_LABEL, None)
    inputs = identity.image_hash(entries, buildargs=plan.buildargs, labels=labels, base_id=base_id)
    return replace(
        plan,
        base_id=base_id,
        labels={**labels, INPUTS_LABEL: inputs},
        tags=plan.tags or image_tags(plan.stack, inputs, plan.extra_tags),
        cache_tag=build_cache_tag(plan.stack, install),
    )


#: `docker info` / uname architectures, as wheel platform tags end.
_WHEEL_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def _wheels_only(
    stack: Stack,
    lock: LockFile,
    wheelhouse: Path | None,
    offline: bool,
    arch: str | None,
    mirrors: dict[str, str],
) -> tuple[bool, tuple[Path, ...]]:
    """Whether the build installs from the wheelhouse alone (no index, no network), and the
    wheels of the wheelhouse that the lock allows (the others never leave this machine)."""
    import platform

    from gpuenv.envs import wheelhouse as wheels

    if offline and wheelhouse is None:
        raise BadInput(
            "--offline needs --wheelhouse",
            fix="give the folder that holds every wheel of the lock (see the README's "
            "air-gapped recipe)",
        )
    if lock.backend != "uv":
        return offline and require_local_channels(
            lock.path, mirrors
        ), ()  # installed on the host; offline as `install --offline`
    if wheelhouse is None:
        return False, ()
    machine = arch or platform.machine()
    cover = wheels.lock_coverage(
        lock.path,
        wheelhouse,
        python=stack.python,
        arch=_WHEEL_ARCH.get(machine.lower(), machine),
        backend=lock.backend,
    )
    if offline:
        wheels.require_complete(cover)
    return cover.complete, cover.wheels


# ---------------------------------------------------------------- images present on the engine


def build_hint(stack: Stack) -> str:
    """The command that builds `stack`, for error messages."""
    args = f"--cuda {stack.cuda} --framework {stack.framework}"
    args += (
        f" --{'torch' if stack.framework == 'torch' else 'tensorflow'} {stack.framework_version}"
    )
    return f"run invoke build {args} --python {stack.python}"


def pick_image(
    found: list[ImageInfo], stack: Stack, lock_hash: str | None, suite: str | None = None
) -> str:
    """The id of the newest image of `stack` built from the lock with `lock_hash` (its
    io.gpuenv.lock_hash label); with no lock to compare (None), the newest image of the stack.
    Among those, an image carrying the suite with hash `suite` (this checkout's) comes first:
    another checkout's build of the same lock, with its own suite, is not taken over ours.

    Raises GpuenvError saying which lock was wanted and what exists: an image built from an
    older lock is never used silently.
    """
    if not found:
        raise GpuenvError(f"no gpuenv image for stack {stack.stack_id}", fix=build_hint(stack))
    matching = (
        found
        if lock_hash is None
        else [img for img in found if img.labels.get(LOCK_HASH_LABEL) == lock_hash]
    )
    if not matching:
        others = ", ".join(
            sorted({(img.labels.get(LOCK_HASH_LABEL) or "none")[:TAG_HASH_LENGTH] for img in found})
        )
        raise GpuenvError(
            f"no image of stack {stack.stack_id} was built from the current lock "
            f"{lock_hash[:TAG_HASH_LENGTH]} "  # type: ignore[index]
            f"(images here were built from locks {others})",
            fix=build_hint(stack) + " to build it from the current lock",
        )
    ours = [img for img in matching if suite is not None and img.labels.get(SUITE_LABEL) == suite]
    return max(ours or matching, key=lambda img: img.created).id


def image_for_stack(engine: Engine, stack: Stack, lock_dir: Path | None = None) -> str:
    """The id of the newest gpuenv image of `stack` built from its current lock (found by labels,
    not by tag name). `lock_dir` defaults to the stack's lock directory; without a lock file
    there, the newest image of the stack.

    Raises GpuenvError with the build command when there is none: `invoke run` and the
    validation task never pull.
    """
    if lock_dir is None:
        from gpuenv.envs.locking import lock_directory  # not at module level: locking is heavier

        lock_dir = lock_directory(stack)
    # No lock: the newest image of the stack. A lock that fails its checks is an error, never
    # a silent fallback to whatever image is newest.
    lock_hash = read_lock(lock_dir, stack).sha256 if lockdir.has_lock(lock_dir) else None
    return pick_image(
        engine.find_images({STACK_LABEL: stack.stack_id}),
        stack,
        lock_hash,
        identity.checkout_suite(),
    )


def is_cpu_image(engine: Engine, ref: str) -> bool:
    """Whether a local image was built for a CPU stack (its labels say so): `invoke run --image`
    then asks for no GPU by default, so it runs on hosts without the NVIDIA runtime."""
    info = engine.image_info(ref)
    labels = info.labels if info else {}
    stack = stack_from_labels(labels)
    return stack.is_cpu if stack else labels.get(LABEL_PREFIX + "cuda") == "cpu"


def built_images(engine: Engine) -> list[ImageInfo]:
    """The tagged gpuenv images on the engine, newest first (an untagged one is no image to use)."""
    found = [img for img in engine.find_images({STACK_LABEL: None}) if img.tags]
    return sorted(found, key=lambda img: img.created, reverse=True)


def ensure_base_image(engine: Engine, ref: str, progress: Say | None = None) -> ImageInfo:
    """The base image `ref` on `engine`, pulled once when it is missing (the build needs it anyway);
    a pull that fails is one line naming the base image and --base-image, the way out."""
    try:
        return engine.ensure_image(
            ref,
            f"pulling the base image {ref}\n",
            say=(lambda text: progress(text.rstrip())) if progress else None,
        )
    except ToolError as err:
        raise ToolError(
            f"the base image {ref} is not on this engine and cannot be pulled ({err.message})",
            fix="pull it where a registry is reachable (docker save/load), or pass --base-image "
            "with a local image",
        ) from None


def supply_tools(engine: Engine, plan: BuildPlan, progress: Say | None = None) -> BuildPlan:
    """`plan` with the installers its install stage needs, gathered on the host
    (gpuenv.envs.buildtools), then named from its inputs (`identify`).

    The base image is made present first (pulled once when missing, as the build would; never
    with --offline, where a missing base is one line) and asked whether it has the stack's
    Python; when it has none, a standalone CPython goes in.
    """
    from gpuenv.envs import buildtools

    arch = engine.architecture()
    check_engine_platform(plan.stack, arch)  # before the base image is pulled
    base = engine.image_info(plan.base_image)
    if base is None and plan.offline:
        # The classic builder pulls a missing FROM image whatever `pull` says: the check is here.
        raise BadInput(
            f"--offline: the base image {plan.base_image} is not on this engine, and an offline "
            "build never pulls",
            fix="docker load it here (docker save it where a registry answers), or pass "
            "--base-image with an image this engine has",
        )
    if base is None:
        base = ensure_base_image(engine, plan.base_image, progress)
    needs_python = plan.lock.backend != "conda-lock"  # a conda lock brings its own Python
    has_python = (
        not needs_python or engine.image_python(plan.base_image, plan.stack.python) is not None
    )
    tools = buildtools.gather(
        backend=plan.lock.backend,
        python=plan.stack.python,
        arch=arch,
        base_has_python=has_python,
        ca_cert=plan.ca_cert,
        progress=progress,
    )
    if base is None:
        raise GpuenvError(
            f"the base image {plan.base_image} vanished from the engine during the build's "
            "preparation",
            fix="build again; keep the base image while gpuenv builds on it",
        )
    if (
        plan.lock.backend == "conda-lock"
    ):  # the environment itself, installed on the host for the image
        from gpuenv.envs import condalock

        tools = replace(
            tools,
            conda_env=condalock.stage_for_image(
                plan.lock.path,
                stack=plan.stack,
                lock_sha256=plan.lock.sha256,
                platform=buildtools.CONDA_PLATFORMS[buildtools.normalise_arch(arch)],
                target=f"the base image {plan.base_image}",
                mirrors=plan.mirrors,
                wheelhouse=plan.wheelhouse,
                offline=plan.no_index,
                cache_root=buildtools.cache_dir() / "conda-envs",
                say=progress or (lambda _m: None),
            ),
        )
    return identify(replace(plan, tools=tools), base.id)


def build_stack_image(
    engine: Engine, plan: BuildPlan, progress: Say | None = None, builder: str = "auto"
) -> BuildResult:
    """Assemble the context of `plan` in a temporary file and build it through the engine.

    The engine tags the image only when the build succeeded; a failed or interrupted build
    leaves every tag of the stack where it was. With a
    complete wheelhouse the build runs with no network. The labels reach the image as one LABEL
    instruction that the context's Dockerfile ends with (the classic builder makes a step of each
    label given through the API). `builder`: one of BUILDERS. Images
    carrying an io.gpuenv.* label are gpuenv's: only those are ever removed or have the cache
    name taken from them. `BuildResult.reused` says that the first tag already named the very
    image the build gave (nothing changed).

    Two builds: the image, under `unlabelled_tag`, then `FROM` it one LABEL step naming its
    environment layer's diff_id (io.gpuenv.env_layer), which only exists once the first is done;
    the tags go to the second, and the first's name is dropped.
    """
    import tempfile

    if plan.tools is None or plan.base_id is None:
        plan = supply_tools(engine, plan, progress)
    before = engine.image_info(plan.tags[0])
    uses_buildkit = builder == "buildkit" or (builder == "auto" and engine.offers_buildkit())
    dated = source_date_epoch_arg(
        str(engine.info().get("ServerVersion") or ""),
        "buildkit" if uses_buildkit else "classic",
        plan.epoch,
    )
    unlabelled = unlabelled_tag(plan)
    with tempfile.TemporaryFile(prefix="gpuenv-context-") as context:
        write_context(plan, context)
        context.seek(0)
        first = engine.build_image(
            context,
            dockerfile=plan.dockerfile,
            tags=[unlabelled],
            buildargs={**plan.buildargs, **dated},
            labels=None,  # in the Dockerfile, one LABEL step (context.render_dockerfile)
            network_mode="none"
            if plan.no_index or plan.lock.backend == "conda-lock"
            else None,  # conda: staged on the host
            cache_tag=plan.cache_tag,
            nocache=plan.nocache,
            builder=builder,
            owner_prefix=LABEL_PREFIX,
            progress=progress,
        )
    try:
        layer = env_layer(engine.layer_ids(first.image.id), len(engine.layer_ids(plan.base_id)))
        result = engine.label_image(
            unlabelled,
            label_instruction({ENV_LAYER_LABEL: layer}),
            tags=plan.tags,
            builder=first.builder,
            owner_prefix=LABEL_PREFIX,
            progress=progress,
        )
    finally:
        engine.drop_tag(unlabelled, LABEL_PREFIX)
    result.log = first.log + result.log
    result.removed += [i for i in first.removed if i not in result.removed]
    result.reused = before is not None and before.id == result.image.id
    return result


def unlabelled_tag(plan: BuildPlan) -> str:
    """Where the first build of `plan` puts its image until the second gives it the label of its
    environment layer: gpuenv-cache/<stack_id>:<inputs-hash-12>-unlabelled."""
    inputs = plan.labels.get(INPUTS_LABEL, identity.PENDING)
    return (
        f"{CACHE_REPOSITORY}/{plan.stack.stack_id}".lower()
        + f":{inputs[:TAG_HASH_LENGTH]}-unlabelled"
    )


def env_layer(layers: list[str], base_layers: int) -> str:
    """The diff_id of the environment layer among an image's `layers`: the second-to-last, as
    docker/Dockerfile ends (the environment, then image/). Refused when that falls in the base."""
    if len(layers) < base_layers + 2:
        raise GpuenvError(
            f"the image has {len(layers)} layers over a base of {base_layers}: "
            "no environment layer where docker/Dockerfile puts it",
            fix="restore docker/Dockerfile: its last two layers are the environment, then image/",
        )
    return layers[-2]
