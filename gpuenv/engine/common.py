"""What every part of the engine package shares: how an SDK failure reads in one line, the
failures of the wire below the SDK, and cleanup that must never raise over the error a caller
sees."""

from __future__ import annotations

import sys
from typing import Any, Callable


def short_reason(err: BaseException) -> str:
    """The engine's (or the wire's) reason in one line for a message: its last line, at most 300
    characters."""
    text = str(getattr(err, "explanation", None) or err).strip().splitlines()
    return text[-1][:300] if text else type(err).__name__


def to_stdout(text: str) -> None:
    """Where build logs and container output go when the caller gives no callback of its own."""
    sys.stdout.write(text)
    sys.stdout.flush()


def quietly(action: Callable[[], Any]) -> None:
    """Run a cleanup step whose failure must not replace the error (or interrupt) being raised."""
    from docker.errors import DockerException

    try:
        action()
    except (DockerException, *transport_errors()):
        pass


def transport_errors() -> tuple[type[BaseException], ...]:
    """What a read or connect below the SDK raises when the wire fails or times out."""
    import requests
    import urllib3

    return (requests.RequestException, urllib3.exceptions.HTTPError, OSError, EOFError)
