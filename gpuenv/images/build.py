"""A stack's image from its lock, in the order the work must happen: lock when there is no lock,
plan, supply the installers, build. The task (`invoke build`) parses its options into a
`BuildOrder`, calls `build_stack` (or `plan_stack_build` for `--dry`) and prints what
`describe_build` / `describe_plan` return, as repo2docker's `app.py::build` sequences the stages
and its `__main__` only parses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuenv.envs import lockdir
from gpuenv.envs.locking import ensure_lock, lock_directory
from gpuenv.errors import BadInput
from gpuenv.images import plan as images
from gpuenv.progress import Say, format_size
from gpuenv.stack import Stack, lock_platforms

if TYPE_CHECKING:  # the engine module imports the Docker SDK: only at run time, lazily
    from gpuenv.engine import BuildResult, Engine


def _quiet(_text: str) -> None:
    """A Say that says nothing (the default of every progress callback here)."""


@dataclass(frozen=True)
class BuildOrder:
    """One build, every option checked and every setting read: what `invoke build` asks for.

    `backend` is the one asked for (None: uv with a wheelhouse, else conda-lock); `platforms` the
    ones to lock for when the lock is missing (empty: the stack's own).
    """

    stack: Stack
    backend: str | None = None
    platforms: tuple[str, ...] = ()
    base_image: str | None = None
    tag: str | None = None
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    team_file: Path | None = None
    nocache: bool = False
    offline: bool = False
    builder: str = "auto"
    conda_channels: tuple[str, ...] = ()
    mirrors: dict[str, str] = field(default_factory=dict)

    @property
    def lock_dir(self) -> Path:
        return lock_directory(self.stack)

    @property
    def lock_backend(self) -> str:
        """The backend a missing lock is made with: the one asked for, else uv with a wheelhouse."""
        return self.backend or ("uv" if self.wheelhouse else "conda-lock")


@dataclass(frozen=True)
class StackBuild:
    """What a build did: its plan (tags, lock, base), the engine's result, and whether it locked
    first."""

    plan: images.BuildPlan
    result: BuildResult
    locked_first: bool


def _refuse_offline_lock(order: BuildOrder) -> None:
    if order.offline and not lockdir.has_lock(order.lock_dir):
        raise BadInput(
            f"--offline: there is no lock in {order.lock_dir}, and locking needs an index",
            fix="run invoke lock (same stack options, --backend uv) where PyPI answers, "
            "then carry envs/locks/ here",
        )


def _plan(order: BuildOrder) -> images.BuildPlan:
    return images.plan_build(
        order.stack,
        order.lock_dir,
        base_image=order.base_image,
        tag=order.tag,
        ca_cert=order.ca_cert,
        wheelhouse=order.wheelhouse,
        nocache=order.nocache,
        offline=order.offline,
        mirrors=order.mirrors,
    )


def plan_stack_build(order: BuildOrder) -> tuple[images.BuildPlan, bool]:
    """The plan `invoke --dry build` shows, and whether the lock is missing (it would be made
    first; the plan then carries a placeholder lock). Nothing is locked, pulled or built."""
    _refuse_offline_lock(order)
    if lockdir.has_lock(order.lock_dir):
        return _plan(order), False
    return plan_without_lock(order), True


def plan_without_lock(order: BuildOrder) -> images.BuildPlan:
    """A build plan for --dry when there is no lock yet (the lock hash is not known)."""
    stack = order.stack
    placeholder = images.LockFile(order.lock_dir / "(not locked yet)", order.lock_backend, "0" * 64)
    base = order.base_image or stack.base_image
    return images.BuildPlan(
        stack=stack,
        lock=placeholder,
        lock_dir=order.lock_dir,
        base_image=base,
        tags=[],
        extra_tags=(order.tag,) if order.tag else (),
        buildargs=images.build_args(stack, placeholder, base_image=order.base_image),
        labels={
            **images.image_labels(stack, placeholder.sha256, placeholder.backend),
            **images.oci_labels(stack, placeholder, base),
        },
    )


def build_stack(
    engine: Engine,
    order: BuildOrder,
    *,
    say: Say = _quiet,
    phase: Say = _quiet,
    log: Say = _quiet,
) -> StackBuild:
    """Lock (when the stack has no lock), plan, supply the installers and build on `engine`.

    `say` gets the lines worth keeping (stack, lock, base), `phase` each step, `log` what the
    tools print. Every refusal is a GpuenvError before the step that would fail.
    """
    _refuse_offline_lock(order)
    say(f"stack: {order.stack.stack_id}")
    locked_first = not lockdir.has_lock(order.lock_dir)
    if locked_first:
        phase(f"no lock in {order.lock_dir}: locking first")
        if order.backend is None and order.wheelhouse:
            say("backend: uv (--wheelhouse given and no --backend)")
        ensure_lock(
            order.stack,
            backend=order.lock_backend,
            platforms=lock_platforms(order.stack, order.platforms),
            wheelhouse=order.wheelhouse,
            team_file=order.team_file,
            progress=phase,
            conda_channels=order.conda_channels,
            mirrors=order.mirrors,
        )
    plan = _plan(order)
    say(f"lock: {plan.lock.path} ({plan.lock.backend}, sha256 {plan.lock.sha256[:12]})")
    say(f"base image: {plan.base_image}")
    if plan.no_index:
        say(
            f"wheelhouse {plan.wheelhouse} holds every wheel of the lock: no index, "
            "and no network during the build"
        )
    plan = images.supply_tools(engine, plan, progress=phase)
    phase("sending the build context")
    result = images.build_stack_image(engine, plan, progress=log, builder=order.builder)
    return StackBuild(plan=plan, result=result, locked_first=locked_first)


def describe_build(built: StackBuild) -> str:
    """What `invoke build` prints at the end: the image, its tags, size, builder and labels."""
    plan, result = built.plan, built.result
    image = result.image
    first = (
        f"unchanged: reused {image.id} (same lock and inputs: every step came from the build cache)"
        if result.reused
        else f"built {image.id}"
    )
    lines = [
        first,
        f"tags: {', '.join(plan.tags)}",
        f"size: {format_size(image.size)}",
        f"builder: {result.builder}",
    ]
    if result.removed:
        removed = ", ".join(i.removeprefix("sha256:")[:12] for i in result.removed)
        lines.append(f"removed the image the tags replaced: {removed}")
    lines.append("labels:")
    lines += [
        f"  {key}={image.labels[key]}"
        for key in sorted(image.labels)
        if key != images.LABEL_PREFIX + "stack_json"
    ]
    return "\n".join(lines)


def describe_plan(plan: images.BuildPlan, lock_missing: bool) -> str:
    """What `invoke --dry build` prints: stack, lock, build arguments, labels, the Dockerfile."""
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
    dockerfile = plan.docker_dir / "Dockerfile"
    lines.append(f"Dockerfile ({dockerfile}):")
    lines += [f"  {line}" for line in dockerfile.read_text(encoding="utf-8").splitlines()]
    lines.append("nothing was built (--dry)")
    return "\n".join(lines)
