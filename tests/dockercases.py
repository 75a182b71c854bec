"""Test helpers for the Docker engine: what a test made, found precisely, and cleaned up.

Not product code (gpuenv never needs them): they ask the engine through gpuenv's own client. An
engine is often shared (CI runners, a team's build host), so a test counts only its own
containers: by a label its image carries (containers inherit their image's labels), or by image.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterator


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


def containers_created_since(since: float, *, ancestor: str | None = None) -> list[str]:
    """Ids of containers created after `since` (epoch seconds, exactly: not rounded to a second),
    of image `ancestor` when given. A build's RUN steps run in containers: tests use this to check
    that failed and interrupted builds leave none behind."""
    api = _client().api
    filters = {"ancestor": ancestor} if ancestor else {}
    found = []
    for summary in api.containers(all=True, filters=filters):
        if summary.get("Created", 0) < int(since):
            continue
        try:
            created = _created(api.inspect_container(summary["Id"])["Created"])
        except Exception:  # noqa: BLE001 (removed meanwhile: not left behind)
            continue
        if created >= since:
            found.append(summary["Id"])
    return found


def remove_untagged_since(since: float) -> list[str]:
    """Remove untagged top-level images created after `since` (what a failed test build left)."""
    cli = _client()
    removed = []
    for image in cli.images.list(filters={"dangling": True}):
        if _created(image.attrs["Created"]) >= since:
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
    """Remove the install stage a build kept as gpuenv-cache/<stack>:<lock-hash> for the image with `labels`."""
    from gpuenv.engine import Engine
    from gpuenv.images.plan import CACHE_REPOSITORY, LOCK_HASH_LABEL, STACK_LABEL, TAG_HASH_LENGTH

    if labels.get(STACK_LABEL) and labels.get(LOCK_HASH_LABEL):
        Engine.local().remove_image(f"{CACHE_REPOSITORY}/{labels[STACK_LABEL]}:{labels[LOCK_HASH_LABEL][:TAG_HASH_LENGTH]}".lower())
