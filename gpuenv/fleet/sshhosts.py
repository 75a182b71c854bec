"""Docker hosts over SSH: run the suite on each host's engine, reached through `gpuenv.engine`.

For each host: `Engine.connect` (bounded SSH login, `docker` there, its engine answering), make
sure the image is there (pulled by digest when missing), run the suite in it with the GPUs, and
copy the suite's JSON report out of the container. Hosts run in parallel up to a bound; each
ends in a `HostOutcome`, so one host that cannot be reached never stops the others. `--time`
covers a host's whole visit, the pull included. Ctrl-C or SIGTERM stops every host: no new
container starts, every container started is removed, every connection closed.
"""

from __future__ import annotations

import io
import queue
import re
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from gpuenv import engine as engines
from gpuenv.errors import BadInput, ToolError
from gpuenv.fleet.interrupts import shielded
from gpuenv.fleet.outcome import (
    AUTH_REFUSED,
    CANCELLED,
    ENGINE_NOT_ANSWERING,
    FAILED,
    NO_DOCKER,
    NO_GPU_RUNTIME,
    TIMEOUT,
    UNREACHABLE,
    HostOutcome,
    status_from_report,
)
from gpuenv.fleet.suitereport import load_suite_report
from validate.text import safe_url

#: Folder inside the container where the suite writes its report and finds the baseline.
RUN_DIR = "/tmp/gpuenv-fleet"
REPORT_IN_CONTAINER = f"{RUN_DIR}/report.json"
BASELINE_IN_CONTAINER = f"{RUN_DIR}/baseline.json"
DEFAULT_PARALLEL = 8
#: Seconds for each step of reaching a host (TCP, SSH login, `docker version` there).
CONNECT_TIMEOUT = engines.CONNECT_TIMEOUT
#: Seconds without a byte from an engine before a read fails (a stalled pull, a hung call).
READ_TIMEOUT = 60
#: A host's whole visit when --time is not given (--time UNLIMITED lifts it): the full suite,
#: sustained load included, takes well under this on a healthy server.
DEFAULT_HOST_TIME_S = 2 * 3600
#: Labels on every suite container: what it is, and which run made it (so an interrupt finds them
#: all).
LABEL = "io.gpuenv.fleet"
RUN_LABEL = "io.gpuenv.fleet.run"
_HOST = re.compile(r"^[A-Za-z0-9._-]+$|^\[[0-9A-Fa-f:.]+\]$")
_CAUSE_STATUS = {
    engines.UNREACHABLE: UNREACHABLE,
    engines.AUTH_REFUSED: AUTH_REFUSED,
    engines.NO_DOCKER: NO_DOCKER,
    engines.ENGINE_NOT_ANSWERING: ENGINE_NOT_ANSWERING,
}

Progress = Callable[[str, str, str], None]  # (host, phase, detail)


@dataclass(frozen=True)
class SuiteRun:
    """What to run on every host: the image, the suite's options, the GPUs to hand the container."""

    image: str
    suite_args: list[str] = field(default_factory=list)
    gpus: str = "all"
    baseline: bytes | None = None  # a gpuenv-validate-baseline/1 file, copied into each container
    timeout_s: float | None = None  # per host, for its whole visit: connect, pull and the suite
    connect_timeout_s: float = CONNECT_TIMEOUT
    env: dict[str, str] = field(
        default_factory=dict
    )  # NCCL_*/GLOO_*/TORCH_* (invoke.yaml fleet.env)
    #: A host's own GPUs where they differ (`--gpus 'URL=0,1;URL=2,3'`): one machine's GPUs split
    #: between two "hosts" that are its engine reached twice, or hosts whose GPUs differ.
    host_gpus: dict[str, str] = field(default_factory=dict)

    def gpus_for(self, url: str) -> str:
        """The GPUs host `url`'s containers get: its own set, else `gpus`."""
        return self.host_gpus.get(url, self.gpus)


# ---------------------------------------------------------------- host URLs (pure)


def parse_hosts(text: str | list[str]) -> list[str]:
    """`ssh://user@host[:port],...` -> the list of URLs, each checked and written one way
    (`:052222` is `:52222`, `:22` is no port, the host name in lower case); duplicates dropped in
    order."""
    items = text if isinstance(text, list) else str(text).split(",")
    hosts = [h.strip() for h in items if h and h.strip()]
    if not hosts:
        raise BadInput("--hosts is empty", fix="give ssh://user@host[:port], comma-separated")
    return list(dict.fromkeys(normalise_host_url(host) for host in hosts))


def parse_host_gpus(value: str | None, hosts: list[str]) -> tuple[str | None, dict[str, str]]:
    """`--gpus` over SSH hosts: one value for every host (all, none, 0,1), or a host's own after
    its URL, entries separated by ";" (`ssh://ops@gpu01=0,1;ssh://ops@gpu02=2,3`; an entry with no
    URL is every other host's). -> (every other host's value or None, {URL: its value}), each
    value checked as docker run --gpus takes it and each URL one of `hosts`."""
    from gpuenv.engine import parse_gpus

    if value is None or "=" not in value:
        return value, {}
    default: str | None = None
    own: dict[str, str] = {}
    for entry in (part.strip() for part in value.split(";")):
        if not entry:
            continue
        url, sep, gpus = entry.rpartition("=")
        if not sep:
            default = entry
            parse_gpus(entry)
            continue
        url = normalise_host_url(url.strip())
        if url not in hosts:
            raise BadInput(
                f"--gpus names {shown_url(url)}, which is not one of --hosts",
                fix="give each host's GPUs after its URL as --hosts writes it: URL=0,1;URL=2",
            )
        parse_gpus(gpus)
        own[url] = gpus.strip()
    return default, own


def shown_url(url: str) -> str:
    """A host URL as messages show it, quoted: without its password, safe for the terminal."""
    return repr(safe_url(url))


def normalise_host_url(url: str) -> str:
    """`ssh://[user@]host[:port]` checked and in one spelling, or BadInput naming what is wrong
    (the URL shown without its password, if it holds one)."""
    fix = "write it as ssh://user@host or ssh://user@host:2222"
    shown = shown_url(url)
    try:
        parts = urlsplit(url)
    except ValueError:  # ssh://root@[::1 : an unclosed IPv6 bracket
        raise BadInput(f"host {shown} has no usable host name", fix=fix) from None
    if ":" in parts.netloc.rpartition("@")[0]:
        raise BadInput(
            f"host {shown} holds a password; gpuenv never sends one in a URL",
            fix="use an SSH key or agent (ssh-copy-id), and write ssh://user@host",
        )
    if parts.scheme != "ssh":
        raise BadInput(f"host {shown} is not an ssh:// URL", fix=fix)
    if parts.path or parts.query or parts.fragment or "?" in url or "#" in url:
        raise BadInput(f"host {shown} has a path, query or fragment; an SSH host has none", fix=fix)
    user, at, hostport = parts.netloc.rpartition("@")
    hostname, port_text = hostport, ""
    if hostport.startswith("["):
        close = hostport.find("]")
        hostname, port_text = (
            hostport[: close + 1],
            hostport[close + 2 :] if hostport[close + 1 : close + 2] == ":" else "",
        )
        if close < 0 or hostport[close + 1 :] not in ("", ":" + port_text):
            raise BadInput(f"host {shown} has no usable host name", fix=fix)
    elif ":" in hostport:
        hostname, _, port_text = hostport.rpartition(":")
    if (
        not hostname
        or not _HOST.match(hostname)
        or (at and not re.fullmatch(r"[A-Za-z0-9._-]+", user))
    ):
        raise BadInput(f"host {shown} has no usable host name", fix=fix)
    port = None
    if port_text or hostport.endswith(":"):
        if not port_text.isdigit() or len(port_text.lstrip("0")) > 5:
            raise BadInput(f"host {shown} has a bad port", fix=fix)
        port = int(port_text)  # :052222 is :52222
        if not 0 < port < 65536:
            raise BadInput(f"host {shown} has port {port} out of range", fix=fix)
    netloc = (
        (f"{user}@" if at else "")
        + hostname.lower()
        + (f":{port}" if port not in (None, 22) else "")
    )
    return f"ssh://{netloc}"


def suite_command(suite_args: list[str], with_baseline: bool) -> list[str]:
    """The command run in the container: the suite, writing its JSON where we collect it."""
    command = ["python", "-m", "validate", "--json", REPORT_IN_CONTAINER, *suite_args]
    if with_baseline:
        command += ["--baseline", BASELINE_IN_CONTAINER]
    return command


def pull_progress_text(layers: dict[str, tuple[int, int]]) -> str:
    """'3 layers, 412.0 of 1843.2 MiB' from the engine's per-layer (current, total) bytes."""
    done = sum(current for current, _ in layers.values())
    total = sum(total for _, total in layers.values())
    return f"{len(layers)} layer(s), {done / 2**20:.1f} of {total / 2**20:.1f} MiB"


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


# ---------------------------------------------------------------- one run across the fleet


class _Stopped(Exception):
    """The run was interrupted: this host starts nothing more."""


class FleetState:
    """What is open on every host right now, so an interrupt can stop it all: engines, the
    containers started, and which step each host is in."""

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:12]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.engines: dict[str, engines.Engine] = {}
        self.containers: dict[str, engines.Container] = {}
        self.phase: dict[str, str] = {}
        self.deadline: dict[str, float] = {}
        self.left: list[str] = []  # containers a host's own cleanup could not remove

    def set_phase(self, url: str, phase: str) -> None:
        with self.lock:
            if self.stop.is_set():
                raise _Stopped()
            self.phase[url] = phase

    def track_engine(self, url: str, engine: engines.Engine) -> None:
        with self.lock:
            if self.stop.is_set():
                engine.close()
                raise _Stopped()
            self.engines[url] = engine

    def track_container(self, url: str, container: engines.Container) -> None:
        with self.lock:
            if self.stop.is_set():
                raise _Stopped()  # start_container removes it: nothing starts after an interrupt
            self.containers[url] = container

    def forget(self, url: str) -> None:
        with self.lock:
            self.engines.pop(url, None)
            self.containers.pop(url, None)
            self.phase.pop(url, None)
            self.deadline.pop(url, None)

    def expire(self) -> None:
        """Close the engine of every host past its --time while it is not running the suite (a
        stalled read then ends at once; a running suite is stopped by its own bounded wait)."""
        now = time.monotonic()
        with self.lock:
            late = [
                url
                for url, end in self.deadline.items()
                if now > end + 1 and url not in self.containers
            ]
            for url in late:
                self.deadline.pop(url, None)
                if url in self.engines:
                    self.engines[url].close()

    def stop_all(
        self, workers: list[threading.Thread], grace: float = 5.0
    ) -> tuple[int, list[str]]:
        """Stop every host: no new container, each one started removed, each connection closed.
        (containers removed, what could not be removed: host and container id)."""
        self.stop.set()
        with self.lock:
            containers = dict(self.containers)
            idle = [
                e
                for url, e in self.engines.items()
                if url not in containers and self.phase.get(url) != "creating"
            ]
        for engine in idle:  # connecting or pulling: closing ends a stalled read now
            engine.close()
        results: dict[str, bool] = {}

        def remove(url: str, container: engines.Container) -> None:
            results[url] = container.remove()

        removers = [
            threading.Thread(target=remove, args=item, daemon=True) for item in containers.items()
        ]
        for thread in removers:
            thread.start()
        end = time.monotonic() + grace
        for thread in [*removers, *workers]:
            thread.join(max(0.0, end - time.monotonic()))
        left = [
            f"{url} (container {c.id[:12]})"
            for url, c in containers.items()
            if not results.get(url)
        ]
        with self.lock:
            remaining = dict(self.engines)
        for (
            url,
            engine,
        ) in remaining.items():  # a container created while we stopped: find it by the run's label
            if not engine.closed:
                try:
                    ok, _ = engines.bounded_call(
                        lambda e=engine: e.remove_containers({RUN_LABEL: self.run_id}),
                        5,
                        on_late=lambda _r: None,
                    )
                except Exception:  # noqa: BLE001 - the engine went away under us
                    ok = (
                        engine.closed
                    )  # closed by its own worker, which removed its container first
                if not ok:
                    left.append(f"{url} (containers labelled {RUN_LABEL}={self.run_id})")
            engine.close()
        with self.lock:
            left += self.left
        return sum(1 for ok in results.values() if ok), left


def validate_host(
    url: str, run: SuiteRun, progress: Progress | None = None, state: FleetState | None = None
) -> HostOutcome:
    """Run the suite on one host; never raises for a problem of that host (it becomes the
    outcome). A BadInput (the user's mistake, the same for every host) is raised."""
    visit = _Visit(url, run, state or FleetState(), progress)
    try:
        # each step ends the visit with an outcome, or returns None to go on
        for step in (visit.connect, visit.find_image, visit.start_suite):
            ended = step()
            if ended is not None:
                return ended
        return visit.wait_for_report()
    except _Stopped:
        return visit.outcome(CANCELLED, "stopped by an interrupt before the suite finished")
    except BadInput:
        raise
    except Exception as err:  # the engine or the SSH channel failed mid-visit
        return visit.broke_off(err)
    finally:
        visit.clean_up()


class _Visit:
    """One host's visit: the engine and the container it opened (closed and removed at the end
    whatever happens), its deadline, and the details its outcome carries."""

    def __init__(
        self, url: str, run: SuiteRun, state: FleetState, progress: Progress | None
    ) -> None:
        self.url, self.run, self.state, self.progress = url, run, state, progress
        self.started = time.monotonic()
        self.deadline = self.started + run.timeout_s if run.timeout_s else None
        self.details: dict[str, Any] = {"image": run.image, "gpus": run.gpus_for(url)}
        self.engine: engines.Engine | None = None
        self.container: engines.Container | None = None

    def say(self, phase: str, detail: str = "") -> None:
        if self.progress:
            self.progress(self.url, phase, detail)

    def outcome(self, status: str, reason: str, **kw: Any) -> HostOutcome:
        self.say("done", status)
        seconds = round(time.monotonic() - self.started, 2)
        return HostOutcome(self.url, status, reason, seconds=seconds, details=self.details, **kw)

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def out_of_time(self) -> bool:
        return self.deadline is not None and (self.remaining() or 0) <= 0

    def timed_out(self, step: str) -> HostOutcome:
        return self.outcome(
            TIMEOUT,
            f"--time ({self.run.timeout_s:.0f}s) ran out {step}: give a longer --time or look at "
            "the host",
        )

    def connect(self) -> HostOutcome | None:
        """Open the host's engine within --connect-timeout (and what --time leaves)."""
        url, run, state = self.url, self.run, self.state
        self.say("connecting")
        state.set_phase(url, "connecting")
        if self.deadline is not None:
            with state.lock:
                state.deadline[url] = self.deadline
        limit = (
            run.connect_timeout_s
            if self.deadline is None
            else max(0.5, min(run.connect_timeout_s, self.remaining() or 0))
        )
        try:
            self.engine = engines.Engine.connect(
                url, connect_timeout=limit, read_timeout=READ_TIMEOUT
            )
        except engines.EngineUnavailable as err:
            if state.stop.is_set():
                raise _Stopped() from None
            if self.out_of_time():
                return self.timed_out("while connecting")
            return self.outcome(_CAUSE_STATUS.get(err.cause, UNREACHABLE), err.render())
        state.track_engine(url, self.engine)
        info = self.engine.info()
        self.details["engine"] = {
            "name": info.get("Name"),
            "server_version": info.get("ServerVersion"),
            "runtimes": sorted((info.get("Runtimes") or {}).keys()),
        }
        return None

    def find_image(self) -> HostOutcome | None:
        """The suite's image on the host, pulled when it is not there yet."""
        assert self.engine is not None
        run = self.run
        image = self.engine.image_info(run.image)
        if image is None:
            self.state.set_phase(self.url, "pulling")
            how = (
                "by digest"
                if "@sha256:" in run.image
                else "by tag (pin it by digest: invoke push prints one)"
            )
            self.say("pulling", f"pulling {run.image} {how}")
            try:
                image = self.engine.pull_image(
                    run.image, progress=self._pull_progress(), deadline=self.deadline
                )
            except ToolError as err:
                if self.state.stop.is_set():
                    raise _Stopped() from None
                if self.out_of_time():
                    return self.timed_out(f"while pulling {run.image}")
                return self.outcome(
                    FAILED,
                    f"image {run.image} is not on this host and cannot be pulled "
                    f"({err.message}): push it with invoke push and pass --image "
                    "HOST/gpuenv/...@sha256:...",
                )
        self.details["image_id"] = image.id
        if self.out_of_time():
            return self.timed_out("before the suite could start")
        return None

    def _pull_progress(self) -> Callable[[engines.LayerProgress], None]:
        """A pull's progress, said every 2 s at most."""
        layers: dict[str, tuple[int, int]] = {}
        shown = [0.0]

        def pulled(record: engines.LayerProgress) -> None:
            if record.layer and record.total:
                layers[record.layer] = (int(record.current or 0), int(record.total))
                if time.monotonic() - shown[0] > 2:  # a line every 2 s at most
                    self.say("pulling", pull_progress_text(layers))
                    shown[0] = time.monotonic()

        return pulled

    def start_suite(self) -> HostOutcome | None:
        """The suite's container, started with the GPUs and the baseline the run gives."""
        assert self.engine is not None
        url, run, state = self.url, self.run, self.state
        state.set_phase(url, "creating")
        try:
            self.container = self.engine.start_container(
                run.image,
                suite_command(run.suite_args, run.baseline is not None),
                gpus=run.gpus_for(url),
                labels={LABEL: "validate", RUN_LABEL: state.run_id},
                env=run.env,
                files=_baseline_tar(run.baseline) if run.baseline is not None else None,
                on_created=lambda c: state.track_container(url, c),
            )
        except engines.GpuRuntimeError as err:
            return self.outcome(
                NO_GPU_RUNTIME,
                f"the engine cannot give GPUs to containers ({err.message}): {err.fix} "
                "(on that host; or pass --gpus none for a CPU check)",
            )
        except ToolError as err:
            return self.outcome(FAILED, f"could not start the suite in {run.image}: {err.message}")
        return None

    def wait_for_report(self) -> HostOutcome:
        """Wait for the suite within what --time leaves, and read its report."""
        container = self.container
        assert container is not None
        self.state.set_phase(self.url, "running")
        self.say("running", "the suite")
        left = self.remaining()
        code = container.wait(max(1.0, left) if left is not None else None)
        if code is None:
            return self.outcome(
                TIMEOUT,
                f"the suite did not finish within --time ({self.run.timeout_s:.0f}s); stopped "
                "it: give a longer --time or look at the host",
            )
        self.say("collecting", "report")
        data = container.read_file(REPORT_IN_CONTAINER)
        report = load_suite_report(data.decode("utf-8", errors="replace")) if data else None
        status, reason = status_from_report(report, code)
        if report is None:
            tail = container.log_tail(5)
            reason += f": {tail[-1][:300]}" if tail else ""
        return self.outcome(status, reason, report=report, exit_code=code)

    def broke_off(self, err: Exception) -> HostOutcome:
        """The outcome when the engine or the SSH channel failed mid-visit: stopped, out of
        time, the connection lost, or the engine's failure."""
        if self.state.stop.is_set():
            return self.outcome(CANCELLED, "stopped by an interrupt before the suite finished")
        why = engines.short_reason(err)
        if self.out_of_time():
            return self.timed_out(f"while talking to the engine ({why})")
        if self.engine is not None and self.engine.closed:
            return self.outcome(UNREACHABLE, f"lost the connection to {self.url} ({why})")
        return self.outcome(FAILED, f"the engine failed: {why}")

    def clean_up(self) -> None:
        """Remove the container (or name it as left behind) and close the engine."""
        state = self.state
        if self.container is not None and not self.container.remove():
            with state.lock:
                state.left.append(f"{self.url} (container {self.container.id[:12]})")
        state.forget(self.url)
        if self.engine is not None:
            self.engine.close()


def validate_hosts(
    hosts: list[str],
    run: SuiteRun,
    parallel: int = DEFAULT_PARALLEL,
    progress: Progress | None = None,
    state: FleetState | None = None,
) -> list[HostOutcome]:
    """Every host, at most `parallel` at once; outcomes in the order the hosts were given.

    Workers are daemon threads, so an interrupted run never waits for a stalled host to exit.
    Ctrl-C or SIGTERM (KeyboardInterrupt here) stops every host (FleetState.stop_all, shielded
    from a second interrupt), then propagates with `.cleanup` saying what was removed.
    """
    if parallel < 1:
        raise BadInput(
            f"--parallel {parallel} is less than 1", fix="give 1 or more, e.g. --parallel 8"
        )
    state = state or FleetState()
    if progress:
        for host in hosts:
            progress(host, "queued", "")
    todo: queue.Queue[tuple[int, str]] = queue.Queue()
    for item in enumerate(hosts):
        todo.put(item)
    results: dict[int, HostOutcome] = {}
    errors: list[BaseException] = []

    def work() -> None:
        while not state.stop.is_set():
            try:
                index, host = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[index] = validate_host(host, run, progress, state)
            except BaseException as err:  # a bug or a bad option: handed to the main thread
                errors.append(err)
                state.stop.set()
                return

    workers = [
        threading.Thread(target=work, daemon=True, name=f"gpuenv-host-{n}")
        for n in range(min(parallel, len(hosts)) or 1)
    ]
    try:
        for worker in workers:
            worker.start()
        while alive := [worker for worker in workers if worker.is_alive()]:
            alive[0].join(
                0.2
            )  # in slices: the main thread must see Ctrl-C and SIGTERM, and hosts past --time
            state.expire()
    except KeyboardInterrupt as interrupt:
        with shielded():
            removed, left = state.stop_all(workers)
        interrupt.cleanup = (
            f"removed {removed} suite container(s)" if removed else "no suite container was running"
        ) + (f"; could NOT remove: {', '.join(left)} (docker rm -f them there)" if left else "")
        raise
    if errors:
        raise errors[0]
    return [results[i] for i in range(len(hosts))]
