"""Test helpers for the Docker engine: what a test made, found precisely, and cleaned up.

Not product code (gpuenv never needs them): they ask the engine through gpuenv's own client. An
engine is often shared (CI runners, a team's build host), so a test counts only its own
containers: by a label its image carries (containers inherit their image's labels), or by image.
"""

from __future__ import annotations

import io
import os
import tarfile
import uuid
from datetime import datetime, timezone
from typing import Any, Iterator

#: The local base image the image, engine and team tests build on (scripts/make-test-base-image.sh).
BASE_IMAGE = os.environ.get("GPUENV_TEST_BASE_IMAGE", "gpuenv-test-base:bookworm")


def _client(timeout: float | None = None) -> Any:
    """The SDK client of this machine's `Engine` (a longer read `timeout` for large streams)."""
    from gpuenv.engine import READ_TIMEOUT, Engine

    return Engine.local(timeout or READ_TIMEOUT).client


def _created(text: str) -> float:
    """The engine's RFC 3339 time (nanoseconds, 'Z') as epoch seconds, to the microsecond."""
    text = text.rstrip("Z")
    whole, _, fraction = text.partition(".")
    stamp = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp()
    return stamp + (float(f"0.{fraction[:6]}") if fraction else 0.0)


def containers_labelled(key: str, value: str | None = None) -> list[str]:
    """Ids of all containers (running or not) carrying label `key` (=`value`)."""
    selector = key if value is None else f"{key}={value}"
    return [c["Id"] for c in _client().api.containers(all=True, filters={"label": selector})]


#: A label that the images this test process builds for the fleet tests carry (the suite image,
#: the hanging one, the PyTorch one), with this process's own value: the containers the fleet
#: makes from them inherit it, so a test counts its own run's fleet containers and never another
#: run's on a shared engine (another test session, CI job or worker has another value).
SESSION_LABEL = "io.gpuenv.test-session"
SESSION = uuid.uuid4().hex[:12]


def session_label_line() -> str:
    """The Dockerfile line that marks an image (and its containers) as this session's."""
    return f"LABEL {SESSION_LABEL}={SESSION}\n"


def session_containers(key: str, value: str | None = None) -> list[str]:
    """Ids of this session's containers (made from an image with `session_label_line`) carrying
    label `key` (=`value`)."""
    selector = key if value is None else f"{key}={value}"
    filters = {"label": [selector, f"{SESSION_LABEL}={SESSION}"]}  # the engine ANDs them
    return [c["Id"] for c in _client().api.containers(all=True, filters=filters)]


def containers_created_since(
    since: float, *, ancestor: str | None = None, command_has: str | None = None
) -> list[str]:
    """Ids of containers created after `since` (epoch seconds, exactly: not rounded to a second),
    of image `ancestor` when given, whose command holds `command_has` when given."""
    api = _client().api
    filters = {"ancestor": ancestor} if ancestor else {}
    found = []
    for summary in api.containers(all=True, filters=filters):
        if summary.get("Created", 0) < int(since):
            continue
        if command_has is not None and command_has not in (summary.get("Command") or ""):
            continue
        try:
            created = _created(api.inspect_container(summary["Id"])["Created"])
        except Exception:  # noqa: BLE001 (removed meanwhile: not left behind)
            continue
        if created >= since:
            found.append(summary["Id"])
    return found


def build_step_containers_since(since: float) -> list[str]:
    """Containers created after `since` that run a step of gpuenv's Dockerfile (every RUN step of
    docker/Dockerfile names gpuenv): a classic build runs each RUN step in one, so a failed or
    interrupted build must leave none. Another user's containers on a shared engine are not
    counted."""
    return containers_created_since(since, command_has="gpuenv")


def remove_untagged_since(since: float) -> list[str]:
    """Remove untagged top-level images created after `since` by a gpuenv Dockerfile (a step of its
    history names gpuenv): what a failed test build left. Another user's images are left alone."""
    cli = _client()
    removed = []
    for image in cli.images.list(filters={"dangling": True}):
        ours = any("gpuenv" in (h.get("CreatedBy") or "") for h in cli.api.history(image.id))
        if ours and _created(image.attrs["Created"]) >= since:
            try:
                cli.images.remove(image.id)
                removed.append(image.id)
            except Exception:  # noqa: BLE001 (used by a container or another image: not ours to force)
                pass
    return removed


def save_image(ref: str) -> Iterator[bytes]:
    """The image as `docker save` writes it, in chunks (every layer, the config and the history)."""
    # An image of a few GB can take minutes before its first bytes on a slow storage driver.
    return _client(timeout=900).images.get(ref).save(named=False)


def remove_build_cache(labels: dict[str, str]) -> None:
    """Remove the install stage a classic build kept as gpuenv-cache/<stack>:<install-hash> for the
    image with `labels` (a BuildKit build keeps none: its cache is the builder's own)."""
    from gpuenv.engine import Engine
    from gpuenv.images.plan import (
        CACHE_REPOSITORY,
        INSTALL_HASH_LABEL,
        STACK_LABEL,
        TAG_HASH_LENGTH,
    )

    if labels.get(STACK_LABEL) and labels.get(INSTALL_HASH_LABEL):
        remove_image(
            Engine.local(),
            f"{CACHE_REPOSITORY}/{labels[STACK_LABEL]}:{labels[INSTALL_HASH_LABEL][:TAG_HASH_LENGTH]}".lower(),
        )


def stack_image_tag(stack: Any, lock_sha256: str) -> str:
    """The inputs-hash tag of the newest image of `stack` built from that lock (found by its
    labels)."""
    from gpuenv.engine import Engine
    from gpuenv.images.plan import INPUTS_LABEL, LOCK_HASH_LABEL, STACK_LABEL, image_tags

    found = Engine.local().find_images({STACK_LABEL: stack.stack_id, LOCK_HASH_LABEL: lock_sha256})
    if not found:
        return image_tags(stack, "0" * 64)[0]  # names no image: the caller's check fails on it
    newest = max(found, key=lambda img: img.created)
    return image_tags(stack, newest.labels.get(INPUTS_LABEL, "0" * 64))[0]


def dockerfile_context(dockerfile: str) -> io.BytesIO:
    """A build context (a tar stream) holding only `dockerfile` as Dockerfile: tiny test images."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        add_dockerfile(tar, dockerfile)
    buf.seek(0)
    return buf


def add_dockerfile(tar: tarfile.TarFile, dockerfile: str) -> None:
    """Put `dockerfile` into a build context being written, as its Dockerfile."""
    data = dockerfile.encode()
    info = tarfile.TarInfo("Dockerfile")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def remove_image(engine: Any, ref: str) -> None:
    """Remove an image a test or benchmark made, with its tags (one already gone is no error):
    clean-up only, so it lives here; gpuenv itself removes only what a build replaced."""
    from docker.errors import ImageNotFound

    try:
        engine.client.images.remove(ref, force=True)
    except ImageNotFound:
        pass


def untag(engine: Any, ref: str) -> None:
    """Take one name off an image; the image stays while other names hold it."""
    from docker.errors import ImageNotFound

    try:
        engine.client.api.remove_image(ref, noprune=True)
    except ImageNotFound:
        pass


def image_history(engine: Any, ref: str) -> list[dict[str, Any]]:
    """The layer history of an image (CreatedBy, Size, ...) as the engine reports it: what a test
    reads to see which Dockerfile steps an image holds."""
    return engine.client.api.history(ref)
