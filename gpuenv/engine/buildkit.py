"""BuildKit through the engine's own API: `POST /build?version=2` with the tar context as the body.

The Docker SDK for Python has no way to ask for BuildKit (its `build` sends no `version`), and the
engine's BuildKit is otherwise reached through a gRPC session (`POST /session`) that the SDK does
not speak. But the engine serves a build of version 2 without a session when the context comes
in the request's body: it hands the tar to BuildKit as a remote context (moby's builder-next
`reqBodyHandler`). Nothing of the session is then needed: no local folders, no secrets, no
credentials (gpuenv builds FROM a base already on the engine and never pulls). So the same
request as the SDK's, through the SDK's own connection, with `version=2` added.

The engine streams BuildKit's progress as `moby.buildkit.trace` records: a base64 protobuf
`StatusResponse` (moby/buildkit api/services/control/control.proto). It is read here with a
small reader of the protobuf wire format (no generated code, no grpc), for the steps, their
logs, which came from the cache, and the failing step.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import IO, Any, Iterator

from gpuenv.progress import Say

#: Longest a BuildKit build may stream nothing, in seconds: past it the engine is taken as stuck
#: and the build fails (a RUN step that prints nothing for 30 minutes would too).
SILENCE_LIMIT = 1800
#: The aux record that names the image built (moby's builder-next exporter).
_IMAGE_ID = "moby.image.id"
_TRACE = "moby.buildkit.trace"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one protobuf message: ints for varints, bytes for
    length-delimited fields (fixed-width fields are skipped: StatusResponse has none we read)."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated field")
            yield number, data[at : at + size]
            at += size
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise ValueError(f"wire type {wire} is not protobuf 3")


@dataclass
class Vertex:
    """One step of the build as BuildKit reports it (control.proto `Vertex`)."""

    digest: str
    name: str = ""
    cached: bool = False
    started: float | None = None
    completed: float | None = None
    error: str = ""


def _timestamp(data: bytes) -> float:
    seconds = nanos = 0
    for number, value in fields(data):
        if number == 1 and isinstance(value, int):
            seconds = value
        elif number == 2 and isinstance(value, int):
            nanos = value
    return seconds + nanos / 1e9


def _vertex(data: bytes) -> Vertex:
    vertex = Vertex(digest="")
    for number, value in fields(data):
        if isinstance(value, bytes):
            if number == 1:
                vertex.digest = value.decode("utf-8", "replace")
            elif number == 3:
                vertex.name = value.decode("utf-8", "replace")
            elif number == 5:
                vertex.started = _timestamp(value)
            elif number == 6:
                vertex.completed = _timestamp(value)
            elif number == 7:
                vertex.error = value.decode("utf-8", "replace")
        elif number == 4:
            vertex.cached = bool(value)
    return vertex


def _log(data: bytes) -> tuple[str, bytes]:
    digest, message = "", b""
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            digest = value.decode("utf-8", "replace")
        elif number == 4 and isinstance(value, bytes):
            message = value
    return digest, message


class TraceError(ValueError):
    """A trace record that is not BuildKit's StatusResponse."""


class Refused(Exception):
    """The engine will not build with BuildKit (the caller falls back to the classic builder)."""


def refusal(err: Exception) -> bool:
    """Whether an engine error answers the request for BuildKit itself, not the build: an engine
    built without it, or one that does not know `version=2`."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    text = str(getattr(err, "explanation", None) or err).lower()
    return status in (400, 404, 500, 501) and any(
        word in text for word in ("buildkit", "builder version", "session", "version")
    )


def decode_status(aux: str) -> tuple[list[Vertex], list[tuple[str, bytes]]]:
    """The vertexes and logs (vertex digest, bytes) of one `moby.buildkit.trace` record."""
    try:
        data = base64.b64decode(aux, validate=True)
        vertexes, logs = [], []
        for number, value in fields(data):
            if number == 1 and isinstance(value, bytes):
                vertexes.append(_vertex(value))
            elif number == 3 and isinstance(value, bytes):
                logs.append(_log(value))
    except ValueError as err:  # binascii.Error is one
        raise TraceError(f"a trace record is not BuildKit's status: {err}") from None
    return vertexes, logs


@dataclass
class Trace:
    """The build as plain lines (`docker build --progress=plain` style), and what it says:
    the steps, which came from the cache, which one failed."""

    emit: Say
    log: list[str] = field(default_factory=list)
    vertexes: dict[str, Vertex] = field(default_factory=dict)
    _numbers: dict[str, int] = field(default_factory=dict)
    _partial: dict[str, bytes] = field(default_factory=dict)

    def say(self, text: str) -> None:
        """One line of the build's log, shown and kept."""
        self.log.append(text)
        self.emit(text + "\n")

    def _number(self, digest: str) -> int:
        return self._numbers.setdefault(digest, len(self._numbers) + 1)

    def record(self, aux: str) -> None:
        """Read one trace record: a step starting, cached, done or failed, and log output."""
        vertexes, logs = decode_status(aux)
        for new in vertexes:
            old = self.vertexes.get(new.digest)
            self.vertexes[new.digest] = new
            if not new.name:
                continue
            number = self._number(new.digest)
            shown = old is not None and (old.started is not None or old.cached)
            if not shown and (new.started is not None or new.cached):
                self.say(f"#{number} {new.name}")
            if new.cached and not (old and old.cached):
                self.say(f"#{number} CACHED")
            if new.error and not (old and old.error):
                self.say(f"#{number} ERROR: {new.error}")
            elif (
                new.completed is not None
                and (old is None or old.completed is None)
                and not new.cached
            ):
                took = new.completed - new.started if new.started is not None else 0.0
                self.say(f"#{number} DONE {took:.1f}s")
        for digest, message in logs:
            text = self._partial.pop(digest, b"") + message
            *whole, rest = text.split(b"\n")
            if rest:
                self._partial[digest] = rest
            for line in whole:
                self.say(f"#{self._number(digest)} {line.decode('utf-8', 'replace').rstrip()}")

    def steps(self) -> list[Vertex]:
        """The Dockerfile's steps (`[stage n/m] INSTRUCTION`), not BuildKit's internal ones."""
        return [
            v
            for v in self.vertexes.values()
            if v.name.startswith("[") and not v.name.startswith("[internal]")
        ]

    def failed_step(self) -> str:
        failed = [v.name for v in self.vertexes.values() if v.error and v.name]
        return failed[-1] if failed else ""


def request(api: Any, context: IO[bytes], params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """POST /build?version=2 through the SDK's own connection (its URL, auth and transport: local
    socket or ssh://), the decoded records streamed back. A stream silent for SILENCE_LIMIT
    fails."""
    query = {**params, "version": "2"}
    for key in ("buildargs", "labels"):
        if key in query:
            query[key] = json.dumps(query[key])
    response = api._post(
        api._url("/build"),
        data=context,
        params=query,
        headers={"Content-Type": "application/x-tar"},
        stream=True,
        timeout=SILENCE_LIMIT,
    )
    api._raise_for_status(response)
    return api._stream_helper(response, decode=True)


def image_id(record: dict[str, Any]) -> str | None:
    """The id of the image built, from the exporter's aux record (`moby.image.id`; an engine that
    answers in the classic builder's form, `{"aux": {"ID": ...}}`, is read too)."""
    aux = record.get("aux")
    if record.get("id") in (_IMAGE_ID, None) and isinstance(aux, dict) and aux.get("ID"):
        return str(aux["ID"])
    return None


def trace_of(record: dict[str, Any]) -> str | None:
    aux = record.get("aux")
    return aux if record.get("id") == _TRACE and isinstance(aux, str) else None
