"""Sharing a stack's image through a registry, pinned by content (`HOST/gpuenv/<stack>@sha256:...`).

Names are decided here as pure functions; the pushes and pulls go through the `Engine` the caller
gives (`gpuenv.engine`, the only Docker SDK user). Credentials are the Docker credential store's,
read by the SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpuenv.engine import Engine, ImageInfo, LayerCallback
from gpuenv.envs import lockdir
from gpuenv.errors import BadInput, GpuenvError
from gpuenv.images import plan as images
from gpuenv.images.reference import check_image_reference
from gpuenv.stack import Stack

#: The digest registries and the engine use for content addresses.
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class PushPlan:
    """One push: the local image (by id) and the names it gets in the registry (its inputs-hash tag,
    latest)."""

    stack: Stack
    source: str
    repository: str
    tags: tuple[str, ...]


def remote_repository(registry: str, stack: Stack) -> str:
    """`127.0.0.1:5000/gpuenv/torch2.13.0-cpu-py3.11`."""
    return f"{registry}/{images.image_repository(stack)}"


def digest_reference(repository: str, digest: str) -> str:
    return f"{repository}@{digest}"


def parse_image_ref(value: str, option: str = "--image") -> str:
    """Check an image reference (name[:tag][@sha256:...]) before any engine call: the name by
    the same distribution/reference grammar `--tag` is checked with (gpuenv/images/reference.py:
    lower-case path, at most 255 characters), the digest as sha256 and 64 hex digits."""
    text = str(value or "").strip()
    name, at, digest = text.partition("@")
    if at and not _SHA256.fullmatch(digest):
        raise BadInput(
            f"{option} {_shown(text)} is not an image reference (a digest is sha256: and 64 hex "
            "digits)",
            fix="give e.g. registry.example.com/gpuenv/<stack>@sha256:<64 hex>, as invoke push "
            "printed it",
        )
    try:
        check_image_reference(name, option)
    except BadInput as err:
        reason = _reason(err.message, option, name)
        fix = (
            "give e.g. registry.example.com/gpuenv/<stack>@sha256:<64 hex>, as invoke push "
            "printed it"
            if option == "--image"
            else str(err.fix)
        )
        raise BadInput(
            f"{option} {_shown(text)} is not an image reference"
            + (f" ({reason})" if reason else ""),
            fix=fix,
        ) from None
    return text


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text)} characters)"


def _reason(message: str, option: str, name: str) -> str:
    """check_image_reference's reason, without its own repetition of the option and value."""
    for head in (f"{option} {name!r}: ", f"{option} {name!r} ", f"{option} {name[:40]!r}...: "):
        if message.startswith(head):
            message = message[len(head) :]
            break
    return "" if message == "is not a valid image reference" else message


def plan_push(engine: Engine, stack: Stack, lock_dir: Path, registry: str) -> PushPlan:
    """The local image of `stack` built from its current lock (found by its labels, this checkout's
    suite preferred), and its registry names: its inputs hash and latest.

    The lock is verified against `stack`, as a build does: a lock copied under another stack's
    name names no image of this stack."""
    lockdir.verify(Path(lock_dir), stack)
    image = images.image_for_stack(engine, stack, lock_dir)
    info = engine.image_info(image)
    inputs = (info.labels.get(images.INPUTS_LABEL) if info else None) or image.removeprefix(
        "sha256:"
    )
    hash_tag = inputs[: images.TAG_HASH_LENGTH]
    return PushPlan(
        stack=stack,
        source=image,
        repository=remote_repository(registry, stack),
        tags=(hash_tag, images.MOVING_TAG),
    )


def push(engine: Engine, plan: PushPlan, progress: LayerCallback | None = None) -> str:
    """Push the plan's image; the digest reference the team shares."""
    if engine.image_info(plan.source) is None:
        raise GpuenvError(
            f"no image {plan.source} (the stack's image for its current lock) on this engine",
            fix=images.build_hint(plan.stack) + ", then push again",
        )
    digest = engine.push_image(plan.source, plan.repository, list(plan.tags), progress=progress)
    return digest_reference(plan.repository, digest)


def ensure_image(
    engine: Engine, ref: str, progress: LayerCallback | None = None, say=lambda _msg: None
) -> ImageInfo:
    """The local image `ref` (checked first); pulled (by digest when the reference has one) when it
    is missing."""
    ref = parse_image_ref(ref)
    how = (
        "by digest"
        if "@sha256:" in ref
        else "by tag (pin it by digest to get the same bytes everywhere)"
    )
    return engine.ensure_image(
        ref, f"{ref} is not on this engine: pulling it {how}", say=say, progress=progress
    )
