"""Docker engines, through the Docker SDK for Python: the only gpuenv module that imports `docker`
(and paramiko, the SDK's SSH transport). tests/test_engine_owner.py keeps that true.

An `Engine` wraps one `docker.DockerClient` and serves every call made of that engine, as the
SDK's own `DockerClient` wraps one `APIClient`: `Engine.local()` for this machine's engine
(DOCKER_HOST and friends honoured) and `Engine.connect("ssh://user@host")` for a remote one.
Every wait is bounded: the SSH connect, the API handshake (a version is given, never negotiated
without a limit) and every read. The SDK's exceptions and streams become gpuenv errors with the
fix in the message. Builds use the classic builder (the SDK cannot drive BuildKit) and tag only
after a build succeeded; every container started here is removed.

The module-level functions below are thin wrappers over the local engine, kept because most
callers only ever talk to this machine.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, Iterator
from urllib.parse import urlsplit

from gpuenv.errors import BadInput, GpuenvError, ToolError

Progress = Callable[[str], None]

#: Shared memory for PyTorch data loader workers and NCCL: Docker's default /dev/shm is 64 MiB,
#: which makes multi-worker DataLoaders and NCCL fail with "bus error" / "unable to allocate".
DEFAULT_SHM_SIZE = "8g"
#: Where `run_container` mounts the folder it is given.
WORKDIR_IN_CONTAINER = "/workspace"
ENGINE_FIX = "start the Docker engine (sudo systemctl start docker, or sudo scripts/install-docker.sh) or set DOCKER_HOST"
#: Seconds for the SDK's reads of the local engine (a call that streams nothing for this long fails).
READ_TIMEOUT = 60
#: Seconds to reach a remote engine: the TCP connect, SSH banner, key exchange and login, and then
#: `docker version` over that connection, each within this limit.
CONNECT_TIMEOUT = 20
#: Longest a pull may take in all when the caller gives no deadline of its own.
PULL_LIMIT = 2 * 3600
_STEP = re.compile(r"^Step \d+/\d+ : ")
_BUILT = re.compile(r"Successfully built ([0-9a-f]{12,64})")
_TLS_FAILURE = re.compile(r"CERTIFICATE_VERIFY_FAILED|invalid peer certificate|UnknownIssuer|certificate verify failed", re.I)

# Why a remote engine cannot be used (EngineUnavailable.cause); the fleet maps each to a status.
UNREACHABLE = "unreachable"
AUTH_REFUSED = "auth refused"
NO_DOCKER = "no docker"
ENGINE_NOT_ANSWERING = "engine not answering"


class EngineUnavailable(ToolError):
    """A remote engine cannot be used; `cause` says which step failed (UNREACHABLE, AUTH_REFUSED,
    NO_DOCKER, ENGINE_NOT_ANSWERING) so a fleet can report each in its own words."""

    def __init__(self, cause: str, message: str, *, fix: str | None = None) -> None:
        self.cause = cause
        super().__init__(message, fix=fix)


class GpuRuntimeError(ToolError):
    """The engine could not give GPUs to a container; `cause` names why (see gpu_runtime_problem)."""

    def __init__(self, cause: str, message: str, *, fix: str | None = None) -> None:
        self.cause = cause
        super().__init__(message, fix=fix)


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


def _print(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _quietly(action: Callable[[], Any]) -> None:
    from docker.errors import DockerException

    try:
        action()
    except (DockerException, *_transport_errors()):
        pass


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a read or connect below the SDK raises when the wire fails or times out."""
    import requests
    import urllib3

    return (requests.RequestException, urllib3.exceptions.HTTPError, OSError, EOFError)


def _quiet_paramiko() -> None:
    """paramiko logs a traceback per failed connection from its transport thread, which Python's
    last-resort handler prints to stderr; its errors reach us as exceptions with their reason.
    A handler of its own that drops them (the SDK resets the logger's level on every connect, so
    a level alone does not hold)."""
    log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
    log.propagate = False


# ---------------------------------------------------------------- reaching an engine


@dataclass(frozen=True)
class SshTarget:
    """Where `ssh://user@host:port` really goes, after ~/.ssh/config (as the SDK reads it)."""

    alias: str
    hostname: str
    port: int
    username: str | None
    key_filename: Any = None
    proxy_command: str | None = None


def ssh_target(url: str) -> SshTarget:
    """Read ~/.ssh/config the way the SDK's paramiko transport does (HostName, Port, User,
    IdentityFile, ProxyCommand), so the bounded probe goes where the SDK will go."""
    import paramiko

    parts = urlsplit(url)
    alias = parts.hostname or ""
    params: dict[str, Any] = {"hostname": alias, "port": parts.port, "username": parts.username}
    config_file = os.path.expanduser("~/.ssh/config")
    proxy = None
    if os.path.exists(config_file):
        conf = paramiko.SSHConfig()
        with open(config_file) as handle:
            conf.parse(handle)
        host = conf.lookup(alias)
        proxy = host.get("proxycommand")
        params["hostname"] = host.get("hostname", alias)
        if parts.port is None and "port" in host:
            params["port"] = int(host["port"])
        if parts.username is None and "user" in host:
            params["username"] = host["user"]
        params["key_filename"] = host.get("identityfile")
    return SshTarget(alias, params["hostname"], int(params["port"] or 22), params["username"], params.get("key_filename"), proxy)


def ssh_problem(target: SshTarget, err: BaseException, limit: float) -> EngineUnavailable:
    """The cause and the fix of a failed SSH connect (pure: the exception decides)."""
    name = type(err).__name__
    text = _short(err)
    where = f"{target.hostname}:{target.port}"
    keyscan = f"ssh-keyscan -p {target.port} {target.hostname}" if target.port != 22 else f"ssh-keyscan {target.hostname}"
    if name == "BadHostKeyException":
        return EngineUnavailable(AUTH_REFUSED, f"SSH host key of {target.hostname} changed ({text})",
                                 fix="check the server, then fix its line in ~/.ssh/known_hosts")
    if "known_hosts" in text:
        return EngineUnavailable(AUTH_REFUSED, f"SSH host key of {target.hostname} is unknown ({text})",
                                 fix=f"check it, then add it with {keyscan} >> ~/.ssh/known_hosts")
    if name in ("AuthenticationException", "BadAuthenticationType", "PasswordRequiredException") or "authentication methods" in text:
        return EngineUnavailable(AUTH_REFUSED, f"SSH login to {where} as {target.username or 'this user'} refused ({text})",
                                 fix="give this user's key (ssh-copy-id, or IdentityFile in ~/.ssh/config)")
    if isinstance(err, socket.gaierror):
        return EngineUnavailable(UNREACHABLE, f"cannot reach {target.hostname} over SSH: the name does not resolve ({text})",
                                 fix="check the host name (or its HostName in ~/.ssh/config)")
    if isinstance(err, (TimeoutError, socket.timeout)) or "timed out" in text.lower():
        return EngineUnavailable(UNREACHABLE, f"cannot reach {where} over SSH: no answer within {limit:.0f}s",
                                 fix="the host is down or a firewall drops the packets; check it, or drop it from --hosts")
    if "banner" in text.lower():
        return EngineUnavailable(UNREACHABLE, f"cannot reach {where} over SSH: no SSH greeting within {limit:.0f}s ({text})",
                                 fix="check that sshd runs on that port and is not overloaded")
    if "refused" in text.lower() or "Unable to connect" in text:
        return EngineUnavailable(UNREACHABLE, f"cannot reach {where} over SSH: connection refused",
                                 fix="check that sshd runs there and the port is right")
    return EngineUnavailable(UNREACHABLE, f"cannot reach {target.hostname} over SSH ({name}: {text})",
                             fix="try ssh to it by hand to see why")


#: Run over SSH before the SDK is given the host: `docker` must be on the login's PATH (the SDK
#: runs `docker system dial-stdio` there) and its engine must answer; prints the engine's API version.
_REMOTE_PROBE = "command -v docker >/dev/null 2>&1 || exit 127; exec docker version --format '{{.Server.APIVersion}}'"


def remote_engine_problem(target: SshTarget, status: int | None, out: str, err: str, limit: float) -> EngineUnavailable | None:
    """Why the remote `docker version` did not give an API version (pure), or None when it did."""
    who = f"{target.username}@{target.hostname}" if target.username else target.hostname
    last = (err.strip().splitlines() or [""])[-1][:300]
    if status is None:
        return EngineUnavailable(ENGINE_NOT_ANSWERING, f"SSH to {who} works but its Docker engine did not answer within {limit:.0f}s",
                                 fix="the engine hangs: look at dockerd there (systemctl status docker, journalctl -u docker) and restart it")
    if status == 127:
        return EngineUnavailable(NO_DOCKER, f"SSH to {who} works but there is no `docker` command on its PATH",
                                 fix="install Docker there (the SDK runs `docker system dial-stdio` over SSH), or put docker on that user's PATH")
    if status == 0 and re.fullmatch(r"\d+\.\d+", out.strip()):
        return None
    if "permission denied" in err.lower():
        return EngineUnavailable(ENGINE_NOT_ANSWERING, f"SSH to {who} works but that user may not use its Docker engine ({last})",
                                 fix="add the user to the docker group there (sudo usermod -aG docker USER), then log in again")
    return EngineUnavailable(ENGINE_NOT_ANSWERING, f"SSH to {who} works but its Docker engine does not answer ({last or f'docker version exited {status}'})",
                             fix="start dockerd there (sudo systemctl start docker)")


def bounded_call(action: Callable[[], Any], seconds: float, on_late: Callable[[Any], None]) -> tuple[bool, Any]:
    """Run `action` in a daemon thread for at most `seconds`: (True, result) or (False, None).

    For the few SDK calls that take no timeout of their own; when one returns after we gave up,
    `on_late` gets its result (to close it) and the thread ends."""
    box: dict[str, Any] = {}
    gave_up = threading.Event()
    lock = threading.Lock()

    def run() -> None:
        try:
            value = action()
        except BaseException as err:  # handed to the caller
            box["error"] = err
            return
        with lock:
            if gave_up.is_set():
                on_late(value)
            else:
                box["value"] = value

    thread = threading.Thread(target=run, daemon=True, name="gpuenv-engine-connect")
    thread.start()
    thread.join(seconds)
    with lock:
        if thread.is_alive():
            gave_up.set()
            return False, None
    if "error" in box:
        raise box["error"]
    return True, box.get("value")


class Engine:
    """One Docker engine and the one SDK client that serves every call made of it."""

    def __init__(self, client: Any, where: str, *, remote: bool = False) -> None:
        self.client = client  # docker.DockerClient
        self.where = where
        self.remote = remote
        self._closed = False

    # ------------------------------------------------------------ construction

    @classmethod
    def local(cls, timeout: float = READ_TIMEOUT) -> "Engine":
        """This machine's engine (DOCKER_HOST honoured), after it answered a ping.

        `timeout` is the SDK's read timeout: calls that stream large data (saving an image) need more.
        """
        import docker

        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        try:
            cli = docker.from_env(timeout=timeout)
            cli.ping()
        except Exception as err:  # DockerException, or requests' connection errors that ping lets through
            raise ToolError(f"the Docker engine at {where} does not answer ({_short(err)})", fix=ENGINE_FIX) from None
        return cls(cli, where)

    @classmethod
    def connect(cls, url: str, *, connect_timeout: float = CONNECT_TIMEOUT, read_timeout: float = READ_TIMEOUT) -> "Engine":
        """The engine behind `ssh://user@host[:port]`, or EngineUnavailable with the step that failed.

        The SDK's paramiko connect takes no timeout and its constructor negotiates the API version
        with no limit of its own, so first a bounded SSH login of our own runs `docker version`
        there (unreachable, login refused, no docker, engine not answering each say so within
        `connect_timeout`), then the SDK is given that API version and its connect is bounded too.
        """
        import docker
        import paramiko

        _quiet_paramiko()
        target = ssh_target(url)
        version = _probe_remote(target, connect_timeout)

        def make() -> Any:
            return docker.DockerClient(base_url=url, version=version, timeout=read_timeout, use_ssh_client=False)

        try:
            done, client = bounded_call(make, connect_timeout, on_late=lambda late: _quietly(late.close))
        except (paramiko.SSHException, *_transport_errors()) as err:
            raise ssh_problem(target, err, connect_timeout) from None
        except docker.errors.DockerException as err:
            raise EngineUnavailable(ENGINE_NOT_ANSWERING, f"the Docker engine behind {url} refused the SDK ({_short(err)})",
                                    fix="check dockerd there") from None
        if not done:
            raise EngineUnavailable(UNREACHABLE, f"cannot reach {target.hostname}:{target.port} over SSH: the SDK's connection "
                                    f"did not open within {connect_timeout:.0f}s", fix="check the host and its sshd")
        engine = cls(client, url, remote=True)
        try:
            client.ping()
        except Exception as err:
            engine.close()
            raise EngineUnavailable(ENGINE_NOT_ANSWERING, f"SSH to {target.hostname} works but its Docker engine does not answer "
                                    f"the SDK ({_short(err)})", fix="look at dockerd there and restart it") from None
        return engine

    def close(self) -> None:
        """Drop the connection (and, for ssh://, the SSH session): every read in flight on it ends."""
        self._closed = True
        _quietly(self.client.close)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ daemon

    def info(self) -> dict[str, Any]:
        """The engine's `docker info` record (version, runtimes, CDI spec folders, ...)."""
        return self.client.info()

    def runtimes(self) -> list[str]:
        """The container runtimes the engine knows (e.g. runc, nvidia)."""
        return sorted((self.info().get("Runtimes") or {}).keys())

    def architecture(self) -> str:
        """The engine's CPU architecture as `docker info` reports it (x86_64, aarch64): the image's."""
        return str(self.info().get("Architecture") or "unknown")

    # ------------------------------------------------------------ images

    def image_info(self, ref: str) -> ImageInfo | None:
        """The image `ref` (name:tag or id) on this engine, or None when it has no such image."""
        from docker.errors import ImageNotFound

        try:
            return _info(self.client.images.get(ref))
        except ImageNotFound:
            return None

    def find_images(self, labels: dict[str, str | None]) -> list[ImageInfo]:
        """Images carrying all `labels` (a None value matches any value of that label)."""
        filters = [k if v is None else f"{k}={v}" for k, v in labels.items()]
        return [_info(img) for img in self.client.images.list(filters={"label": filters})]

    def remove_image(self, ref: str) -> None:
        """Remove an image and its tags (used by tests and benchmarks to clean up)."""
        from docker.errors import ImageNotFound

        try:
            self.client.images.remove(ref, force=True)
        except ImageNotFound:
            pass

    def untag(self, ref: str) -> None:
        """Remove one tag; the image stays if other tags hold it."""
        from docker.errors import ImageNotFound

        try:
            self.client.api.remove_image(ref, noprune=True)
        except ImageNotFound:
            pass

    def image_history(self, ref: str) -> list[dict[str, Any]]:
        """The layer history of an image (CreatedBy, Size, ...) as the engine reports it."""
        return self.client.api.history(ref)

    def image_name(self, ref: str) -> str:
        """How a message names an image: by a tag when it has one, else by its short id (never sha256:...)."""
        if not re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", ref):
            return ref  # already a name
        try:
            info = self.image_info(ref)
        except (GpuenvError, *_transport_errors()):
            info = None
        if info is not None and info.tags:
            return sorted(info.tags, key=lambda t: (t.endswith(":latest"), t))[0]
        return ref.removeprefix("sha256:")[:12]

    def tag_all_or_none(self, image_id: str, tags: list[str]) -> None:
        """Give `image_id` every tag in `tags`, or, when the engine refuses one, put back the ones moved.

        Tags move together: a refused tag (a name the engine will not take) must not leave the
        stack's `latest` on the new image while the team's tag stays on the old one.
        """
        from docker.errors import APIError, ImageNotFound

        cli = self.client
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
                    _quietly(lambda r=done_ref, p=previous: self._restore_tag(r, p))
                raise ToolError(
                    f"the engine refused the tag {ref} after the build: {_short(err)}",
                    fix="no tag was moved; choose a valid --tag and build again (the layers are cached)",
                ) from None
            moved.append((f"{repo}:{tag}", before))

    def _restore_tag(self, ref: str, previous: str | None) -> None:
        if previous is None:
            self.client.api.remove_image(ref, noprune=True)  # only removes the name: the image keeps its other tags
        else:
            repo, tag = _split(ref)
            self.client.api.tag(previous, repo, tag, force=True)

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

        emit = progress or _print
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
                        fix=_build_fix(reason, log),
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
            try:  # a fresh client: this one was closed to cancel the build
                Engine.local()._leave_no_dangling(trace, None, cache_tag)
            except Exception:  # noqa: BLE001 (best effort: the interrupt is what the user sees)
                pass
            raise
        except APIError as err:
            self._leave_no_dangling(trace, None, cache_tag)
            raise ToolError(f"docker build was refused: {_short(err)}", fix=_build_fix(str(err), log)) from None
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
        return BuildResult(image=_info(self.client.images.get(image_id)), log=log)

    def _leave_no_dangling(self, trace: _BuildTrace, final: str | None, cache_tag: str | None) -> None:
        """Keep the last earlier stage's image under `cache_tag`; remove every other untagged
        top-level image this build made (what `docker images` would show as <none>)."""
        from docker.errors import APIError, ImageNotFound

        earlier = [i for i in trace.stages if i != final]
        if cache_tag and earlier:
            repo, tag = _split(cache_tag)
            try:
                previous: str | None = self.client.images.get(cache_tag).id
            except (ImageNotFound, APIError):
                previous = None
            _quietly(lambda: self.client.api.tag(earlier[-1], repo, tag, force=True))
            if previous and previous != earlier[-1]:
                # the tag moved off an install stage gpuenv kept: untagged now, it is nobody's cache
                _quietly(lambda: self._remove_if_dangling(previous))
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
                _quietly(lambda image=image: self.client.images.remove(image.id))

    def _remove_if_dangling(self, image_id: str) -> None:
        image = self.client.images.get(image_id)
        if not image.tags:
            self.client.images.remove(image.id)

    def ensure_image(self, ref: str, progress: Progress | None = None) -> None:
        """Make sure the base image `ref` is on the engine, pulling it once when it is not (the build
        needs it anyway); a pull that fails names the base image and --base-image."""
        if self.image_info(ref) is not None:
            return
        (progress or _print)(f"pulling the base image {ref}\n")
        try:
            self.pull_image(ref)
        except ToolError as err:
            raise ToolError(
                f"the base image {ref} is not on this engine and cannot be pulled ({err.message})",
                fix="pull it where a registry is reachable (docker save/load), or pass --base-image with a local image",
            ) from None

    def image_python(self, image: str, version: str) -> str | None:
        """The path of a usable Python `version` (X.Y) inside `image`, or None when it has none.

        Runs a throwaway container with the image's entrypoint replaced (nvidia/cuda's prints a
        banner), no network, and removes it.
        """
        from docker.errors import APIError, ContainerError

        try:
            out = self.client.containers.run(
                image, ["-c", _PYTHON_PROBE, version], entrypoint=["/bin/sh"], user="0:0",
                network_disabled=True, remove=True, stdout=True, stderr=False,
            )
        except ContainerError:
            return None
        except APIError as err:
            raise ToolError(f"cannot look for Python {version} in {image}: {_short(err)}", fix="check that the image has /bin/sh") from None
        text = out.decode("utf-8", "replace").strip() if isinstance(out, bytes) else str(out).strip()
        return text or None

    def save_image(self, ref: str) -> Iterator[bytes]:
        """The image as `docker save` writes it (every layer, the config and the history), in chunks."""
        return self.client.images.get(ref).save(named=False)

    # ------------------------------------------------------------ registries

    def push_image(self, source: str, repository: str, tags: list[str], *, progress: LayerCallback | None = None) -> str:
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
            raise GpuenvError(f"image {source} is not present on this engine", fix="build it with invoke build") from None
        moved: list[tuple[str, str | None]] = []  # (ref, the image it named before; None: it did not exist)
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
                found = _stream(cli.api.push(repository, tag=tag, stream=True, decode=True), progress, f"{repository}:{tag}", "push")
                digest = digest or found
        except BaseException as err:
            for ref, before in reversed(moved):
                _quietly(lambda ref=ref, before=before: self._restore_tag(ref, before))
            if isinstance(err, APIError):
                what, fix = registry_problem(_short(err), _registry_of(repository))
                raise ToolError(f"push {repository} failed: {what} ({_short(err)[:200]})", fix=fix) from None
            if isinstance(err, DockerException):
                raise ToolError(f"push {repository} failed: {_short(err)}", fix="check the Docker engine and the registry") from None
            raise
        if not digest:
            raise ToolError(f"push {repository} ended without a digest", fix="check the registry's log; the engine said nothing went wrong")
        return digest

    def pull_image(self, ref: str, *, progress: LayerCallback | None = None, deadline: float | None = None,
                   stall_timeout: float | None = None) -> ImageInfo:
        """Pull `ref` (name@sha256:... or name:tag) into the engine; the image, as image_info gives it.

        Bounded twice. The SDK's own pull reads with no timeout at all (it passes timeout=None), so
        a registry that stalls mid-download would hang it forever; this sends the same request
        (the same auth header from the credential store) with a read timeout of `stall_timeout`
        (default: the client's), and closes it at `deadline` (a time.monotonic() value; default
        PULL_LIMIT from now). Closing the request makes the engine cancel the pull.
        """
        from docker import auth
        from docker.utils import parse_repository_tag
        from docker.utils.json_stream import json_stream

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
            response = api.post(f"{api.base_url}/v{api.api_version}/images/create", params={"fromImage": repository, "tag": tag or "latest"},
                                headers=headers, stream=True, timeout=(stall, stall))
            if response.status_code >= 400:
                reason = _response_message(response)
                what, fix = registry_problem(reason, _registry_of(ref))
                raise ToolError(f"pull {ref} failed: {what} ({reason[:200]})", fix=fix)

            def expire(resp: Any = response) -> None:
                late.set()
                _abort(resp)  # the read blocked in the other thread ends now

            timer = threading.Timer(max(0.0, end - time.monotonic()), expire)
            timer.daemon = True
            timer.start()
            _stream(json_stream(response.iter_content(chunk_size=None, decode_unicode=False)), progress, ref, "pull", deadline=end)
            if late.is_set():
                raise _PastDeadline()
        except _PastDeadline:
            raise ToolError(f"pull {ref} did not finish in time", fix="the registry is slow or stalled; try again, or pull it there by hand") from None
        except ToolError:
            raise
        except (*_transport_errors(), ValueError) as err:
            if late.is_set():
                raise ToolError(f"pull {ref} did not finish in time", fix="the registry is slow or stalled; try again, or pull it there by hand") from None
            stalled = "timed out" in str(err).lower() or isinstance(err, (TimeoutError, socket.timeout))
            what = f"the download stalled (nothing for {stall:.0f}s)" if stalled else f"the connection to the engine broke ({_short(err)})"
            raise ToolError(f"pull {ref} failed: {what}", fix="check the registry (it stopped sending) and try again") from None
        finally:
            if timer is not None:
                timer.cancel()
            if response is not None:
                _quietly(response.close)  # an unfinished pull is cancelled by the engine
        info = self.image_info(ref)
        if info is None:
            raise ToolError(f"pull {ref} ended but the engine has no such image", fix="check the reference and the registry")
        return info

    # ------------------------------------------------------------ containers

    def run_container(
        self,
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

        emit = stream or _print
        options = container_options(gpus, shm_size, env)
        mount = Path(workdir_mount if workdir_mount is not None else Path.cwd()).resolve()
        try:
            self.client.images.get(image)
        except ImageNotFound:
            raise GpuenvError(f"image {self.image_name(image)} is not present on this engine", fix="build it with invoke build") from None
        # The container runs as the caller's uid:gid, root included (like `docker run -u $(id -u):$(id -g)`).
        # What it writes into the mounted folder (reports, checkpoints) must be writable there and
        # belong to the caller: the image's own user (1000) cannot write a folder that root or anyone
        # else owns with mode 0755/0700, and making it world-writable would be the wrong fix. Running
        # as root is no escalation for a root caller, who already commands the engine; the image stays
        # non-root for everyone who runs it without gpuenv. The caller's uid has no home in the image,
        # hence HOME=/tmp.
        options["environment"].setdefault("HOME", "/tmp")
        container = None
        try:
            container = self.client.containers.create(
                image=image, command=command or None, user=caller_user(),
                volumes={str(mount): {"bind": WORKDIR_IN_CONTAINER, "mode": "rw"}}, working_dir=WORKDIR_IN_CONTAINER,
                **options,
            )
            container.start()
            for chunk in container.logs(stream=True, follow=True):
                emit(chunk.decode("utf-8", errors="replace"))
            return int(container.wait().get("StatusCode", 1))
        except KeyboardInterrupt:
            if container is not None:
                _quietly(container.kill)
            raise
        except APIError as err:
            raise _run_error(err, self.image_name(image), gpus) from None
        finally:
            if container is not None:
                _quietly(lambda: container.remove(force=True))

    def start_container(
        self,
        image: str,
        command: list[str],
        *,
        gpus: str = "all",
        labels: dict[str, str] | None = None,
        files: bytes | None = None,
        shm_size: str = DEFAULT_SHM_SIZE,
        on_created: Callable[["Container"], None] | None = None,
    ) -> "Container":
        """Create and start a detached container with the run options of `run_container` (GPUs,
        /dev/shm, memlock, init) as the image's own user; `files` is a tar put at / before it starts.

        `on_created` sees the container before it starts (a caller tracking what to remove on
        Ctrl-C); whatever fails after it exists removes it again.
        """
        from docker.errors import APIError

        options = container_options(gpus, shm_size, None)
        try:
            raw = self.client.containers.create(image=image, command=command, labels=labels or {}, **options)
        except APIError as err:
            raise _run_error(err, image, gpus) from None
        container = Container(self, raw)
        try:
            if on_created is not None:
                on_created(container)
            if files is not None:
                raw.put_archive("/", files)
            raw.start()
        except APIError as err:
            container.remove()
            raise _run_error(err, image, gpus) from None
        except BaseException:
            container.remove()
            raise
        return container

    def remove_containers(self, labels: dict[str, str]) -> list[str]:
        """Remove (force) every container carrying `labels`; their ids."""
        filters = [f"{k}={v}" for k, v in labels.items()]
        removed = []
        for raw in self.client.containers.list(all=True, filters={"label": filters}):
            _quietly(lambda raw=raw: raw.remove(force=True))
            removed.append(raw.id)
        return removed


class Container:
    """A container an Engine started; every call is bounded and answers in gpuenv terms."""

    def __init__(self, engine: Engine, raw: Any) -> None:
        self.engine = engine
        self.raw = raw
        self.id = raw.id
        self._removed = False

    def wait(self, timeout: float | None) -> int | None:
        """The exit code, or None when it is still running after `timeout` seconds."""
        try:
            result = self.raw.wait(timeout=timeout) if timeout is not None else self.raw.wait()
        except _transport_errors() as err:
            if timeout is not None and ("timed out" in str(err).lower() or isinstance(err, (TimeoutError, socket.timeout))):
                return None
            raise
        return int(result.get("StatusCode", 1))

    def read_file(self, path: str, limit: int = 64 * 2**20) -> bytes | None:
        """The regular file at `path` in the container (None when absent, or not a regular file:
        a symlink there is the container's word, not a file), at most `limit` bytes."""
        import io
        import tarfile

        from docker.errors import NotFound

        try:
            stream, stat = self.raw.get_archive(path)
        except NotFound:
            return None
        if int(stat.get("size", 0)) > limit:
            return None
        data = bytearray()
        for chunk in stream:
            data += chunk
            if len(data) > limit + 1024 * 1024:
                return None
        with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
            member = tar.next()
            if member is None or not member.isreg():
                return None
            handle = tar.extractfile(member)
            return handle.read(limit) if handle else None

    def log_tail(self, lines: int = 5) -> list[str]:
        try:
            return self.raw.logs(tail=lines).decode("utf-8", errors="replace").strip().splitlines()
        except Exception:  # a tail for a message only: never worth failing over
            return []

    def remove(self) -> bool:
        """Remove it (kill first if running): True when it is gone. Never raises."""
        from docker.errors import NotFound

        if self._removed:
            return True
        try:
            self.raw.remove(force=True)
        except NotFound:
            pass
        except Exception:  # the engine is closed or gone: the caller names what is left
            return False
        self._removed = True
        return True


def _split(ref: str) -> tuple[str, str]:
    return (ref.rpartition(":")[0], ref.rpartition(":")[2]) if ":" in ref.split("/")[-1] else (ref, "latest")


def _probe_remote(target: SshTarget, limit: float) -> str:
    """Log in over SSH with every step bounded, run `docker version` there; its API version."""
    import paramiko

    client = paramiko.SSHClient()
    client.load_system_host_keys()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        try:
            client.connect(
                target.hostname, port=target.port, username=target.username, key_filename=target.key_filename,
                sock=paramiko.ProxyCommand(target.proxy_command) if target.proxy_command else None,
                timeout=limit, banner_timeout=limit, auth_timeout=limit, channel_timeout=limit,
            )
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise ssh_problem(target, err, limit) from None
        try:
            _, stdout, stderr = client.exec_command(_REMOTE_PROBE, timeout=limit)
            channel = stdout.channel
            status = channel.recv_exit_status() if channel.status_event.wait(limit) else None
            out = stdout.read().decode("utf-8", "replace") if status is not None else ""
            err_text = stderr.read().decode("utf-8", "replace") if status is not None else ""
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise EngineUnavailable(ENGINE_NOT_ANSWERING, f"SSH to {target.hostname} works but running docker there failed ({_short(err)})",
                                    fix="check that the user may run commands (no ForceCommand or restricted shell)") from None
        problem = remote_engine_problem(target, status, out, err_text, limit)
        if problem is not None:
            raise problem
        return out.strip()
    finally:
        client.close()


def container_options(gpus: str, shm_size: str | int, env: dict[str, str] | None) -> dict[str, Any]:
    """The SDK's create() options every gpuenv container gets: GPUs as `docker run --gpus` asks,
    /dev/shm, NCCL's ulimits when there are GPUs, a real init, detached."""
    from docker.types import Ulimit

    requests = device_requests(gpus)
    environment = dict(env or {})
    if not requests:
        # nvidia/cuda images set NVIDIA_VISIBLE_DEVICES=all; on an engine whose default runtime is
        # nvidia that alone would hand out every GPU. `--gpus none` means none.
        environment.setdefault("NVIDIA_VISIBLE_DEVICES", "void")
    # NVIDIA's recommendation for NCCL/RDMA: unlimited locked memory, 64 MiB stack. Only with
    # GPUs: unprivileged or nested engines refuse to raise RLIMIT_MEMLOCK, and CPU runs need none.
    ulimits = [Ulimit(name="memlock", soft=-1, hard=-1), Ulimit(name="stack", soft=67108864, hard=67108864)] if requests else []
    return dict(
        environment=environment, device_requests=requests, shm_size=parse_shm_size(shm_size), ulimits=ulimits,
        init=True,  # a real PID 1 reaps data-loader workers and forwards signals
        detach=True,
    )


def _run_error(err: Any, image: str, gpus: str) -> ToolError:
    reason = _short(err)
    problem = gpu_runtime_problem(str(err))
    if problem is not None:
        cause, fix = problem
        return GpuRuntimeError(cause, f"could not run {image}: {reason}", fix=fix)
    return ToolError(f"could not run {image}: {reason}", fix=f"check the command and the image (gpus={gpus})")


# ---------------------------------------------------------------- why a GPU container did not start


@dataclass(frozen=True)
class GpuRuntimeCause:
    """One reason the engine could not give GPUs to a container, how it reads, and its fix."""

    cause: str
    pattern: str  # a regular expression, matched case-insensitively against the engine's error
    fix: str


#: Matched in order, first match wins. Each pattern is tested against real engine errors recorded
#: from public reports in tests/engine/nvidia_container_errors.yaml, which names where each came from.
GPU_RUNTIME_CAUSES: tuple[GpuRuntimeCause, ...] = (
    GpuRuntimeCause("driver too old", r"requirement error: unsatisfied condition: cuda",
                    "the host's NVIDIA driver is older than the CUDA of the image: upgrade the driver there, or use an image "
                    "built for an older CUDA (invoke resolve --driver VERSION picks one)"),
    GpuRuntimeCause("driver/library mismatch", r"driver/library version mismatch|rm version mismatch|api mismatch",
                    "the loaded NVIDIA kernel module and the driver's libraries differ (a driver upgrade without a reboot): "
                    "reboot the host, or unload and reload the nvidia kernel modules"),
    GpuRuntimeCause("gpu lost", r"gpu is lost|fallen off the bus",
                    "a GPU fell off the bus: drain the host, then reset the GPU (nvidia-smi -r) or power-cycle the host"),
    GpuRuntimeCause("unknown device", r"device error: .*unknown device",
                    "--gpus names a GPU this host does not have (or the toolkit lost track of it): check the indices/UUIDs "
                    "with nvidia-smi -L there"),
    GpuRuntimeCause("driver not installed", r"load library failed: libnvidia-ml\.so|libnvidia-ml\.so\.1: cannot open shared object",
                    "the NVIDIA driver is not installed (or not loaded) on the host: install it so nvidia-smi works there, "
                    "then restart dockerd"),
    GpuRuntimeCause("driver rpc failed", r"driver rpc error|driver error: failed to process request",
                    "the driver did not answer the toolkit: enable persistence mode there (nvidia-smi -pm 1, or run "
                    "nvidia-persistenced)"),
    GpuRuntimeCause("driver broken", r"nvml error: unknown error",
                    "NVML fails on the host, usually a broken driver install: run nvidia-smi there; if it fails too, reinstall "
                    "the driver"),
    GpuRuntimeCause("no gpu runtime", r"could not select device driver .*capabilities: \[\[gpu\]\]|unknown or invalid runtime name: nvidia",
                    "this engine cannot give GPUs to containers: install the NVIDIA Container Toolkit and restart dockerd, "
                    "or pass --gpus none"),
    GpuRuntimeCause("toolkit failed", r"nvidia-container-cli|nvidia-container-runtime",
                    "the NVIDIA Container Toolkit could not set up the container: run nvidia-container-cli -k -d /dev/tty info "
                    "on the host to see why"),
)


def gpu_runtime_problem(reason: str) -> tuple[str, str] | None:
    """(cause, fix) when an engine error says GPUs could not be given to a container, else None. Pure."""
    for entry in GPU_RUNTIME_CAUSES:
        if re.search(entry.pattern, reason, re.I):
            return entry.cause, entry.fix
    return None


# ---------------------------------------------------------------- pure checks of run options


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


def caller_user() -> str:
    """`uid:gid` of this process, the user a container runs as (see run_container)."""
    return f"{os.getuid()}:{os.getgid()}"


def _build_fix(reason: str, log: list[str]) -> str:
    text = reason.lower()
    if any(word in text for word in ("pull access denied", "manifest unknown", "registry", "no such host", "manifest for")):
        return "the base image is not present locally and cannot be pulled: pull it, or pass --base-image with a local image"
    # pip/requests say CERTIFICATE_VERIFY_FAILED, uv "invalid peer certificate: UnknownIssuer".
    if "certificate" in text or any(_TLS_FAILURE.search(line) for line in log[-40:]):
        return "HTTPS inside the build does not trust your proxy: pass --ca-cert /etc/ssl/certs/ca-certificates.crt"
    return "see the build log above; nothing was tagged"


#: Prints the path of a python of the wanted X.Y that can make a venv, or exits 3. POSIX sh only:
#: the base may have nothing else.
_PYTHON_PROBE = (
    'for p in "python$0" python3; do '
    'if command -v "$p" >/dev/null 2>&1 '
    '&& [ "$("$p" -c "import sys; print(\'%d.%d\' % sys.version_info[:2])" 2>/dev/null)" = "$0" ] '
    '&& "$p" -c "import venv, ensurepip" >/dev/null 2>&1; then command -v "$p"; exit 0; fi; done; exit 3'
)


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
    _quietly(response.close)


def _response_message(response: Any) -> str:
    """The engine's `message` of an error answer, else its text."""
    try:
        return str(response.json().get("message") or response.text).strip()
    except ValueError:
        return (response.text or f"HTTP {response.status_code}").strip()


def _stream(records: Any, progress: LayerCallback | None, ref: str, action: str, deadline: float | None = None) -> str | None:
    """Follow a push/pull stream; the digest it announces; an error record raises ToolError."""
    digest = None
    for record in records:
        if deadline is not None and time.monotonic() > deadline:
            raise _PastDeadline()
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


# ---------------------------------------------------------------- the local engine, for callers that only know this machine

_LOCAL: dict[tuple[str | None, float], Engine] = {}
_LOCAL_LOCK = threading.Lock()


def local(timeout: float = READ_TIMEOUT) -> Engine:
    """The local engine, one per DOCKER_HOST and read timeout for the life of the process."""
    key = (os.environ.get("DOCKER_HOST"), timeout)
    with _LOCAL_LOCK:
        engine = _LOCAL.get(key)
        if engine is None or engine.closed:
            engine = _LOCAL[key] = Engine.local(timeout)
        return engine


def client(timeout: float = READ_TIMEOUT) -> Any:
    """The local engine's SDK client (tests and benchmarks inspect images through it)."""
    return local(timeout).client


def image_info(ref: str) -> ImageInfo | None:
    return local().image_info(ref)


def find_images(labels: dict[str, str | None]) -> list[ImageInfo]:
    return local().find_images(labels)


def remove_image(ref: str) -> None:
    local().remove_image(ref)


def untag(ref: str) -> None:
    local().untag(ref)


def image_history(ref: str) -> list[dict[str, Any]]:
    return local().image_history(ref)


def image_name(ref: str) -> str:
    if not re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", ref):
        return ref
    try:
        return local().image_name(ref)
    except GpuenvError:
        return ref.removeprefix("sha256:")[:12]


def build_image(context: IO[bytes], **kwargs: Any) -> BuildResult:
    return local().build_image(context, **kwargs)


def ensure_image(ref: str, progress: Progress | None = None) -> None:
    local().ensure_image(ref, progress)


def image_python(image: str, version: str) -> str | None:
    return local().image_python(image, version)


def run_container(image: str, command: list[str], **kwargs: Any) -> int:
    return local().run_container(image, command, **kwargs)


def push_image(source: str, repository: str, tags: list[str], *, progress: LayerCallback | None = None) -> str:
    return local().push_image(source, repository, tags, progress=progress)


def pull_image(ref: str, *, progress: LayerCallback | None = None, deadline: float | None = None) -> ImageInfo:
    return local().pull_image(ref, progress=progress, deadline=deadline)


def save_image(ref: str) -> Iterator[bytes]:
    # An image of a few GB can take minutes before its first bytes on a slow storage driver.
    return local(timeout=900).save_image(ref)


def daemon_info() -> dict[str, Any]:
    return local().info()


def engine_runtimes() -> list[str]:
    return local().runtimes()


def architecture() -> str:
    return local().architecture()
