"""Sharing a stack's image through a registry, pinned by content (`HOST/gpuenv/<stack>@sha256:...`).

Names are decided here as pure functions; the pushes and pulls go through `gpuenv.engine`, the
only Docker SDK user. Credentials are the Docker credential store's, read by the SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpuenv import images
from gpuenv.engine import ImageInfo, LayerCallback
from gpuenv.errors import BadInput, GpuenvError
from gpuenv.stack import Stack

_REF = re.compile(
    r"(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::\d+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)


@dataclass(frozen=True)
class PushPlan:
    """One push: the local image (by its lock-hash tag) and the names it gets in the registry."""

    stack: Stack
    source: str
    repository: str
    tags: tuple[str, ...]


def remote_repository(registry: str, stack: Stack) -> str:
    """`127.0.0.1:5000/gpuenv/torch2.13.0-cpu-py3.11`."""
    return f"{registry}/{images.image_repository(stack)}"


def digest_reference(repository: str, digest: str) -> str:
    return f"{repository}@{digest}"


def parse_image_ref(value: str) -> str:
    """Check an image reference (name[:tag][@sha256:...]) before any engine call."""
    text = str(value or "").strip()
    match = _REF.fullmatch(text)
    if not match:
        hint = " (a digest is sha256: and 64 hex digits)" if "@" in text else ""
        raise BadInput(f"--image {text!r} is not an image reference{hint}",
                       fix="give e.g. registry.example.com/gpuenv/<stack>@sha256:<64 hex>, as invoke push printed it")
    return text


def plan_push(stack: Stack, lock_dir: Path, registry: str) -> PushPlan:
    """The image of `stack` built from its current lock, and its registry names (lock hash, latest)."""
    lock = images.read_lock(lock_dir)
    local = images.image_tags(stack, lock.sha256)[0]
    hash_tag = local.rsplit(":", 1)[1]
    return PushPlan(stack=stack, source=local, repository=remote_repository(registry, stack), tags=(hash_tag, images.MOVING_TAG))


def push(plan: PushPlan, progress: LayerCallback | None = None) -> str:
    """Push the plan's image; the digest reference the team shares."""
    from gpuenv import engine

    if engine.image_info(plan.source) is None:
        raise GpuenvError(f"no image {plan.source} (the stack's image for its current lock) on this engine",
                          fix=images.build_hint(plan.stack) + ", then push again")
    digest = engine.push_image(plan.source, plan.repository, list(plan.tags), progress=progress)
    return digest_reference(plan.repository, digest)


def ensure_image(ref: str, progress: LayerCallback | None = None, say=lambda _msg: None) -> ImageInfo:
    """The local image `ref`; pulled (by digest when the reference has one) when it is missing."""
    from gpuenv import engine

    ref = parse_image_ref(ref)
    info = engine.image_info(ref)
    if info is not None:
        return info
    how = "by digest" if "@sha256:" in ref else "by tag (pin it by digest to get the same bytes everywhere)"
    say(f"{ref} is not on this engine: pulling it {how}")
    return engine.pull_image(ref, progress=progress)
