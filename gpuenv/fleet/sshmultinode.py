"""The fleet's multi-node job over SSH Docker hosts (`invoke validate --hosts ...`): after every
host's own suite, one container per host whose suite ran runs torchrun with its c10d rendezvous
on the first host, the same worker as the Slurm job (`validate.measure.multinode`), and its result
is judged by the same code (gpuenv/fleet/multinode.py), so it is the same fleet-report row.

The containers share their host's network and IPC (the rendezvous, NCCL's sockets and shared
memory reach the other hosts directly), so every host must reach the first host's name as its
URL gives it, on the run's own port. Every wait is bounded: torchrun's join_timeout at the
rendezvous, and the job's whole time limit; every container is removed at the end, or on Ctrl-C.

The port: the run's sequence (rendezvous_ports: from the sha256 of the run id, then the next ones,
in multinode.SSH_PORTS, apart from the Slurm jobs' ports). The controller knows the head, so before
it starts a container it probes the head's port (choose_port: a TCP connect bounded by
multinode.PORT_PROBE_S, the Slurm head's bound too, after a name lookup bounded by RESOLVE_S):
refused is free and taken; accepted is busy (what an earlier run or another service left there
would take the head's store) and the next port of the sequence is tried, up to PORT_TRIES; no
answer, or no address for the name in time, leaves it unknown, and the port is kept and the
progress line says so. Every port tried busy is the job's
named failure, before any container."""

from __future__ import annotations

import hashlib
import json
import shlex
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from gpuenv import engine as engines
from gpuenv.fleet import multinode
from gpuenv.fleet.interrupts import shielded
from gpuenv.fleet.outcome import FAILED, MULTINODE_HOST, HostOutcome, host_checks
from gpuenv.fleet.slurm_queue import JobState
from gpuenv.fleet.sshhosts import LABEL, READ_TIMEOUT, RUN_LABEL, FleetState, Progress, SuiteRun

#: Where rank 0 writes the result inside its container (the image's user can write /tmp).
RESULT_IN_CONTAINER = "/tmp/gpuenv-multinode/result.json"
#: The job's time limit when --time is not given: the rendezvous bound plus a short all-reduce and
#: DDP run.
DEFAULT_JOB_TIME_S = 15 * 60
#: How many ports of the run's sequence the controller tries on the head.
PORT_TRIES = 4
FREE = "free"
BUSY = "busy"


# ---------------------------------------------------------------- the command (pure)


def rendezvous_host(url: str) -> str:
    """The first host's address for the others: its name as the URL gives it (`ssh://u@gpu01:2222`
    -> gpu01)."""
    return urlsplit(url).hostname or url


def rendezvous_ports(run_id: str, tries: int = PORT_TRIES) -> list[int]:
    """The run's rendezvous ports in the order it tries them: the first from the sha256 of its id,
    then the next ones, all in multinode.SSH_PORTS (wrapping at its end)."""
    ports = multinode.SSH_PORTS
    first = int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16)
    return [ports[(first + i) % len(ports)] for i in range(tries)]


def gpu_count(outcome: HostOutcome, gpus: str = "all") -> int:
    """How many processes torchrun starts on the host: one per whole GPU its own suite saw (NVML;
    MIG mode left out, NCCL does not run across MIG instances), no more than `--gpus 0,1` names;
    one process without GPUs."""
    return multinode.job_gpus([outcome], gpus) or 1


#: What the probe container answers: how many entries /sys/class/infiniband has on the host.
IB_PROBE = ["sh", "-c", "ls -A /sys/class/infiniband 2>/dev/null | wc -l"]


def host_infiniband(
    engine: engines.Engine, image: str, labels: dict[str, str], timeout: float = 60
) -> bool:
    """Whether the host has InfiniBand/RoCE ports (/sys/class/infiniband not empty: sysfs is the
    host's in a container), asked by a short container of the job's image; False when it cannot
    say (the job then runs without the devices and its transport row says what NCCL used)."""
    try:
        probe = engine.start_container(image, IB_PROBE, gpus="none", labels=labels)
    except Exception:  # noqa: BLE001 - the job's own start names the host's problem
        return False
    try:
        if probe.wait(timeout) != 0:
            return False
        tail = probe.log_tail(1)
        return bool(tail) and tail[-1].strip().isdigit() and int(tail[-1].strip()) > 0
    finally:
        probe.remove()


def torch_missing(outcome: HostOutcome) -> bool:
    """Whether the host's own suite found no PyTorch in the image (a check skipped saying so); a
    suite that never looked (-k) proves nothing either way, and the job then tries."""
    return any(
        "PyTorch is not installed here" in str(c.get("reason") or c.get("measured") or "")
        for c in host_checks(outcome)
    )


def node_command(
    url: str,
    nnodes: int,
    procs: int,
    head: str,
    is_host: bool,
    run_id: str,
    sizes: str,
    port: int | None = None,
    expect_gpus: int = 0,
    gpus: str = "all",
) -> list[str]:
    """torchrun in the container on host `url`: one process per GPU, the c10d rendezvous on `head`.

    `--local-addr` is the host's name from its URL, the name the fleet reaches it by: the others
    reach it so, and the rendezvous tells the agents apart by it. Without it an agent is known by
    its host name and PID, and two containers with the host's network (one engine reached twice)
    share the host name and, each in its own PID namespace, can share the PID: then they are one
    participant to the rendezvous, which never fills and times out.
    `port`: the run's rendezvous port (default: the first of rendezvous_ports(`run_id`)).
    `expect_gpus`: the whole GPUs the host's own suite saw (with its `gpus`); the container first
    counts what it sees (the worker's --count-gpus, as Slurm's node script does) and fewer is a
    named failure (exit 3, the reason its last log line), not ranks failing on absent devices."""
    port = port or rendezvous_ports(run_id, 1)[0]
    words = [
        "python",
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={procs}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={head}:{port}",
        f"--local-addr={rendezvous_host(url)}",
        f"--rdzv-id=gpuenv-{run_id}",
        f"--rdzv-conf=is_host={int(is_host)},join_timeout={multinode.JOIN_TIMEOUT}",
        "--max-restarts=0",
        "-m",
        "validate.measure.multinode",
        "--out",
        RESULT_IN_CONTAINER,
        "--sizes",
        sizes,
        "--fleet-node",
        url,
    ]
    if expect_gpus <= 0:
        return words
    return ["sh", "-c", gpu_guard(expect_gpus, gpus) + " && exec " + shlex.join(words)]


def gpu_guard(expected: int, gpus: str) -> str:
    """Shell that exits 3 naming the shortfall when the container sees fewer whole GPUs than
    `expected` (the host's own suite saw them with `--gpus gpus`): the same check and words as the
    Slurm node script (multinode.render_node_script)."""
    reason = (
        f"the job sees $n GPU(s) here where the host's own suite saw {int(expected)}: "
        f"check --gpus ({gpus}) for this host and that the container gets them"
    )
    return (
        "n=$(python -m validate.measure.multinode --count-gpus 2>/dev/null | tail -n 1); "
        "case \"$n\" in ''|*[!0-9]*) n=0 ;; esac; "
        f'if [ "$n" -lt {int(expected)} ]; then echo "{reason}"; exit 3; fi'
    )


def node_part(
    outcome: HostOutcome,
    run: SuiteRun,
    nnodes: int,
    head: str,
    is_host: bool,
    run_id: str,
    port: int,
) -> tuple[list[str], str]:
    """(the command, the --gpus) of host `outcome.host`'s container in the job: its own GPU set
    (run.gpus_for: one machine's GPUs split between its engine reached twice get one set each),
    one rank per GPU its suite saw with them, and the guard that names a container seeing fewer."""
    gpus = run.gpus_for(outcome.host)
    command = node_command(
        outcome.host,
        nnodes,
        gpu_count(outcome, gpus),
        head,
        is_host,
        run_id,
        multinode.ddp_sizes(run.suite_args),
        port,
        expect_gpus=multinode.job_gpus([outcome], gpus),
        gpus=gpus,
    )
    return command, gpus


def job_host_name(nodes: list[str]) -> str:
    return f"{MULTINODE_HOST} ({','.join(nodes)})"


# ---------------------------------------------------------------- running (I/O)


#: How long the head's name may take to resolve: the system's resolver retries for longer (glibc:
#: 5 s a server, twice), and past this the ports' state is not known and the first is kept.
RESOLVE_S = 5.0


def head_address(host: str, timeout: float = RESOLVE_S, lookup: Any = socket.getaddrinfo) -> str:
    """`host`'s first address, looked up (`lookup`: getaddrinfo's signature) in a thread waited for
    at most `timeout`: getaddrinfo itself takes no bound. Raises OSError naming why none came."""
    found: list[Any] = []

    def resolve() -> None:
        try:
            found.append(lookup(host, None, type=socket.SOCK_STREAM))
        except OSError as err:
            found.append(err)

    thread = threading.Thread(target=resolve, name="gpuenv-resolve-head", daemon=True)
    thread.start()
    thread.join(timeout)  # a lookup still running is left to end on its own
    if not found:
        raise OSError(f"its name did not resolve within {timeout:g} s")
    if isinstance(found[0], OSError):
        raise found[0]
    return str(found[0][0][4][0])


def port_state(host: str, port: int, timeout: float = multinode.PORT_PROBE_S) -> str:
    """FREE when `host` refuses a connection to `port` (nothing listens), BUSY when it accepts
    one, else why it cannot tell (no answer within `timeout`: a firewall drops it; no address)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return BUSY
    except ConnectionRefusedError:
        return FREE
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as err:
        return f"{err.strerror or err}"


def choose_port(head: str, run_id: str) -> tuple[int | None, str]:
    """(the run's first port on `head` not found busy, what the probes found for the progress
    line); (None, the reason) when every port of its sequence is busy."""
    ports = rendezvous_ports(run_id)
    try:
        address = head_address(head)  # once, bounded: each probe then connects to it
    except OSError as err:
        return ports[0], f" (its state not known: {err.strerror or err})"
    busy: list[str] = []
    for port in ports:
        found = port_state(address, port)
        if found == BUSY:
            busy.append(str(port))
            continue
        notes = [f"{', '.join(busy)} in use"] if busy else []
        if found != FREE:
            notes.append(f"its state not known: {found}")
        return port, f" ({'; '.join(notes)})" if notes else ""
    return None, (
        f"not started: the rendezvous ports {', '.join(busy)} on {head} are all in use (earlier "
        "runs' torchrun agents keep their stores up to 300 s, or other services listen there): "
        "wait, or stop what listens there, then run again"
    )


def run_ssh_multinode(
    outcomes: list[HostOutcome],
    run: SuiteRun,
    progress: Progress | None = None,
    state: FleetState | None = None,
) -> HostOutcome | None:
    """Run the job over the hosts whose suite ran and return its outcome; None when fewer than two
    hosts ran their suite, or their image has no PyTorch (said through `progress`)."""
    say = progress or (lambda host, phase, detail: None)
    ran = [o for o in outcomes if o.report is not None]
    if len(ran) < 2:
        return None
    nodes = [o.host for o in ran]
    name = job_host_name(nodes)
    if any(torch_missing(o) for o in ran):
        say(name, "done", "not run: the image has no PyTorch (the multi-node job trains with it)")
        return None
    state = state or FleetState()
    limit = min(run.timeout_s, DEFAULT_JOB_TIME_S) if run.timeout_s else DEFAULT_JOB_TIME_S
    head = rendezvous_host(nodes[0])
    port, found = choose_port(head, state.run_id)
    if port is None:
        say(name, "done", f"{FAILED}: {found}")
        return HostOutcome(name, FAILED, found, details={"job_id": state.run_id, "nodes": nodes})
    opened: dict[str, engines.Engine] = {}
    containers: dict[str, engines.Container] = {}
    errors: dict[str, str] = {}
    exits: dict[str, int | None] = {n: None for n in nodes}
    started = time.monotonic()
    say(name, "running", f"torchrun on {len(nodes)} hosts, rendezvous {head}:{port}{found}")
    try:
        for index, outcome in enumerate(ran):
            url = outcome.host
            try:
                engine = engines.Engine.connect(
                    url, connect_timeout=run.connect_timeout_s, read_timeout=READ_TIMEOUT
                )
            except engines.EngineUnavailable as err:
                errors[url] = f"cannot reach its engine again: {err.render()}"
                break
            opened[url] = engine
            state.track_engine(f"{url} (multi-node)", engine)
            command, gpus = node_part(
                outcome, run, len(nodes), head, index == 0, state.run_id, port
            )
            labels = {LABEL: "multinode", RUN_LABEL: state.run_id}
            try:
                containers[url] = engine.start_container(
                    run.image,
                    command,
                    gpus=gpus,
                    labels=labels,
                    host_network=True,
                    env=run.env,
                    infiniband=host_infiniband(engine, run.image, labels),
                    name=f"gpuenv-multinode-{state.run_id}-{index}",
                    on_created=lambda c, key=f"{url} (multi-node)": state.track_container(key, c),
                )
            except Exception as err:  # noqa: BLE001 - that host's failure is the job's reason
                errors[url] = f"could not start its part: {engines.short_reason(err)}"
                break
        timed_out = False
        if not errors:
            waiters = {
                url: threading.Thread(
                    target=_wait, args=(url, c, limit, started, exits), daemon=True
                )
                for url, c in containers.items()
            }
            for thread in waiters.values():
                thread.start()
            for thread in waiters.values():
                thread.join(max(0.0, limit - (time.monotonic() - started)) + 5)
            timed_out = any(code is None for code in exits.values())
        result = _read_parts(containers, exits, errors)
        job_state = JobState(state.run_id, "TIMEOUT") if timed_out else None
        outcome = multinode.multinode_outcome(
            nodes,
            state.run_id,
            job_state,
            result if not errors else None,
            exits,
            errors,
            multinode.node_busbw(ran),
            round(time.monotonic() - started, 2),
            multinode.node_ddp_rates(ran),
        )
        outcome.details["rendezvous"] = f"{head}:{port}"
        say(name, "done", outcome.status)
        return outcome
    except KeyboardInterrupt as interrupt:
        with shielded():
            removed = sum(1 for container in containers.values() if container.remove())
        interrupt.cleanup = f"removed {removed} multi-node container(s)"  # type: ignore[attr-defined]
        raise
    finally:
        left = [url for url, container in containers.items() if not container.remove()]
        with state.lock:
            state.left += [f"{url} (multi-node container)" for url in left]
        for url, engine in opened.items():
            state.forget(f"{url} (multi-node)")
            engine.close()


def _read_parts(
    containers: dict[str, engines.Container], exits: dict[str, Any], errors: dict[str, str]
) -> dict[str, Any] | None:
    """Rank 0's result from the first container that wrote one; each container that exited badly
    gets its last log line (the guards' named failures) as its error."""
    result = None
    for url, container in containers.items():
        code = exits.get(url)
        if code not in (None, 0):
            tail = container.log_tail(3)
            errors.setdefault(url, f"exited {code}: {tail[-1][:300]}" if tail else f"exited {code}")
        data = container.read_file(RESULT_IN_CONTAINER)
        if data and result is None:
            try:
                parsed = json.loads(data.decode("utf-8", errors="replace"))
                result = parsed if isinstance(parsed, dict) else None
            except ValueError:
                errors.setdefault(url, "its result file is not JSON")
    return result


def _wait(
    url: str, container: engines.Container, limit: float, started: float, exits: dict[str, Any]
) -> None:
    """One host's part: its exit code, or None past the job's time limit (then it is removed)."""
    try:
        exits[url] = container.wait(max(1.0, limit - (time.monotonic() - started)))
    except Exception:  # noqa: BLE001 - the engine went away: no exit code, named as such
        exits[url] = None
