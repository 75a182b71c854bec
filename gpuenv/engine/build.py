"""Building an image with the classic builder (the SDK cannot drive BuildKit): the build-log
stream read for its steps, its failure and the images it made; tags moved only after success
(all or none), and no dangling image left behind, failed or not. `BuildMixin` is that part of `Engine`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import IO, Any

from gpuenv.engine.causes import build_fix
from gpuenv.engine.common import Progress, quietly, short_reason, to_stdout
from gpuenv.engine.images import ImageInfo, info_of, split_tag
from gpuenv.errors import ToolError

_STEP = re.compile(r"^Step \d+/\d+ : ")
_BUILT = re.compile(r"Successfully built ([0-9a-f]{12,64})")


@dataclass
class BuildResult:
    """A successful build: the image, the tags it got, and the log the engine streamed.

    `reused`: the first tag already named this very image (nothing changed since that build).
    """

    image: ImageInfo
    log: list[str]
    reused: bool = False


_STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})$")


@dataclass
class _BuildTrace:
    """What one build made, read from its stream: the images of the steps it ran (not the cached
    ones, not a FROM), and each stage's final image (the `aux` ID records, in order)."""

    made: set[str] = field(default_factory=set)
    stages: list[str] = field(default_factory=list)
    _cached: bool = False
    _from: bool = False

    def line(self, text: str) -> None:
        if _STEP.match(text):
            self._cached = False
            self._from = text.split(" : ", 1)[1].upper().startswith("FROM ")
        elif text.strip() == "---> Using cache":
            self._cached = True
        elif (match := _STEP_IMAGE.match(text)) and not self._cached and not self._from:
            self.made.add(match.group(1))


class BuildMixin:
    """The build call of `Engine`."""

    client: Any  # docker.DockerClient, set by Connection

    def build_image(
        self,
        context: IO[bytes],
        *,
        dockerfile: str,
        tags: list[str],
        buildargs: dict[str, str],
        labels: dict[str, str] | None = None,
        network_mode: str | None = None,
        cache_tag: str | None = None,
        nocache: bool = False,
        progress: Progress | None = None,
    ) -> BuildResult:
        """Build from a tar build context with the classic builder; tag only when it succeeded.

        Failure is read from the stream (an `error` record, or no image id at the end) and raises
        ToolError with the failing step and the engine's reason; nothing is tagged then. forcerm
        removes the intermediate containers of failed steps. On KeyboardInterrupt the connection is
        closed, which makes the engine cancel the build, and the interrupt propagates untagged.

        `labels` are set on the image (one source, no LABEL in the Dockerfile); `network_mode`
        "none" runs every RUN step without network. No build leaves a dangling image, failed or
        not: an earlier stage's image (the install stage: the build cache of the next rebuild) is
        kept under `cache_tag`, and every other untagged image this build made is removed. Images
        made by other builds are never touched.
        """
        from docker.errors import APIError

        emit = progress or to_stdout
        log: list[str] = []
        step = ""
        image_id: str | None = None
        trace = _BuildTrace()
        options: dict[str, Any] = {"labels": labels} if labels else {}
        if network_mode:
            options["network_mode"] = network_mode
        try:
            stream = self.client.api.build(
                fileobj=context,
                custom_context=True,
                dockerfile=dockerfile,
                buildargs=buildargs,
                nocache=nocache,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                **options,
            )
            for record in stream:
                if "error" in record or "errorDetail" in record:
                    reason = (record.get("errorDetail") or {}).get("message") or record.get("error", "")
                    raise ToolError(
                        f"docker build failed{' at ' + step if step else ''}: {reason.strip()}",
                        fix=build_fix(reason, log),
                    )
                if "aux" in record and isinstance(record["aux"], dict) and record["aux"].get("ID"):
                    image_id = record["aux"]["ID"]
                    trace.stages.append(image_id)
                text = record.get("stream") or record.get("status") or ""
                if not text.strip():
                    continue
                for line in text.rstrip("\n").splitlines():
                    log.append(line)
                    trace.line(line)
                    if _STEP.match(line):
                        step = line.split(" : ", 1)[0]
                    if match := _BUILT.search(line):
                        image_id = image_id or match.group(1)
                emit(text if text.endswith("\n") else text + "\n")
        except KeyboardInterrupt:
            self.close()  # drops the connection: the engine cancels the build
            try:  # the local engine opened again: this one was closed to cancel the build
                type(self).local()._leave_no_dangling(trace, None, cache_tag)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 (best effort: the interrupt is what the user sees)
                pass
            raise
        except APIError as err:
            self._leave_no_dangling(trace, None, cache_tag)
            raise ToolError(f"docker build was refused: {short_reason(err)}", fix=build_fix(str(err), log)) from None
        except ToolError:
            self._leave_no_dangling(trace, None, cache_tag)
            raise
        if not image_id:
            self._leave_no_dangling(trace, None, cache_tag)
            raise ToolError(
                "docker build ended without an image" + (f" (last step: {step})" if step else ""),
                fix="see the build log above",
            )
        try:
            self.tag_all_or_none(image_id, tags)
        except ToolError:
            self._leave_no_dangling(trace, None, cache_tag)
            raise
        self._leave_no_dangling(trace, image_id, cache_tag)
        return BuildResult(image=info_of(self.client.images.get(image_id)), log=log)

    def _leave_no_dangling(self, trace: _BuildTrace, final: str | None, cache_tag: str | None) -> None:
        """Keep the last earlier stage's image under `cache_tag`; remove every other untagged
        top-level image this build made (what `docker images` would show as <none>)."""
        from docker.errors import APIError, ImageNotFound

        earlier = [i for i in trace.stages if i != final]
        if cache_tag and earlier:
            repo, tag = split_tag(cache_tag)
            try:
                previous: str | None = self.client.images.get(cache_tag).id
            except (ImageNotFound, APIError):
                previous = None
            quietly(lambda: self.client.api.tag(earlier[-1], repo, tag, force=True))
            if previous and previous != earlier[-1]:
                # the tag moved off an install stage gpuenv kept: untagged now, it is nobody's cache
                quietly(lambda: self._remove_if_dangling(previous))
        made = {i.removeprefix("sha256:")[:12] for i in trace.made | set(trace.stages)}
        if final:
            made.discard(final.removeprefix("sha256:")[:12])
        if not made:
            return
        try:
            dangling = self.client.images.list(filters={"dangling": True})
        except APIError:
            return
        for image in dangling:
            if image.id.removeprefix("sha256:")[:12] in made:
                quietly(lambda image=image: self.client.images.remove(image.id))

    def _remove_if_dangling(self, image_id: str) -> None:
        image = self.client.images.get(image_id)
        if not image.tags:
            self.client.images.remove(image.id)
