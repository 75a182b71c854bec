"""Building an image: with BuildKit where the engine offers it (gpuenv/engine/buildkit.py: the
engine's API with `version=2`, which the SDK cannot ask for), else with the classic builder, whose
log stream is read for its steps, its failure and the images it made. Either way tags move only
after success (all or none), no dangling image is left behind, failed or not, and an image is
removed only when this program made it (its labels say so) and nothing uses it. `BuildMixin` is
that part of `Engine`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import IO, Any

import gpuenv.engine.buildkit as buildkit
from gpuenv.engine.causes import build_fix
from gpuenv.engine.common import quietly, short_reason, to_stdout, transport_errors
from gpuenv.engine.images import ImageInfo, info_of, split_tag
from gpuenv.errors import ToolError
from gpuenv.progress import Say

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
    #: "buildkit" or "classic": which builder of the engine built it.
    builder: str = "classic"
    #: Images the new tags replaced and that were removed (this program's, untagged now, unused).
    removed: list[str] = field(default_factory=list)


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


@dataclass(frozen=True)
class _Request:
    """One build's settings, as `build_image` received them, for whichever builder runs it."""

    dockerfile: str
    tags: list[str]
    buildargs: dict[str, str]
    labels: dict[str, str] | None
    network_mode: str | None
    cache_tag: str | None
    nocache: bool
    owner_prefix: str | None
    emit: Say


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
        builder: str = "auto",
        owner_prefix: str | None = None,
        progress: Say | None = None,
    ) -> BuildResult:
        """Build from a tar build context; tag only when it succeeded.

        `builder`: "auto" (BuildKit when the engine offers it, else the classic builder),
        "buildkit" or "classic". `labels` are set on the image by the engine (the classic builder
        makes one step of each: gpuenv's own images carry theirs as one LABEL in the Dockerfile
        instead); `network_mode` "none" runs every RUN step without network. `owner_prefix`
        ("io.gpuenv."): an image with a label under it is this program's; only such an image is ever
        removed or has a name taken from it, and an image the new tags replaced is removed when it
        is this program's and nothing uses it.
        With BuildKit, a build whose every layer and setting equals the image already under
        `tags[0]` keeps that image (BuildKit stamps each build with its own time): the same
        inputs give the same image id. The classic builder's install stage (the next build's
        cache) is kept under `cache_tag`; BuildKit keeps its cache in the builder.
        """
        emit = progress or to_stdout
        request = _Request(
            dockerfile,
            tags,
            buildargs,
            labels,
            network_mode,
            cache_tag,
            nocache,
            owner_prefix,
            emit,
        )
        previous = {ref: info.id for ref in tags if (info := self.image_info(ref)) is not None}  # type: ignore[attr-defined]
        use_buildkit = builder == "buildkit" or (builder == "auto" and self.offers_buildkit())
        result: BuildResult | None = None
        if use_buildkit:
            try:
                result = self._build_buildkit(context, request)
            except buildkit.Refused as err:
                if builder == "buildkit":
                    raise ToolError(
                        f"the engine refused a BuildKit build: {err}",
                        fix="build with the classic builder",
                    ) from None
                emit(
                    f"the engine refused a BuildKit build ({err}): building with the classic "
                    "builder\n"
                )
                context.seek(0)
        if result is None:
            result = self._build_classic(context, request)
        for ref, old in previous.items():
            if (
                old != result.image.id
                and old not in result.removed
                and self._remove_if_ours_and_unused(old, owner_prefix)
            ):
                result.removed.append(old)
        return result

    def layer_ids(self, ref: str) -> list[str]:
        """The diff_ids of the image's layers, base first (`RootFS.Layers` of its config): the
        sha256 of each layer's uncompressed tar, as the engine computed it when storing it."""
        return list((self.client.api.inspect_image(ref).get("RootFS") or {}).get("Layers") or [])

    def label_image(
        self,
        ref: str,
        label_instruction: str,
        *,
        tags: list[str],
        builder: str = "auto",
        owner_prefix: str | None = None,
        progress: Say | None = None,
    ) -> BuildResult:
        """A build of `FROM ref` plus one LABEL instruction, tagged `tags`: the same layers, a label
        more. For a label that names what the build of `ref` made (a layer's diff_id), which that
        build could not know. `ref` is a name: BuildKit takes no image id in FROM."""
        import io
        import tarfile

        dockerfile = f"FROM {ref}\n{label_instruction}".encode()
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            tar.addfile(info, io.BytesIO(dockerfile))
        context.seek(0)
        return self.build_image(
            context,
            dockerfile="Dockerfile",
            tags=tags,
            buildargs={},
            network_mode="none",
            builder=builder,
            owner_prefix=owner_prefix,
            progress=progress,
        )

    def drop_tag(self, ref: str, owner_prefix: str | None) -> None:
        """Untag `ref`, then remove its image when it has no name left, is this program's and
        nothing uses it (a classic build's image stays as the parent of the one built on it)."""
        from docker.errors import ImageNotFound

        try:
            image_id = self.client.images.get(ref).id
        except ImageNotFound:
            return
        repo, tag = split_tag(ref)
        quietly(lambda: self.client.api.remove_image(f"{repo}:{tag}", noprune=True))
        self._remove_if_ours_and_unused(image_id, owner_prefix)

    def offers_buildkit(self) -> bool:
        """Whether the engine builds with BuildKit through its API: Linux engines of API 1.39
        (Docker 18.09) or newer. The engine may still refuse; the build then falls back."""
        from docker.utils import version_gte

        try:
            return (
                version_gte(self.client.api.api_version, "1.39")
                and self.info().get("OSType", "linux") == "linux"
            )  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 (asked again by the build itself, which names the cause)
            return False

    def _build_classic(self, context: IO[bytes], request: _Request) -> BuildResult:
        """Build with the classic builder; tag only when it succeeded.

        Failure is read from the stream (an `error` record, or no image id at the end) and raises
        ToolError with the failing step and the engine's reason; nothing is tagged then. forcerm
        removes the intermediate containers of failed steps. On KeyboardInterrupt the connection is
        closed, which makes the engine cancel the build, and the interrupt propagates untagged.

        No build leaves a dangling image, failed or not: an earlier stage's image (the install
        stage: the build cache of the next rebuild) is kept under `cache_tag` unless that name is
        held by an image this program did not make, and every other untagged image this build
        made is removed. Images made by other builds are never touched.
        """
        from docker.errors import APIError

        log: list[str] = []
        step = ""
        image_id: str | None = None
        trace = _BuildTrace()
        options: dict[str, Any] = {"labels": request.labels} if request.labels else {}
        if request.network_mode:
            options["network_mode"] = request.network_mode
        try:
            stream = self.client.api.build(
                fileobj=context,
                custom_context=True,
                dockerfile=request.dockerfile,
                buildargs=request.buildargs,
                nocache=request.nocache,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                **options,
            )
            for record in stream:
                if "error" in record or "errorDetail" in record:
                    reason = (record.get("errorDetail") or {}).get("message") or record.get(
                        "error", ""
                    )
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
                request.emit(text if text.endswith("\n") else text + "\n")
        except KeyboardInterrupt:
            self.close()  # drops the connection: the engine cancels the build
            try:  # the local engine opened again: this one was closed to cancel the build
                type(self).local()._leave_no_dangling(trace, None, request)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 (best effort: the interrupt is what the user sees)
                pass
            raise
        except APIError as err:
            self._leave_no_dangling(trace, None, request)
            raise ToolError(
                f"docker build was refused: {short_reason(err)}", fix=build_fix(str(err), log)
            ) from None
        except ToolError:
            self._leave_no_dangling(trace, None, request)
            raise
        if not image_id:
            self._leave_no_dangling(trace, None, request)
            raise ToolError(
                "docker build ended without an image" + (f" (last step: {step})" if step else ""),
                fix="see the build log above",
            )
        try:
            self.tag_all_or_none(image_id, request.tags)
        except ToolError:
            self._leave_no_dangling(trace, None, request)
            raise
        self._leave_no_dangling(trace, image_id, request)
        return BuildResult(
            image=info_of(self.client.images.get(image_id)), log=log, builder="classic"
        )

    def _build_buildkit(self, context: IO[bytes], request: _Request) -> BuildResult:
        """Build with BuildKit (buildkit.request); tag only when it succeeded.

        BuildKit makes no image for a step or stage, so a failed build leaves none; the one it
        made is removed when tagging fails, or when it equals the image under `tags[0]`.
        """
        trace = buildkit.Trace(request.emit)
        image_id = self._follow_buildkit(context, request, trace)
        if not image_id:
            raise ToolError(
                "docker build ended without an image",
                fix="see the build log above; nothing was tagged",
            )
        image_id = self._tag_buildkit_image(image_id, request)
        return BuildResult(
            image=info_of(self.client.images.get(image_id)), log=trace.log, builder="buildkit"
        )

    def _follow_buildkit(
        self, context: IO[bytes], request: _Request, trace: buildkit.Trace
    ) -> str | None:
        """Send the build and follow its stream into `trace`: the id of the image it made, or
        None. A failed step, a refused build or a broken stream is a ToolError naming the step;
        buildkit.Refused when the engine cannot build with BuildKit at all."""
        from docker.errors import APIError

        params: dict[str, Any] = {
            "dockerfile": request.dockerfile,
            "buildargs": request.buildargs,
            "nocache": request.nocache,
        }
        if request.labels:
            params["labels"] = request.labels
        if request.network_mode:
            params["networkmode"] = request.network_mode
        image_id: str | None = None
        try:
            for record in buildkit.request(self.client.api, context, params):
                if "error" in record or "errorDetail" in record:
                    reason = (
                        (record.get("errorDetail") or {}).get("message") or record.get("error", "")
                    ).strip()
                    step = trace.failed_step()
                    raise ToolError(
                        f"docker build failed{' at ' + step if step else ''}: {reason}",
                        fix=build_fix(reason, trace.log),
                    )
                if (aux := buildkit.trace_of(record)) is not None:
                    trace.record(aux)
                elif (found := buildkit.image_id(record)) is not None:
                    image_id = found
                elif (text := record.get("stream") or "").strip():
                    trace.say(text.rstrip("\n"))
        except KeyboardInterrupt:
            # drops the connection: the engine cancels the build
            self.close()  # type: ignore[attr-defined]
            raise
        except APIError as err:
            if buildkit.refusal(err):
                raise buildkit.Refused(short_reason(err)) from None
            raise ToolError(
                f"docker build was refused: {short_reason(err)}", fix=build_fix(str(err), trace.log)
            ) from None
        except (buildkit.TraceError, *transport_errors()) as err:
            raise ToolError(
                f"the BuildKit build stream broke off: {err}", fix="build again; nothing was tagged"
            ) from None
        return image_id

    def _tag_buildkit_image(self, image_id: str, request: _Request) -> str:
        """Tag the built image under all of `request.tags` or none, and return the id tagged.
        BuildKit stamps new times on the same layers and settings, so when `tags[0]` already
        holds such an image that one is kept and the new one removed."""
        same = self._same_image_under(request.tags[0], image_id) if request.tags else None
        if same is not None:  # the same layers and settings: keep the image the name already has
            quietly(lambda: self.client.images.remove(image_id))
            image_id = same
        try:
            self.tag_all_or_none(image_id, request.tags)  # type: ignore[attr-defined]
        except ToolError:
            if same is None:
                quietly(lambda: self.client.images.remove(image_id))
            raise
        return image_id

    def _same_image_under(self, ref: str, new_id: str) -> str | None:
        """The id of the image under `ref` when it has the same layers, settings and steps as
        `new_id` (everything but the times BuildKit stamps), else None."""
        from docker.errors import ImageNotFound

        try:
            old = self.client.api.inspect_image(ref)
            new = self.client.api.inspect_image(new_id)
        except ImageNotFound:
            return None
        if old["Id"] == new["Id"]:
            return None

        def steps(image_id: str) -> list[str]:
            return [h.get("CreatedBy", "") for h in self.client.api.history(image_id)]

        alike = all(
            old.get(key) == new.get(key) for key in ("RootFS", "Config", "Architecture", "Os")
        )
        return old["Id"] if alike and steps(old["Id"]) == steps(new["Id"]) else None

    def _leave_no_dangling(self, trace: _BuildTrace, final: str | None, request: _Request) -> None:
        """Keep the last earlier stage's image under `cache_tag`, unless that name holds an image
        this program did not make; remove every other untagged top-level image this build made
        (what `docker images` would show as <none>)."""
        from docker.errors import APIError, ImageNotFound

        cache_tag, owner_prefix = request.cache_tag, request.owner_prefix
        earlier = [i for i in trace.stages if i != final]
        if cache_tag and earlier:
            repo, tag = split_tag(cache_tag)
            try:
                previous = info_of(self.client.images.get(cache_tag))
            except (ImageNotFound, APIError):
                previous = None
            if (
                previous is not None
                and previous.id != earlier[-1]
                and not _owned(previous, owner_prefix)
            ):
                request.emit(
                    f"{cache_tag} names an image this build did not make: it is left as it is, "
                    "and the install stage is not kept as the next build's cache\n"
                )
            else:
                quietly(lambda: self.client.api.tag(earlier[-1], repo, tag, force=True))
                if previous is not None and previous.id != earlier[-1]:
                    # the name moved off an install stage this program kept: untagged now, it is
                    # nobody's cache
                    quietly(lambda: self._remove_if_ours_and_unused(previous.id, owner_prefix))
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

    def _remove_if_ours_and_unused(self, image_id: str, owner_prefix: str | None) -> bool:
        """Remove `image_id` when it has no name left, carries a label under `owner_prefix` (this
        program made it) and nothing uses it: the engine refuses, without force, to remove an
        image a container (running or not) or another image is made from. True when removed."""
        from docker.errors import APIError, ImageNotFound

        try:
            image = info_of(self.client.images.get(image_id))
            if image.tags or not _owned(image, owner_prefix):
                return False
            self.client.api.remove_image(image.id)
            return True
        except (ImageNotFound, APIError, *transport_errors()):
            return False


def _owned(image: ImageInfo, owner_prefix: str | None) -> bool:
    """Whether `image` carries a label under `owner_prefix` (None: no image is known to be ours)."""
    return owner_prefix is not None and any(key.startswith(owner_prefix) for key in image.labels)
