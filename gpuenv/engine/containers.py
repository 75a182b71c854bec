"""Containers on an engine: the options every gpuenv container gets (GPU device requests as
`docker run --gpus` asks, /dev/shm, NCCL's ulimits, a real init), the pure checks of --gpus and
--shm-size, running one to its exit code, starting one detached (`Container`), and removing them.
`ContainersMixin` is that part of `Engine`; every container started here is removed."""

from __future__ import annotations

import io
import os
import re
import socket
from pathlib import Path
from typing import IO, Any, Callable, Iterator, TypeVar

from gpuenv.engine.causes import run_error
from gpuenv.engine.common import quietly, short_reason, to_stdout, transport_errors
from gpuenv.engine.connection import Connection
from gpuenv.errors import BadInput, GpuenvError, ToolError
from gpuenv.progress import Say

#: Shared memory for PyTorch data loader workers and NCCL: Docker's default /dev/shm is 64 MiB,
#: which makes multi-worker DataLoaders and NCCL fail with "bus error" / "unable to allocate".
DEFAULT_SHM_SIZE = "8g"
#: Where `run_container` mounts the folder it is given.
WORKDIR_IN_CONTAINER = "/workspace"

#: Prints the path of a python of the wanted X.Y that can make a venv, or exits 3. POSIX sh only:
#: the base may have nothing else.
T = TypeVar("T")

_PYTHON_PROBE = (
    'for p in "python$0" python3; do if command -v "$p" >/dev/null 2>&1 && [ "$("$p" -c "import '
    'sys; print(\'%d.%d\' % sys.version_info[:2])" 2>/dev/null)" = "$0" ] && "$p" -c "import '
    'venv, ensurepip" >/dev/null 2>&1; then command -v "$p"; exit 0; fi; done; exit 3'
)


class ContainersMixin:
    """The container calls of `Engine`."""

    client: Any  # docker.DockerClient, set by Connection

    def image_python(self, image: str, version: str) -> str | None:
        """The path of a usable Python `version` (X.Y) inside `image`, or None when it has none.

        Runs a throwaway container with the image's entrypoint replaced (nvidia/cuda's prints a
        banner), no network, and removes it whatever happens. (The SDK's
        `containers.run(remove=True)` removes only a container that ran: one whose start failed, or
        a wait cut short, stayed behind in the Created state.)
        """
        from docker.errors import APIError

        container = None
        try:
            container = self.client.containers.create(
                image,
                ["-c", _PYTHON_PROBE, version],
                entrypoint=["/bin/sh"],
                user="0:0",
                network_disabled=True,
            )
            container.start()
            status = int(container.wait().get("StatusCode", 1))
            out = container.logs(stdout=True, stderr=False)
        except APIError as err:
            raise ToolError(
                f"cannot look for Python {version} in {image}: {short_reason(err)}",
                fix="check that the image has /bin/sh",
            ) from None
        finally:
            if container is not None:
                quietly(lambda: container.remove(force=True))
        if status != 0:
            return None
        text = (
            out.decode("utf-8", "replace").strip() if isinstance(out, bytes) else str(out).strip()
        )
        return text or None

    def run_container(
        self,
        image: str,
        command: list[str],
        *,
        gpus: str = "all",
        workdir_mount: Path | None = None,
        env: dict[str, str] | None = None,
        stream: Say | None = None,
        shm_size: str = DEFAULT_SHM_SIZE,
        mounts: dict[Path, str] | None = None,
    ) -> int:
        """Run `command` in `image`, stream its output, remove the container, return its exit code.

        `workdir_mount` (default: the current folder) is mounted read-write at /workspace, the
        working directory; `mounts` adds host folders read-write at the container paths given
        (reports written outside the current folder). GPUs are requested the way `docker run --gpus`
        does. The image must be present: this never pulls.
        """
        from docker.errors import APIError, ImageNotFound

        emit = stream or to_stdout
        options = container_options(gpus, shm_size, env)
        mount = Path(workdir_mount if workdir_mount is not None else Path.cwd()).resolve()
        try:
            self.client.images.get(image)
        except ImageNotFound:
            raise GpuenvError(
                f"image {self.image_name(image)} is not present on this engine",
                fix="build it with invoke build",
            ) from None
        # The container runs as the caller's uid:gid, root included (like `docker run -u $(id
        # -u):$(id -g)`).
        # What it writes into the mounted folder (reports, checkpoints) must be writable there and
        # belong to the caller: the image's own user (1000) cannot write a folder that root or
        # anyone else owns with mode 0755/0700, and making it world-writable would be the wrong fix.
        # Running as root is no escalation for a root caller, who already commands the engine; the
        # image stays non-root for everyone who runs it without gpuenv. The caller's uid has no home
        # in the image, hence HOME=/tmp.
        options["environment"].setdefault("HOME", "/tmp")
        container = None
        try:
            container = self.client.containers.create(
                image=image,
                command=command or None,
                user=caller_user(),
                volumes={
                    str(mount): {"bind": WORKDIR_IN_CONTAINER, "mode": "rw"},
                    **{
                        str(folder): {"bind": inside, "mode": "rw"}
                        for folder, inside in (mounts or {}).items()
                    },
                },
                working_dir=WORKDIR_IN_CONTAINER,
                **options,
            )
            container.start()
            for chunk in container.logs(stream=True, follow=True):
                emit(chunk.decode("utf-8", errors="replace"))
            return int(container.wait().get("StatusCode", 1))
        except KeyboardInterrupt:
            if container is not None:
                quietly(container.kill)
            raise
        except APIError as err:
            raise run_error(err, self.image_name(image), gpus) from None
        finally:
            if container is not None:
                quietly(lambda: container.remove(force=True))

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
        host_network: bool = False,
        name: str | None = None,
        env: dict[str, str] | None = None,
        infiniband: bool = False,
    ) -> "Container":
        """Create and start a detached container with the run options of `run_container` (GPUs,
        /dev/shm, memlock, init) as the image's own user; `files` is a tar put at / before it
        starts.
        `host_network`: the host's network and IPC namespaces (`--network host --ipc host`), which a
        job across hosts needs: its rendezvous and NCCL reach the other hosts' addresses directly.

        `on_created` sees the container before it starts (a caller tracking what to remove on
        Ctrl-C); whatever fails after it exists removes it again. `name`: the container's name (a
        run's containers are named after it, so one left behind is found by name as by label).
        `env`: its environment (a fleet's NCCL/gloo settings); `infiniband`: the host's verbs
        devices and IPC_LOCK (fabric_options), for a host that has InfiniBand/RoCE ports.
        """
        from docker.errors import APIError

        options = container_options(gpus, shm_size, env)
        if name:
            options["name"] = name
        if host_network:
            options.update(network_mode="host", ipc_mode="host")
            options.pop("shm_size")  # the host's IPC namespace brings its own /dev/shm
        options.update(fabric_options(infiniband))
        try:
            raw = self.client.containers.create(
                image=image, command=command, labels=labels or {}, **options
            )
        except APIError as err:
            raise run_error(err, image, gpus) from None
        container = Container(self, raw)
        try:
            if on_created is not None:
                on_created(container)
            if files is not None:
                raw.put_archive("/", files)
            raw.start()
        except APIError as err:
            container.remove()
            raise run_error(err, image, gpus) from None
        except BaseException:
            container.remove()
            raise
        return container

    def read_image_path(
        self,
        image: str,
        path: str,
        read: Callable[[IO[bytes]], T],
        *,
        labels: dict[str, str] | None = None,
    ) -> T:
        """Hand `read` the tar stream of `path` in `image` (its members named from the last part
        of `path`: `env/...` for /opt/gpuenv/env), as `docker create` then `docker cp` give it:
        the container is created and never started, so nothing of the image runs, and it is
        removed whatever happens. A path the image does not have is BadInput naming it."""
        from docker.errors import APIError, ImageNotFound, NotFound

        container = None
        try:
            container = self.client.containers.create(
                image,
                ["/gpuenv-never-started"],
                entrypoint=[],
                network_disabled=True,
                labels={"io.gpuenv.read-only": "1", **(labels or {})},
            )
            try:
                chunks, _stat = container.get_archive(path, chunk_size=1 << 20)
            except NotFound:
                raise BadInput(
                    f"{image} has no {path}",
                    fix="give an image gpuenv built (invoke build), or --prefix for a folder",
                ) from None
            return read(_ChunkReader(iter(chunks)))
        except ImageNotFound:
            raise BadInput(
                f"no image {image} on this engine", fix="build it (invoke build) or pull it first"
            ) from None
        except APIError as err:
            raise ToolError(
                f"cannot read {path} of {image}: {short_reason(err)}",
                fix="check the engine (invoke doctor)",
            ) from None
        finally:
            if container is not None:
                quietly(lambda: container.remove(force=True))

    def remove_containers(self, labels: dict[str, str]) -> list[str]:
        """Remove (force) every container carrying `labels`; their ids."""
        filters = [f"{k}={v}" for k, v in labels.items()]
        removed = []
        for raw in self.client.containers.list(all=True, filters={"label": filters}):
            quietly(lambda raw=raw: raw.remove(force=True))
            removed.append(raw.id)
        return removed


class _ChunkReader(io.RawIOBase):
    """The engine's archive chunks as a file a tar reader can stream from."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._rest = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not len(self._rest):
            try:
                self._rest = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        count = min(len(buffer), len(self._rest))
        buffer[:count] = self._rest[:count]
        self._rest = self._rest[count:]
        return count


class Container:
    """A container an Engine started; every call is bounded and answers in gpuenv terms."""

    def __init__(self, engine: Connection, raw: Any) -> None:
        self.engine = engine
        self.raw = raw
        self.id = raw.id
        self._removed = False

    def wait(self, timeout: float | None) -> int | None:
        """The exit code, or None when it is still running after `timeout` seconds."""
        try:
            result = self.raw.wait(timeout=timeout) if timeout is not None else self.raw.wait()
        except transport_errors() as err:
            if timeout is not None and (
                "timed out" in str(err).lower() or isinstance(err, (TimeoutError, socket.timeout))
            ):
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
    ulimits = (
        [
            Ulimit(name="memlock", soft=-1, hard=-1),
            Ulimit(name="stack", soft=67108864, hard=67108864),
        ]
        if requests
        else []
    )
    return dict(
        environment=environment,
        device_requests=requests,
        shm_size=parse_shm_size(shm_size),
        ulimits=ulimits,
        init=True,  # a real PID 1 reaps data-loader workers and forwards signals
        detach=True,
    )


def fabric_options(infiniband: bool) -> dict[str, Any]:
    """What NCCL's InfiniBand/RoCE transport needs in a container (`docker run
    --device=/dev/infiniband --cap-add=IPC_LOCK`): the verbs device nodes (the engine adds every
    device under the folder) and the right to pin memory for RDMA. Nothing for a host without."""
    if not infiniband:
        return {}
    return {"devices": ["/dev/infiniband:/dev/infiniband:rwm"], "cap_add": ["IPC_LOCK"]}


# ---------------------------------------------------------------- pure checks of run options


_GPU_ID = re.compile(
    r"\d+|GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}|MIG-[0-9a-zA-Z/-]+", re.I
)


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
    """`--shm-size` in bytes, checked by the SDK's own parser before anything is asked of the
    engine."""
    from docker.errors import DockerException
    from docker.utils import parse_bytes

    text = str(value).strip()
    try:
        size = parse_bytes(text)
    except (DockerException, ValueError, OverflowError):
        size = None
    if not isinstance(size, int) or size <= 0 or size > 2**53:
        raise BadInput(
            f"--shm-size {value!r} is not a size",
            fix="give a positive size with a unit, e.g. 8g, 512m or 1073741824b",
        )
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
