"""Docker hosts over SSH: the one module that drives remote Docker engines (the SDK's ssh:// transport).

For each host: connect through SSH (paramiko, honouring ~/.ssh/config and known_hosts), make
sure the image is there (pulled by digest when missing), run the suite in it with the GPUs, and
copy the suite's JSON report out of the container. Hosts run in parallel up to a bound; each
ends in a `HostOutcome`, so one host that cannot be reached never stops the others.
"""

from __future__ import annotations

import io
import re
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from gpuenv.errors import BadInput
from gpuenv.fleet.outcome import FAILED, NO_GPU_RUNTIME, TIMEOUT, UNREACHABLE, HostOutcome, status_from_report
from gpuenv.fleet.report import load_suite_report

#: Folder inside the container where the suite writes its report and finds the baseline.
RUN_DIR = "/tmp/gpuenv-fleet"
REPORT_IN_CONTAINER = f"{RUN_DIR}/report.json"
BASELINE_IN_CONTAINER = f"{RUN_DIR}/baseline.json"
DEFAULT_PARALLEL = 8
#: Seconds to wait for SSH and the engine's first answer before calling a host unreachable.
CONNECT_TIMEOUT = 20
_HOST = re.compile(r"^[A-Za-z0-9._-]+$|^\[[0-9A-Fa-f:.]+\]$")

Progress = Callable[[str, str, str], None]  # (host, phase, detail)


@dataclass(frozen=True)
class SuiteRun:
    """What to run on every host: the image, the suite's options, the GPUs to hand the container."""

    image: str
    suite_args: list[str] = field(default_factory=list)
    gpus: str = "all"
    baseline: bytes | None = None  # a gpuenv-validate-baseline/1 file, copied into each container
    timeout_s: float | None = None  # per host, for the suite itself


def parse_hosts(text: str | list[str]) -> list[str]:
    """`ssh://user@host[:port],...` -> the list of URLs, each checked; duplicates dropped in order."""
    items = text if isinstance(text, list) else str(text).split(",")
    hosts = [h.strip() for h in items if h and h.strip()]
    if not hosts:
        raise BadInput("--hosts is empty", fix="give ssh://user@host[:port], comma-separated")
    for host in hosts:
        check_host_url(host)
    return list(dict.fromkeys(hosts))


def check_host_url(url: str) -> None:
    """One-line error for a host that is not `ssh://[user@]host[:port]`."""
    fix = "write it as ssh://user@host or ssh://user@host:2222"
    parts = urlsplit(url)
    if parts.scheme != "ssh":
        raise BadInput(f"host {url!r} is not an ssh:// URL", fix=fix)
    try:
        port = parts.port
    except ValueError:
        raise BadInput(f"host {url!r} has a bad port", fix=fix) from None
    hostname = parts.netloc.rpartition("@")[2].rsplit(":", 1)[0] if port else parts.netloc.rpartition("@")[2]
    if not hostname or not _HOST.match(hostname) or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise BadInput(f"host {url!r} has no usable host name", fix=fix)
    if port is not None and not 0 < port < 65536:
        raise BadInput(f"host {url!r} has port {port} out of range", fix=fix)


def suite_command(suite_args: list[str], with_baseline: bool) -> list[str]:
    """The command run in the container: the suite, writing its JSON where we collect it."""
    command = ["python", "-m", "validate", "--json", REPORT_IN_CONTAINER, *suite_args]
    if with_baseline:
        command += ["--baseline", BASELINE_IN_CONTAINER]
    return command


def _short(err: BaseException) -> str:
    text = str(getattr(err, "explanation", None) or err).strip().splitlines()
    return (text[-1] if text else type(err).__name__)[:300]


def _connect(url: str) -> Any:
    """A Docker SDK client for the engine behind `url`, or raise _Unreachable with why."""
    import docker

    try:
        client = docker.DockerClient(base_url=url, timeout=CONNECT_TIMEOUT)
    except Exception as err:  # paramiko's SSHException, socket errors, BadHostKeyException, ...
        raise _Unreachable(_ssh_reason(url, err)) from None
    try:
        client.ping()
    except Exception as err:
        client.close()
        raise _Unreachable(
            f"SSH works but the Docker engine does not answer ({_short(err)}): install Docker there and "
            "give this user access to it (docker group), and make sure `docker` is on its PATH"
        ) from None
    return client


def _ssh_reason(url: str, err: BaseException) -> str:
    text = _short(err)
    name = type(err).__name__
    host = urlsplit(url).hostname or url
    if "known_hosts" in text:
        keyscan = f"ssh-keyscan -p {urlsplit(url).port} {host}" if urlsplit(url).port else f"ssh-keyscan {host}"
        return f"SSH host key of {host} is unknown ({text}): check it, then add it with {keyscan} >> ~/.ssh/known_hosts"
    if name in ("AuthenticationException", "BadAuthenticationType", "PasswordRequiredException"):
        return f"SSH login refused ({text}): give this user's key (ssh-copy-id, or IdentityFile in ~/.ssh/config)"
    if name == "BadHostKeyException":
        return f"SSH host key of {host} changed ({text}): check the server, then fix ~/.ssh/known_hosts"
    return f"cannot reach {host} over SSH ({name}: {text})"


class _Unreachable(Exception):
    pass


def _gpu_runtime_missing(reason: str) -> bool:
    text = reason.lower()
    return "could not select device driver" in text or "nvidia-container-cli" in text or "unknown or invalid runtime name: nvidia" in text


def pull_progress_text(layers: dict[str, tuple[int, int]]) -> str:
    """'3 layers, 412.0 of 1843.2 MiB' from the engine's per-layer (current, total) bytes."""
    done = sum(current for current, _ in layers.values())
    total = sum(total for _, total in layers.values())
    return f"{len(layers)} layer(s), {done / 2**20:.1f} of {total / 2**20:.1f} MiB"


def ensure_image(client: Any, ref: str, say: Callable[[str], None]) -> str:
    """The image `ref` on this engine; pulled (by digest when the reference has one) if missing,
    with the bytes transferred as progress."""
    from docker.errors import APIError, ImageNotFound

    try:
        return client.images.get(ref).id
    except ImageNotFound:
        pass
    how = "by digest" if "@sha256:" in ref else "by tag (pin it by digest: invoke push prints one)"
    say(f"pulling {ref} {how}")
    repo, sep, digest = ref.partition("@")
    if not sep:
        last = ref.rsplit("/", 1)[-1]
        repo, tag = (ref.rsplit(":", 1) if ":" in last else (ref, "latest"))
    else:
        tag = digest
    layers: dict[str, tuple[int, int]] = {}
    shown = 0.0
    try:
        for event in client.api.pull(repo, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise APIError(event.get("error", "pull failed"))
            detail = event.get("progressDetail") or {}
            if event.get("id") and detail.get("total"):
                layers[event["id"]] = (int(detail.get("current", 0)), int(detail["total"]))
                if time.monotonic() - shown > 2:  # a line every 2 s at most
                    say(pull_progress_text(layers))
                    shown = time.monotonic()
        return client.images.get(ref).id
    except (APIError, ImageNotFound) as err:
        raise _RunFailed(f"image {ref} is not on this host and cannot be pulled ({_short(err)}): push it with invoke push and pass --image HOST/gpuenv/...@sha256:...") from None


class _RunFailed(Exception):
    pass


def _baseline_tar(data: bytes) -> bytes:
    """A tar holding RUN_DIR/baseline.json, writable by the image's non-root user."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folder = tarfile.TarInfo(RUN_DIR.strip("/"))  # put_archive extracts it at /
        folder.type, folder.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(folder)
        info = tarfile.TarInfo(f"{folder.name}/baseline.json")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _read_from_container(container: Any, path: str) -> str | None:
    from docker.errors import NotFound

    try:
        stream, _ = container.get_archive(path)
    except NotFound:
        return None
    data = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.next()
        handle = tar.extractfile(member) if member else None
        return handle.read().decode("utf-8", errors="replace") if handle else None


class _Live:
    """Containers now running on any host, so Ctrl-C can stop them all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.containers: dict[str, Any] = {}

    def kill_all(self) -> None:
        with self.lock:
            for container in list(self.containers.values()):
                try:
                    container.remove(force=True)
                except Exception:
                    pass


def validate_host(url: str, run: SuiteRun, progress: Progress | None = None, live: _Live | None = None) -> HostOutcome:
    """Run the suite on one host; never raises for a problem of that host (it becomes the outcome)."""
    from docker.errors import APIError, DockerException
    from docker.types import Ulimit

    from gpuenv.engine import DEFAULT_SHM_SIZE, device_requests

    say = (lambda phase, detail="": progress(url, phase, detail)) if progress else (lambda phase, detail="": None)
    started = time.monotonic()
    details: dict[str, Any] = {"image": run.image, "gpus": run.gpus}

    def outcome(status: str, reason: str, **kw: Any) -> HostOutcome:
        say("done", status)
        return HostOutcome(url, status, reason, seconds=round(time.monotonic() - started, 2), details=details, **kw)

    say("connecting")
    try:
        client = _connect(url)
    except _Unreachable as err:
        return outcome(UNREACHABLE, str(err))
    container = None
    try:
        info = client.info()
        details["engine"] = {"name": info.get("Name"), "server_version": info.get("ServerVersion"),
                             "runtimes": sorted((info.get("Runtimes") or {}).keys())}
        requests = device_requests(run.gpus)
        details["image_id"] = ensure_image(client, run.image, lambda text: say("pulling", text))
        environment = {} if requests else {"NVIDIA_VISIBLE_DEVICES": "void"}
        ulimits = [Ulimit(name="memlock", soft=-1, hard=-1), Ulimit(name="stack", soft=67108864, hard=67108864)] if requests else []
        try:
            container = client.containers.create(
                image=run.image, command=suite_command(run.suite_args, run.baseline is not None),
                environment=environment, device_requests=requests, shm_size=DEFAULT_SHM_SIZE, ulimits=ulimits,
                init=True, detach=True, labels={"io.gpuenv.fleet": "validate"},
            )
            if run.baseline is not None:
                container.put_archive("/", _baseline_tar(run.baseline))
            if live:
                with live.lock:
                    live.containers[url] = container
            say("running", "the suite")
            container.start()
        except APIError as err:
            reason = _short(err)
            if _gpu_runtime_missing(str(err)):
                return outcome(NO_GPU_RUNTIME, f"the engine cannot give GPUs to containers ({reason}): install the NVIDIA "
                               "Container Toolkit there and restart dockerd (or pass --gpus none for a CPU check)")
            return outcome(FAILED, f"could not start the suite in {run.image}: {reason}")
        try:
            result = container.wait(timeout=run.timeout_s) if run.timeout_s else container.wait()
        except Exception as err:  # requests' ReadTimeout (or the SSH channel's timeout) past --time
            if not run.timeout_s:
                raise
            return outcome(TIMEOUT, f"the suite did not finish within --time ({run.timeout_s:.0f}s); stopped it: give a longer --time "
                           f"or look at the host ({_short(err)})")
        code = int(result.get("StatusCode", 1))
        say("collecting", "report")
        text = _read_from_container(container, REPORT_IN_CONTAINER)
        report = load_suite_report(text) if text else None
        status, reason = status_from_report(report, code)
        if report is None:
            tail = container.logs(tail=5).decode("utf-8", errors="replace").strip().splitlines()
            reason += f": {tail[-1][:300]}" if tail else ""
        return outcome(status, reason, report=report, exit_code=code)
    except _RunFailed as err:
        return outcome(FAILED, str(err))
    except BadInput:
        raise
    except DockerException as err:
        return outcome(FAILED, f"the engine refused: {_short(err)}")
    except OSError as err:  # the SSH channel dropped mid-run
        return outcome(UNREACHABLE, f"lost the SSH connection ({_short(err)})")
    finally:
        if live:
            with live.lock:
                live.containers.pop(url, None)
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:
                pass
        client.close()


def validate_hosts(hosts: list[str], run: SuiteRun, parallel: int = DEFAULT_PARALLEL, progress: Progress | None = None) -> list[HostOutcome]:
    """Every host, at most `parallel` at once; outcomes in the order the hosts were given.

    Ctrl-C stops the containers already started on every host, then propagates.
    """
    if parallel < 1:
        raise BadInput(f"--parallel {parallel} is less than 1", fix="give 1 or more, e.g. --parallel 8")
    live = _Live()
    if progress:
        for host in hosts:
            progress(host, "queued", "")
    pool = ThreadPoolExecutor(max_workers=min(parallel, len(hosts)) or 1, thread_name_prefix="gpuenv-host")
    futures: list[Any] = []
    try:
        futures = [pool.submit(validate_host, host, run, progress, live) for host in hosts]
        results = []
        for future in futures:
            while True:  # wait in slices so the main thread sees Ctrl-C
                try:
                    results.append(future.result(timeout=0.5))
                    break
                except FutureTimeout:
                    continue
        return results
    except KeyboardInterrupt:
        for future in futures:
            future.cancel()
        live.kill_all()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
