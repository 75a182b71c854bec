"""The Docker engine, through the Docker SDK for Python: the only module that imports `docker`.

A thin layer that turns the SDK's exceptions and streams into gpuenv errors with the fix in the
message. It builds with the classic builder (the SDK cannot drive BuildKit), tags only after a
build succeeded, and removes every container it starts.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from gpuenv.errors import BadInput, GpuenvError, ToolError

Progress = Callable[[str], None]

#: Shared memory for PyTorch data loader workers and NCCL: Docker's default /dev/shm is 64 MiB,
#: which makes multi-worker DataLoaders and NCCL fail with "bus error" / "unable to allocate".
DEFAULT_SHM_SIZE = "8g"
#: Where `run_container` mounts the folder it is given.
WORKDIR_IN_CONTAINER = "/workspace"
ENGINE_FIX = "start the Docker engine (sudo systemctl start docker, or sudo scripts/install-docker.sh) or set DOCKER_HOST"
_STEP = re.compile(r"^Step \d+/\d+ : ")
_BUILT = re.compile(r"Successfully built ([0-9a-f]{12,64})")
_TLS_FAILURE = re.compile(r"CERTIFICATE_VERIFY_FAILED|invalid peer certificate|UnknownIssuer|certificate verify failed", re.I)


@dataclass(frozen=True)
class ImageInfo:
    """What `invoke images` and the tests need to know about one local image."""

    id: str
    tags: list[str]
    size: int
    created: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class BuildResult:
    """A successful build: the image, the tags it got, and the log the engine streamed."""

    image: ImageInfo
    log: list[str]


def client(timeout: int = 60) -> Any:
    """A Docker SDK client that has answered a ping (DOCKER_HOST and friends are honoured).

    `timeout` is the SDK's read timeout: calls that stream large data (saving an image) need more.
    """
    import docker

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        cli = docker.from_env(timeout=timeout)
        cli.ping()
    except Exception as err:  # DockerException, or requests' connection errors that ping lets through
        raise ToolError(f"the Docker engine at {where} does not answer ({_short(err)})", fix=ENGINE_FIX) from None
    return cli


def _short(err: BaseException) -> str:
    text = str(getattr(err, "explanation", None) or err).strip().splitlines()
    return text[-1][:300] if text else type(err).__name__


def _info(image: Any) -> ImageInfo:
    attrs = image.attrs
    return ImageInfo(
        id=image.id,
        tags=list(image.tags),
        size=int(attrs.get("Size", 0)),
        created=str(attrs.get("Created", "")),
        labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
    )


# ---------------------------------------------------------------- images


def image_info(ref: str) -> ImageInfo | None:
    """The local image `ref` (name:tag or id), or None when the engine has no such image."""
    from docker.errors import ImageNotFound

    try:
        return _info(client().images.get(ref))
    except ImageNotFound:
        return None


def find_images(labels: dict[str, str | None]) -> list[ImageInfo]:
    """Local images carrying all `labels` (a None value matches any value of that label)."""
    filters = [k if v is None else f"{k}={v}" for k, v in labels.items()]
    return [_info(img) for img in client().images.list(filters={"label": filters})]


def remove_image(ref: str) -> None:
    """Remove a local image and its tags (used by tests and benchmarks to clean up)."""
    from docker.errors import ImageNotFound

    try:
        client().images.remove(ref, force=True)
    except ImageNotFound:
        pass


def image_history(ref: str) -> list[dict[str, Any]]:
    """The layer history of an image (CreatedBy, Size, ...) as the engine reports it."""
    return client().api.history(ref)


def build_image(
    context: IO[bytes],
    *,
    dockerfile: str,
    tags: list[str],
    buildargs: dict[str, str],
    nocache: bool = False,
    progress: Progress | None = None,
) -> BuildResult:
    """Build from a tar build context with the classic builder; tag only when it succeeded.

    Failure is read from the stream (an `error` record, or no image id at the end) and raises
    ToolError with the failing step and the engine's reason; nothing is tagged then. forcerm
    removes the intermediate containers of failed steps. On KeyboardInterrupt the connection is
    closed, which makes the engine cancel the build, and the interrupt propagates untagged.
    """
    from docker.errors import APIError

    emit = progress or _print
    cli = client()
    log: list[str] = []
    step = ""
    image_id: str | None = None
    try:
        stream = cli.api.build(
            fileobj=context,
            custom_context=True,
            dockerfile=dockerfile,
            buildargs=buildargs,
            nocache=nocache,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        for record in stream:
            if "error" in record or "errorDetail" in record:
                reason = (record.get("errorDetail") or {}).get("message") or record.get("error", "")
                raise ToolError(
                    f"docker build failed{' at ' + step if step else ''}: {reason.strip()}",
                    fix=_build_fix(reason, log),
                )
            if "aux" in record and isinstance(record["aux"], dict) and record["aux"].get("ID"):
                image_id = record["aux"]["ID"]
            text = record.get("stream") or record.get("status") or ""
            if not text.strip():
                continue
            for line in text.rstrip("\n").splitlines():
                log.append(line)
                if _STEP.match(line):
                    step = line.split(" : ", 1)[0]
                if match := _BUILT.search(line):
                    image_id = image_id or match.group(1)
            emit(text if text.endswith("\n") else text + "\n")
    except KeyboardInterrupt:
        cli.close()  # drops the connection: the engine cancels the build
        raise
    except APIError as err:
        raise ToolError(f"docker build was refused: {_short(err)}", fix=_build_fix(str(err), log)) from None
    if not image_id:
        raise ToolError(
            "docker build ended without an image" + (f" (last step: {step})" if step else ""),
            fix="see the build log above",
        )
    tag_all_or_none(cli, image_id, tags)
    return BuildResult(image=_info(cli.images.get(image_id)), log=log)


def _split(ref: str) -> tuple[str, str]:
    return (ref.rpartition(":")[0], ref.rpartition(":")[2]) if ":" in ref.split("/")[-1] else (ref, "latest")


def tag_all_or_none(cli: Any, image_id: str, tags: list[str]) -> None:
    """Give `image_id` every tag in `tags`, or, when the engine refuses one, put back the ones moved.

    Tags move together: a refused tag (a name the engine will not take) must not leave the
    stack's `latest` on the new image while the team's tag stays on the old one.
    """
    from docker.errors import APIError, ImageNotFound

    moved: list[tuple[str, str | None]] = []  # (ref, the image it named before)
    for ref in tags:
        repo, tag = _split(ref)
        try:
            try:
                before: str | None = cli.images.get(f"{repo}:{tag}").id
            except ImageNotFound:
                before = None
            cli.api.tag(image_id, repo, tag, force=True)
        except APIError as err:
            for done_ref, previous in reversed(moved):
                _quietly(lambda r=done_ref, p=previous: _restore_tag(cli, r, p))
            raise ToolError(
                f"the engine refused the tag {ref} after the build: {_short(err)}",
                fix="no tag was moved; choose a valid --tag and build again (the layers are cached)",
            ) from None
        moved.append((f"{repo}:{tag}", before))


def _restore_tag(cli: Any, ref: str, previous: str | None) -> None:
    if previous is None:
        cli.api.remove_image(ref, noprune=True)  # only removes the name: the image keeps its other tags
    else:
        repo, tag = _split(ref)
        cli.api.tag(previous, repo, tag, force=True)


def image_name(ref: str) -> str:
    """How a message names an image: by a tag when it has one, else by its short id (never sha256:...)."""
    if not re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", ref):
        return ref  # already a name
    try:
        info = image_info(ref)
    except GpuenvError:
        info = None
    if info is not None and info.tags:
        return sorted(info.tags, key=lambda t: (t.endswith(":latest"), t))[0]
    return ref.removeprefix("sha256:")[:12]


def _build_fix(reason: str, log: list[str]) -> str:
    text = reason.lower()
    if any(word in text for word in ("pull access denied", "manifest unknown", "registry", "no such host", "manifest for")):
        return "the base image is not present locally and cannot be pulled: pull it, or pass --base-image with a local image"
    # pip/requests say CERTIFICATE_VERIFY_FAILED, uv "invalid peer certificate: UnknownIssuer".
    if "certificate" in text or any(_TLS_FAILURE.search(line) for line in log[-40:]):
        return "HTTPS inside the build does not trust your proxy: pass --ca-cert /etc/ssl/certs/ca-certificates.crt"
    return "see the build log above; nothing was tagged"


def _print(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


# ---------------------------------------------------------------- containers


_GPU_ID = re.compile(r"\d+|GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}|MIG-[0-9a-zA-Z/-]+", re.I)


def parse_gpus(gpus: str) -> str | list[str]:
    """`--gpus` checked without the engine: "all", "none", or the list of GPU indices/UUIDs.

    Every entry must be one: `0,,1`, `0,`, `1,1` and `-1` are mistakes to name, not to tidy up.
    """
    value = (gpus or "").strip()
    if value.lower() in ("all", "none"):
        return value.lower()
    fix = "use --gpus all, --gpus none, or indices/UUIDs such as --gpus 0,1"
    parts = [part.strip() for part in value.split(",")]
    if not value or any(not part for part in parts):
        raise BadInput(f"--gpus {gpus!r} has an empty entry", fix=fix)
    bad = [part for part in parts if not _GPU_ID.fullmatch(part)]
    if bad:
        raise BadInput(f"--gpus {gpus!r}: {bad[0]!r} is not a GPU index or UUID", fix=fix)
    if len(set(parts)) != len(parts):
        raise BadInput(f"--gpus {gpus!r} names a GPU twice", fix=fix)
    return parts


def parse_shm_size(value: str | int) -> int:
    """`--shm-size` in bytes, checked by the SDK's own parser before anything is asked of the engine."""
    from docker.errors import DockerException
    from docker.utils import parse_bytes

    text = str(value).strip()
    try:
        size = parse_bytes(text)
    except (DockerException, ValueError, OverflowError):
        size = None
    if not isinstance(size, int) or size <= 0 or size > 2**53:
        raise BadInput(f"--shm-size {value!r} is not a size", fix="give a positive size with a unit, e.g. 8g, 512m or 1073741824b")
    return size


def device_requests(gpus: str) -> list[Any]:
    """The SDK's device requests for `--gpus all|none|0,1` (the `docker run --gpus` values)."""
    from docker.types import DeviceRequest

    parsed = parse_gpus(gpus)
    if parsed == "none":
        return []
    if parsed == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=list(parsed), capabilities=[["gpu"]])]


def run_container(
    image: str,
    command: list[str],
    *,
    gpus: str = "all",
    workdir_mount: Path | None = None,
    env: dict[str, str] | None = None,
    stream: Progress | None = None,
    shm_size: str = DEFAULT_SHM_SIZE,
) -> int:
    """Run `command` in `image`, stream its output, remove the container, return its exit code.

    `workdir_mount` (default: the current folder) is mounted read-write at /workspace, the
    working directory. GPUs are requested the way `docker run --gpus` does. The image must be
    present: this never pulls.
    """
    from docker.errors import APIError, ImageNotFound
    from docker.types import Ulimit

    emit = stream or _print
    requests = device_requests(gpus)
    shm_bytes = parse_shm_size(shm_size)
    cli = client()
    mount = Path(workdir_mount if workdir_mount is not None else Path.cwd()).resolve()
    try:
        cli.images.get(image)
    except ImageNotFound:
        raise GpuenvError(f"image {image_name(image)} is not present on this engine", fix="build it with invoke build") from None
    # NVIDIA's recommendation for NCCL/RDMA: unlimited locked memory, 64 MiB stack. Only with
    # GPUs: unprivileged or nested engines refuse to raise RLIMIT_MEMLOCK, and CPU runs need none.
    ulimits = [Ulimit(name="memlock", soft=-1, hard=-1), Ulimit(name="stack", soft=67108864, hard=67108864)] if requests else []
    environment = dict(env or {})
    if not requests:
        # nvidia/cuda images set NVIDIA_VISIBLE_DEVICES=all; on an engine whose default runtime is
        # nvidia that alone would hand out every GPU. `--gpus none` means none.
        environment.setdefault("NVIDIA_VISIBLE_DEVICES", "void")
    # The container runs as the caller's uid:gid, root included (like `docker run -u $(id -u):$(id -g)`).
    # What it writes into the mounted folder (reports, checkpoints) must be writable there and
    # belong to the caller: the image's own user (1000) cannot write a folder that root or anyone
    # else owns with mode 0755/0700, and making it world-writable would be the wrong fix. Running
    # as root is no escalation for a root caller, who already commands the engine; the image stays
    # non-root for everyone who runs it without gpuenv. The caller's uid has no home in the image,
    # hence HOME=/tmp.
    user = caller_user()
    environment.setdefault("HOME", "/tmp")
    kwargs: dict[str, Any] = dict(
        image=image,
        command=command or None,
        user=user,
        environment=environment,
        device_requests=requests,
        shm_size=shm_bytes,
        ulimits=ulimits,
        volumes={str(mount): {"bind": WORKDIR_IN_CONTAINER, "mode": "rw"}},
        working_dir=WORKDIR_IN_CONTAINER,
        init=True,  # a real PID 1 reaps data-loader workers and forwards signals
        detach=True,
    )
    container = None
    try:
        container = cli.containers.create(**kwargs)
        container.start()
        for chunk in container.logs(stream=True, follow=True):
            emit(chunk.decode("utf-8", errors="replace"))
        return int(container.wait().get("StatusCode", 1))
    except KeyboardInterrupt:
        if container is not None:
            _quietly(container.kill)
        raise
    except APIError as err:
        raise ToolError(f"could not run {image_name(image)}: {_short(err)}", fix=_run_fix(str(err), gpus)) from None
    finally:
        if container is not None:
            _quietly(lambda: container.remove(force=True))


def caller_user() -> str:
    """`uid:gid` of this process, the user a container runs as (see run_container)."""
    return f"{os.getuid()}:{os.getgid()}"


def _run_fix(reason: str, gpus: str) -> str:
    if "could not select device driver" in reason or "nvidia" in reason.lower():
        return "this engine cannot give GPUs to containers: install the NVIDIA Container Toolkit and restart dockerd, or pass --gpus none"
    return f"check the command and the image (gpus={gpus})"


def _quietly(action: Callable[[], Any]) -> None:
    from docker.errors import DockerException

    try:
        action()
    except DockerException:
        pass


def containers_created_since(since: float) -> list[str]:
    """Ids of all containers (running or not) created at or after `since` (epoch seconds).

    A classic build's RUN steps run in containers; tests use this to check that failed and
    interrupted builds, and `run_container`, leave none behind.
    """
    return [c["Id"] for c in client().api.containers(all=True) if c.get("Created", 0) >= int(since)]


def remove_untagged_since(since: float) -> list[str]:
    """Remove untagged top-level images created at or after `since` (what a failed build left).

    The classic builder keeps the layers of the steps that succeeded before a failure as build
    cache; tests remove them to leave the engine as they found it. Returns the removed ids.
    """
    from docker.errors import APIError

    removed = []
    for image in client().images.list(filters={"dangling": True}):
        created = datetime.fromisoformat(image.attrs["Created"][:19]).replace(tzinfo=timezone.utc).timestamp()
        if created >= int(since):
            try:
                client().images.remove(image.id)
                removed.append(image.id)
            except APIError:
                pass  # still used by a container or another image: not ours to force
    return removed


def save_image(ref: str) -> Iterator[bytes]:
    """The image as `docker save` writes it (every layer, the config and the history), in chunks."""
    # An image of a few GB can take minutes before its first bytes on a slow storage driver.
    return client(timeout=900).images.get(ref).save(named=False)


def daemon_info() -> dict[str, Any]:
    """The engine's `docker info` record (version, runtimes, CDI spec folders, ...)."""
    return client().info()


def engine_runtimes() -> list[str]:
    """The container runtimes the engine knows (e.g. runc, nvidia)."""
    return sorted((daemon_info().get("Runtimes") or {}).keys())


# ---------------------------------------------------------------- base images


def architecture() -> str:
    """The engine's CPU architecture as `docker info` reports it (x86_64, aarch64): the image's."""
    return str(daemon_info().get("Architecture") or "unknown")


def ensure_image(ref: str, progress: Progress | None = None) -> None:
    """Make sure the base image `ref` is on the engine, pulling it once when it is not (the build
    needs it anyway); a pull that fails names the base image and --base-image."""
    if image_info(ref) is not None:
        return
    (progress or _print)(f"pulling the base image {ref}\n")
    try:
        pull_image(ref)
    except ToolError as err:
        raise ToolError(
            f"the base image {ref} is not on this engine and cannot be pulled ({err.message})",
            fix="pull it where a registry is reachable (docker save/load), or pass --base-image with a local image",
        ) from None


#: Prints the path of a python of the wanted X.Y that can make a venv, or exits 3. POSIX sh only:
#: the base may have nothing else.
_PYTHON_PROBE = (
    'for p in "python$0" python3; do '
    'if command -v "$p" >/dev/null 2>&1 '
    '&& [ "$("$p" -c "import sys; print(\'%d.%d\' % sys.version_info[:2])" 2>/dev/null)" = "$0" ] '
    '&& "$p" -c "import venv, ensurepip" >/dev/null 2>&1; then command -v "$p"; exit 0; fi; done; exit 3'
)


def image_python(image: str, version: str) -> str | None:
    """The path of a usable Python `version` (X.Y) inside `image`, or None when it has none.

    Runs a throwaway container with the image's entrypoint replaced (nvidia/cuda's prints a
    banner), no network, and removes it.
    """
    from docker.errors import APIError, ContainerError

    try:
        out = client().containers.run(
            image, ["-c", _PYTHON_PROBE, version], entrypoint=["/bin/sh"], user="0:0",
            network_disabled=True, remove=True, stdout=True, stderr=False,
        )
    except ContainerError:
        return None
    except APIError as err:
        raise ToolError(f"cannot look for Python {version} in {image}: {_short(err)}", fix="check that the image has /bin/sh") from None
    text = out.decode("utf-8", "replace").strip() if isinstance(out, bytes) else str(out).strip()
    return text or None


# ---------------------------------------------------------------- registries: push and pull by digest
#
# Credentials are the Docker credential store's, read by the SDK itself (~/.docker/config.json,
# its credHelpers/credsStore, or DOCKER_CONFIG): gpuenv passes no auth_config and writes nothing.


@dataclass(frozen=True)
class LayerProgress:
    """One record of a push or pull stream: a layer (or '' for the whole image) and its bytes."""

    layer: str
    status: str
    current: int | None = None
    total: int | None = None


LayerCallback = Callable[[LayerProgress], None]
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def registry_problem(reason: str, registry: str) -> tuple[str, str]:
    """(what happened, the fix) for an engine error while talking to `registry`. Pure."""
    text = reason.lower()
    if "connection refused" in text or "connect: no route" in text or "i/o timeout" in text or "connection reset" in text:
        return (f"the registry {registry} does not answer", f"start it or check --registry {registry} (HOST[:PORT]); nothing local was removed")
    if "no such host" in text or "server misbehaving" in text or "lookup " in text:
        return (f"the registry host {registry.split(':')[0]} is unknown", "check the spelling of --registry (HOST[:PORT]); nothing local was removed")
    if "server gave http response to https client" in text:
        return (f"the registry {registry} speaks plain HTTP", f"serve it with TLS, or add \"{registry}\" to insecure-registries in /etc/docker/daemon.json and restart dockerd")
    if any(word in text for word in ("unauthorized", "authentication required", "denied", "forbidden", "no basic auth credentials")):
        return (f"the registry {registry} refused the credentials", f"run docker login {registry} (gpuenv uses the Docker credential store)")
    if "manifest unknown" in text or "not found" in text:
        return (f"the registry {registry} has no such image", "check the reference (copy the HOST/gpuenv/<stack>@sha256:... that invoke push printed)")
    return (f"the registry {registry} refused the request", "see the engine's reason above; nothing local was removed")


def _registry_of(ref: str) -> str:
    first = ref.split("/", 1)[0]
    return first if "/" in ref and ("." in first or ":" in first or first == "localhost") else "docker.io"


def _stream(records: Any, progress: LayerCallback | None, ref: str, action: str) -> str | None:
    """Follow a push/pull stream; the digest it announces; an error record raises ToolError."""
    digest = None
    for record in records:
        if "error" in record or "errorDetail" in record:
            reason = ((record.get("errorDetail") or {}).get("message") or record.get("error") or "").strip()
            what, fix = registry_problem(reason, _registry_of(ref))
            raise ToolError(f"{action} {ref} failed: {what} ({reason[:200]})", fix=fix)
        aux = record.get("aux")
        if isinstance(aux, dict) and aux.get("Digest"):
            digest = aux["Digest"]
        status = str(record.get("status") or "")
        if digest is None and (match := _DIGEST.search(status)) and "digest" in status.lower():
            digest = match.group(0)
        if progress is not None and status:
            detail = record.get("progressDetail") or {}
            progress(LayerProgress(str(record.get("id") or ""), status, detail.get("current"), detail.get("total")))
    return digest


def push_image(source: str, repository: str, tags: list[str], *, progress: LayerCallback | None = None) -> str:
    """Tag local image `source` as repository:TAG for each tag, push them, return the manifest digest.

    If the push fails, the tags this call added are taken off again and nothing else is touched:
    the image and its gpuenv/<stack> tags stay.
    """
    from docker.errors import APIError, DockerException, ImageNotFound

    cli = client()
    try:
        image = cli.images.get(source)
    except ImageNotFound:
        raise GpuenvError(f"image {source} is not present on this engine", fix="build it with invoke build") from None
    added: list[str] = []
    try:
        for tag in tags:
            ref = f"{repository}:{tag}"
            if ref not in image.tags:
                image.tag(repository, tag)
                added.append(ref)
        digest = None
        for tag in tags:
            found = _stream(cli.api.push(repository, tag=tag, stream=True, decode=True), progress, f"{repository}:{tag}", "push")
            digest = digest or found
    except BaseException as err:
        for ref in added:
            _quietly(lambda ref=ref: cli.api.remove_image(ref, noprune=True))
        if isinstance(err, APIError):
            what, fix = registry_problem(_short(err), _registry_of(repository))
            raise ToolError(f"push {repository} failed: {what} ({_short(err)[:200]})", fix=fix) from None
        if isinstance(err, DockerException):
            raise ToolError(f"push {repository} failed: {_short(err)}", fix="check the Docker engine and the registry") from None
        raise
    if not digest:
        raise ToolError(f"push {repository} ended without a digest", fix="check the registry's log; the engine said nothing went wrong")
    return digest


def pull_image(ref: str, *, progress: LayerCallback | None = None) -> ImageInfo:
    """Pull `ref` (name@sha256:... or name:tag) into the engine; the image, as image_info gives it."""
    from docker.errors import APIError

    cli = client()
    try:
        _stream(cli.api.pull(ref, stream=True, decode=True), progress, ref, "pull")
    except APIError as err:
        what, fix = registry_problem(_short(err), _registry_of(ref))
        raise ToolError(f"pull {ref} failed: {what} ({_short(err)[:200]})", fix=fix) from None
    info = image_info(ref)
    if info is None:
        raise ToolError(f"pull {ref} ended but the engine has no such image", fix="check the reference and the registry")
    return info


def repo_digests(ref: str) -> list[str]:
    """The `name@sha256:...` references the engine knows for a local image (empty if none)."""
    from docker.errors import ImageNotFound

    try:
        return list(client().images.get(ref).attrs.get("RepoDigests") or [])
    except ImageNotFound:
        return []


def untag(ref: str) -> None:
    """Remove one tag (tests use it to make an image 'missing' locally); the image stays if other tags hold it."""
    from docker.errors import ImageNotFound

    try:
        client().api.remove_image(ref, noprune=True)
    except ImageNotFound:
        pass
