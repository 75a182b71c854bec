"""Images on an engine: what one is (`ImageInfo`), finding, naming, tagging (all or none); making
an image present; push and pull through a registry, each stream followed
to its digest and bounded. `ImagesMixin` is that part of `Engine`; builds are build.py's.

Credentials are the Docker credential store's, read by the SDK itself (~/.docker/config.json,
its credHelpers/credsStore, or DOCKER_CONFIG): gpuenv passes no auth_config and writes nothing."""

from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gpuenv.engine.causes import registry_of, registry_problem
from gpuenv.engine.common import quietly, short_reason, to_stdout, transport_errors
from gpuenv.engine.connection import READ_TIMEOUT
from gpuenv.errors import GpuenvError, ToolError
from gpuenv.progress import Say

#: Longest a pull may take in all when the caller gives no deadline of its own.
PULL_LIMIT = 2 * 3600


@dataclass(frozen=True)
class ImageInfo:
    """What `invoke images` and the tests need to know about one local image."""

    id: str
    tags: list[str]
    size: int
    created: str
    labels: dict[str, str] = field(default_factory=dict)
    architecture: str = ""  # the image config's ("amd64", "arm64"); "" when it names none


@dataclass(frozen=True)
class LayerProgress:
    """One record of a push or pull stream: a layer (or '' for the whole image) and its bytes."""

    layer: str
    status: str
    current: int | None = None
    total: int | None = None


LayerCallback = Callable[[LayerProgress], None]
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def info_of(image: Any) -> ImageInfo:
    """An SDK Image as gpuenv reads it."""
    attrs = image.attrs
    return ImageInfo(
        id=image.id,
        tags=list(image.tags),
        size=int(attrs.get("Size", 0)),
        created=str(attrs.get("Created", "")),
        labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
        architecture=str(attrs.get("Architecture") or ""),
    )


def split_tag(ref: str) -> tuple[str, str]:
    """(repository, tag) of `ref`, the tag `latest` when it names none (a registry port is no
    tag)."""
    return (
        (ref.rpartition(":")[0], ref.rpartition(":")[2])
        if ":" in ref.split("/")[-1]
        else (ref, "latest")
    )


class ImagesMixin:
    """The image calls of `Engine`."""

    client: Any  # docker.DockerClient, set by Connection

    def image_info(self, ref: str) -> ImageInfo | None:
        """The image `ref` (name:tag or id) on this engine, or None when it has no such image."""
        from docker.errors import ImageNotFound

        try:
            return info_of(self.client.images.get(ref))
        except ImageNotFound:
            return None

    def find_images(self, labels: dict[str, str | None]) -> list[ImageInfo]:
        """Images carrying all `labels` (a None value matches any value of that label)."""
        filters = [k if v is None else f"{k}={v}" for k, v in labels.items()]
        return [info_of(img) for img in self.client.images.list(filters={"label": filters})]

    def image_name(self, ref: str) -> str:
        """How a message names an image: by a tag when it has one, else by its short id (never
        sha256:...)."""
        if not re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", ref):
            return ref  # already a name
        try:
            info = self.image_info(ref)
        except (GpuenvError, *transport_errors()):
            info = None
        if info is not None and info.tags:
            return sorted(info.tags, key=lambda t: (t.endswith(":latest"), t))[0]
        return ref.removeprefix("sha256:")[:12]

    def tag_all_or_none(self, image_id: str, tags: list[str]) -> None:
        """Give `image_id` every tag in `tags`, or, when the engine refuses one, put back the ones
        moved.

        Tags move together: a refused tag (a name the engine will not take) must not leave the
        stack's `latest` on the new image while the team's tag stays on the old one.
        """
        from docker.errors import APIError, ImageNotFound

        cli = self.client
        moved: list[tuple[str, str | None]] = []  # (ref, the image it named before)
        for ref in tags:
            repo, tag = split_tag(ref)
            try:
                try:
                    before: str | None = cli.images.get(f"{repo}:{tag}").id
                except ImageNotFound:
                    before = None
                cli.api.tag(image_id, repo, tag, force=True)
            except APIError as err:
                for done_ref, previous in reversed(moved):
                    quietly(lambda r=done_ref, p=previous: self._restore_tag(r, p))
                raise ToolError(
                    f"the engine refused the tag {ref} after the build: {short_reason(err)}",
                    fix="no tag was moved; choose a valid --tag and build again (the layers are "
                    "cached)",
                ) from None
            moved.append((f"{repo}:{tag}", before))

    def _restore_tag(self, ref: str, previous: str | None) -> None:
        if previous is None:
            self.client.api.remove_image(
                ref, noprune=True
            )  # only removes the name: the image keeps its other tags
        else:
            repo, tag = split_tag(ref)
            self.client.api.tag(previous, repo, tag, force=True)

    def ensure_image(
        self,
        ref: str,
        notice: str,
        *,
        say: Say | None = None,
        progress: LayerCallback | None = None,
    ) -> ImageInfo:
        """The image `ref` on this engine, pulled once when it is missing (the caller needs it next
        anyway). `notice`, the caller's words for why a pull starts, goes to `say` (default: stdout)
        only when one does; a failed pull raises pull_image's ToolError for the caller to word."""
        info = self.image_info(ref)
        if info is not None:
            return info
        (say or to_stdout)(notice)
        return self.pull_image(ref, progress=progress)

    def push_image(
        self,
        source: str,
        repository: str,
        tags: list[str],
        *,
        progress: LayerCallback | None = None,
    ) -> str:
        """Tag image `source` as repository:TAG for each tag, push them, return the manifest digest.

        If the push fails, every local name this call set is put back as it was: a name it created
        is taken off, a name that was on another image (a `latest` pulled earlier) goes back to that
        image, and a name already on this image is not touched. The image and its gpuenv/<stack>
        tags stay.
        """
        from docker.errors import APIError, DockerException, ImageNotFound

        cli = self.client
        try:
            image = cli.images.get(source)
        except ImageNotFound:
            raise GpuenvError(
                f"image {source} is not present on this engine", fix="build it with invoke build"
            ) from None
        moved: list[
            tuple[str, str | None]
        ] = []  # (ref, the image it named before; None: it did not exist)
        try:
            for tag in tags:
                ref = f"{repository}:{tag}"
                if ref not in image.tags:
                    try:
                        before: str | None = cli.images.get(ref).id
                    except ImageNotFound:
                        before = None
                    image.tag(repository, tag)
                    moved.append((ref, before))
            digest = None
            for tag in tags:
                found = _stream(
                    cli.api.push(repository, tag=tag, stream=True, decode=True),
                    progress,
                    f"{repository}:{tag}",
                    "push",
                )
                digest = digest or found
        except BaseException as err:
            for ref, before in reversed(moved):
                quietly(lambda ref=ref, before=before: self._restore_tag(ref, before))
            if isinstance(err, APIError):
                what, fix = registry_problem(short_reason(err), registry_of(repository))
                raise ToolError(
                    f"push {repository} failed: {what} ({short_reason(err)[:200]})", fix=fix
                ) from None
            if isinstance(err, DockerException):
                raise ToolError(
                    f"push {repository} failed: {short_reason(err)}",
                    fix="check the Docker engine and the registry",
                ) from None
            raise
        if not digest:
            raise ToolError(
                f"push {repository} ended without a digest",
                fix="check the registry's log; the engine said nothing went wrong",
            )
        return digest

    def pull_image(
        self,
        ref: str,
        *,
        progress: LayerCallback | None = None,
        deadline: float | None = None,
        stall_timeout: float | None = None,
    ) -> ImageInfo:
        """Pull `ref` (name@sha256:... or name:tag) into the engine; the image, as image_info gives
        it.

        Bounded twice. The SDK's own pull reads with no timeout at all (it passes timeout=None), so
        a registry that stalls mid-download would hang it forever; this sends the same request
        (the same auth header from the credential store) with a read timeout of `stall_timeout`
        (default: the client's), and closes it at `deadline` (a time.monotonic() value; default
        PULL_LIMIT from now). Closing the request makes the engine cancel the pull.
        """
        from docker.utils import parse_repository_tag
        from docker.utils.json_stream import json_stream

        from docker import auth

        api = self.client.api
        stall = float(stall_timeout or api.timeout or READ_TIMEOUT)
        end = deadline if deadline is not None else time.monotonic() + PULL_LIMIT
        repository, tag = parse_repository_tag(ref)
        registry, _ = auth.resolve_repository_name(repository)
        headers = {}
        header = auth.get_config_header(api, registry)
        if header:
            headers["X-Registry-Auth"] = header
        late = threading.Event()
        response = None
        timer = None
        try:
            response = api.post(
                f"{api.base_url}/v{api.api_version}/images/create",
                params={"fromImage": repository, "tag": tag or "latest"},
                headers=headers,
                stream=True,
                timeout=(stall, stall),
            )
            if response.status_code >= 400:
                reason = _response_message(response)
                what, fix = registry_problem(reason, registry_of(ref))
                raise ToolError(f"pull {ref} failed: {what} ({reason[:200]})", fix=fix)

            def expire(resp: Any = response) -> None:
                late.set()
                _abort(resp)  # the read blocked in the other thread ends now

            timer = threading.Timer(max(0.0, end - time.monotonic()), expire)
            timer.daemon = True
            timer.start()
            _stream(
                json_stream(response.iter_content(chunk_size=None, decode_unicode=False)),
                progress,
                ref,
                "pull",
                deadline=end,
            )
            if late.is_set():
                raise _PastDeadline()
        except _PastDeadline:
            raise ToolError(
                f"pull {ref} did not finish in time",
                fix="the registry is slow or stalled; try again, or pull it there by hand",
            ) from None
        except ToolError:
            raise
        except (*transport_errors(), ValueError) as err:
            if late.is_set():
                raise ToolError(
                    f"pull {ref} did not finish in time",
                    fix="the registry is slow or stalled; try again, or pull it there by hand",
                ) from None
            stalled = "timed out" in str(err).lower() or isinstance(
                err, (TimeoutError, socket.timeout)
            )
            what = (
                f"the download stalled (nothing for {stall:.0f}s)"
                if stalled
                else f"the connection to the engine broke ({short_reason(err)})"
            )
            raise ToolError(
                f"pull {ref} failed: {what}",
                fix="check the registry (it stopped sending) and try again",
            ) from None
        finally:
            if timer is not None:
                timer.cancel()
            if response is not None:
                quietly(response.close)  # an unfinished pull is cancelled by the engine
        info = self.image_info(ref)
        if info is None:
            raise ToolError(
                f"pull {ref} ended but the engine has no such image",
                fix="check the reference and the registry",
            )
        return info


class _PastDeadline(Exception):
    pass


def _abort(response: Any) -> None:
    """End a streamed response now, even while another thread is blocked reading it: close()
    alone does not wake a blocked recv(), shutting the socket (or SSH channel) down does."""
    sock = getattr(getattr(response.raw, "connection", None), "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError, TypeError):
            pass
    quietly(response.close)


def _response_message(response: Any) -> str:
    """The engine's `message` of an error answer, else its text."""
    try:
        return str(response.json().get("message") or response.text).strip()
    except ValueError:
        return (response.text or f"HTTP {response.status_code}").strip()


def _stream(
    records: Any,
    progress: LayerCallback | None,
    ref: str,
    action: str,
    deadline: float | None = None,
) -> str | None:
    """Follow a push/pull stream; the digest it announces; an error record raises ToolError."""
    digest = None
    for record in records:
        if deadline is not None and time.monotonic() > deadline:
            raise _PastDeadline()
        if "error" in record or "errorDetail" in record:
            reason = (
                (record.get("errorDetail") or {}).get("message") or record.get("error") or ""
            ).strip()
            what, fix = registry_problem(reason, registry_of(ref))
            raise ToolError(f"{action} {ref} failed: {what} ({reason[:200]})", fix=fix)
        aux = record.get("aux")
        if isinstance(aux, dict) and aux.get("Digest"):
            digest = aux["Digest"]
        status = str(record.get("status") or "")
        if digest is None and (match := _DIGEST.search(status)) and "digest" in status.lower():
            digest = match.group(0)
        if progress is not None and status:
            detail = record.get("progressDetail") or {}
            progress(
                LayerProgress(
                    str(record.get("id") or ""), status, detail.get("current"), detail.get("total")
                )
            )
    return digest
