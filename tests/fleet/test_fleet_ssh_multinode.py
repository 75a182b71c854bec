"""The fleet's multi-node job over SSH Docker hosts (gpuenv/fleet/sshmultinode.py).

Pure parts: each host's torchrun command (the rendezvous on the first host, one process per GPU
its suite saw). For real: the loopback sshd in front of this machine's one Docker engine, reached
as two hosts (ssh://USER@127.0.0.1:PORT and ssh://USER@localhost:PORT). They are the same engine
reached twice, not two machines: this machine may run only one engine (a second dockerd on the
default bridge breaks the first, tests/fleet/conftest.py), so "two nodes" are two containers on
it, each with the host's network, meeting at the c10d rendezvous on 127.0.0.1 with gloo. The
image holds the real suite and this venv's PyTorch (CPU build), copied, so the job really trains."""

from __future__ import annotations

import io
import json
import socket
import tarfile
import tempfile
from pathlib import Path

import dockercases
import pytest
from dockercases import BASE_IMAGE
from servers import SUITE_PACKAGES

from gpuenv.fleet import multinode, sshmultinode
from gpuenv.fleet.outcome import READY, HostOutcome
from gpuenv.fleet.report import analysis, jsonreport, terminal
from validate.report.record import Record, build_json

ROOT = Path(__file__).resolve().parents[2]
TORCH_IMAGE = f"gpuenv-fleet-test-torch:{dockercases.SESSION}"  # this session's own
#: What `import torch` needs besides torch itself in this venv (its CPU build bundles libgomp).
TORCH_PACKAGES = (
    "torch",
    "torchgen",
    "typing_extensions.py",
    "sympy",
    "mpmath",
    "networkx",
    "jinja2",
    "markupsafe",
    "fsspec",
    "filelock",
    "numpy",
    "numpy.libs",
)


def report(gpus: int, torch: bool = True) -> dict:
    """A suite report: NVML saw `gpus` GPUs; without torch, its PyTorch check skipped as the suite
    skips it."""
    nvml = {"gpus": [{"index": i, "uuid": f"GPU-{i}"} for i in range(gpus)], "error": None}
    skipped = (
        []
        if torch
        else [
            Record(
                "torch build",
                None,
                "-",
                "-",
                "skip",
                0.0,
                "PyTorch is not installed here (No module named 'torch')",
            )
        ]
    )
    return build_json(skipped, nvml, [], {}, 0)


def test_each_host_runs_torchrun_with_the_rendezvous_on_the_first_host():
    first = sshmultinode.node_command("ssh://ops@gpu01:2222", 2, 8, "gpu01", True, "abc", "quick")
    second = sshmultinode.node_command("ssh://ops@gpu02", 2, 4, "gpu01", False, "abc", "full")
    assert sshmultinode.rendezvous_host("ssh://ops@gpu01:2222") == "gpu01"
    for words, procs, host in ((first, 8, 1), (second, 4, 0)):
        assert (
            words[:3] == ["python", "-m", "torch.distributed.run"]
            and "--nnodes=2" in words
            and f"--nproc-per-node={procs}" in words
        )
        assert (
            f"--rdzv-endpoint=gpu01:{sshmultinode.rendezvous_ports('abc')[0]}" in words
            and "--rdzv-id=gpuenv-abc" in words
        )
        assert (
            f"--rdzv-conf=is_host={host},join_timeout={multinode.JOIN_TIMEOUT}" in words
        )  # a bounded rendezvous
    # each agent is known to the rendezvous by its host's name from the URL, not its (shared) host
    # name and PID
    assert "--local-addr=gpu01" in first and "--local-addr=gpu02" in second
    assert first[-6:] == [
        "--out",
        sshmultinode.RESULT_IN_CONTAINER,
        "--sizes",
        "quick",
        "--fleet-node",
        "ssh://ops@gpu01:2222",
    ]
    assert sshmultinode.gpu_count(HostOutcome("a", READY, "", report=report(4))) == 4
    assert (
        sshmultinode.gpu_count(HostOutcome("a", READY, "", report=report(0))) == 1
    )  # one process without GPUs


def test_no_job_without_two_suites_or_without_pytorch():
    with_torch, without = (
        HostOutcome("ssh://a", READY, "", report=report(0)),
        HostOutcome("ssh://b", READY, "", report=report(0, torch=False)),
    )
    seen: list[tuple[str, str, str]] = []
    assert (
        sshmultinode.run_ssh_multinode([with_torch, HostOutcome("ssh://c", READY, "")], None)
        is None
    )  # type: ignore[arg-type]
    assert (
        sshmultinode.run_ssh_multinode([with_torch, without], None, lambda *a: seen.append(a))
        is None
    )  # type: ignore[arg-type]
    assert seen == [
        (
            "multi-node job (ssh://a,ssh://b)",
            "done",
            "not run: the image has no PyTorch (the multi-node job trains with it)",
        )
    ]


def _torch_context(folder: Path) -> Path:
    """A build context (a tar file on disk: PyTorch is most of a gigabyte) with the suite and
    PyTorch."""
    import pytest as pytest_module
    import torch

    site = Path(pytest_module.__file__).resolve().parents[1]
    if Path(torch.__file__).resolve().parents[1] != site:
        pytest.skip(
            f"PyTorch ({torch.__file__}) is not in the site folder of pytest ({site}): nothing "
            "to copy one folder from"
        )
    dockerfile = (
        f"FROM {BASE_IMAGE}\nCOPY lib/ /opt/suite/lib/\nCOPY validate/ /opt/suite/validate/\n"
        "COPY bin/ /usr/local/bin/\nENV PYTHONPATH=/opt/suite/lib:/opt/suite HOME=/tmp\n"
        f"USER 1000:1000\nWORKDIR /tmp\n{dockercases.session_label_line()}"
    ).encode()
    path = folder / "context.tar"
    skip = lambda t: None if "__pycache__" in t.name else t  # noqa: E731
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        link = tarfile.TarInfo("bin/python")
        link.type, link.linkname = tarfile.SYMTYPE, "/usr/bin/python3"
        tar.addfile(link)
        for name in (*SUITE_PACKAGES, *TORCH_PACKAGES):
            if (site / name).exists():
                tar.add(site / name, f"lib/{name}", filter=skip)
        tar.add(ROOT / "validate", "validate", filter=skip)
    return path


@pytest.fixture(scope="module")
def torch_image(docker_engine):
    """The suite and this venv's PyTorch in the test base image, built once; removed at the end."""
    from gpuenv.engine import Engine

    pytest.importorskip("torch", reason="needs PyTorch in this venv to copy into the image")
    engine = Engine.local()
    if (
        engine.image_info(BASE_IMAGE) is None
    ):  # made by this machine's setup, so no outside cause: a failure
        pytest.fail(
            f"the local base image {BASE_IMAGE} is missing: run scripts/setup.sh "
            f"(or scripts/make-test-base-image.sh {BASE_IMAGE})",
            pytrace=False,
        )
    with tempfile.TemporaryDirectory() as folder:
        with open(_torch_context(Path(folder)), "rb") as context:
            result = engine.build_image(
                context,
                dockerfile="Dockerfile",
                tags=[TORCH_IMAGE],
                buildargs={},
                progress=lambda text: None,
            )
    yield TORCH_IMAGE
    dockercases.remove_image(engine, result.image.id)


def result_run_id(outcome: HostOutcome) -> str:
    return str(outcome.details["job_id"])


@pytest.mark.frameworks
def test_two_ssh_hosts_run_their_suites_then_one_job_across_them(
    ssh_server, torch_image, docker_engine, tmp_path, monkeypatch, request
):
    """The task layer's own path (gpuenv.cli.fleet.run_fleet, as `invoke validate --hosts` calls
    it): each host's suite, then the job across both, READY, as the fleet report's own row."""
    from gpuenv.cli.fleet import run_fleet
    from gpuenv.fleet.modes import FleetOptions
    from gpuenv.fleet.sshhosts import LABEL

    monkeypatch.setenv("HOME", str(ssh_server.home))  # the test's SSH key and known_hosts
    # What an earlier run left on the port every run once used (29531): a store whose agent waits
    # in torchrun's exit barrier (up to 300 s), or a container a killed step left. On a fixed port
    # this run's head could not host its store and the other agent joined the stale one.
    stale = socket.socket(socket.AF_INET6)
    stale.bind(("::", 29531))
    stale.listen()
    request.addfinalizer(stale.close)
    hosts = [
        f"ssh://{ssh_server.user}@127.0.0.1:{ssh_server.port}",
        f"ssh://{ssh_server.user}@localhost:{ssh_server.port}",
    ]
    opts = FleetOptions(
        hosts=hosts, image=torch_image, gpus="none", parallel=2, time="20"
    )  # minutes, as Slurm writes it
    outcomes = run_fleet(
        opts,
        ["--expect-gpus", "0", "--quick", "-k", "torch_build or shared_memory"],
        say=lambda text: None,
    )
    assert [o.host for o in outcomes[:2]] == hosts and all(o.report for o in outcomes[:2]), outcomes
    assert [o.status for o in outcomes[:2]] == [READY, READY], [o.reason for o in outcomes[:2]]
    joint = outcomes[2]
    assert joint.host == f"multi-node job ({','.join(hosts)})" and joint.status == READY, (
        joint.reason,
        joint.details,
    )
    result = joint.report["multinode"]
    assert (
        result["backend"] == "gloo" and result["world"] == 2 and result["nodes"] == hosts
    )  # one rank per host, named by its URL
    assert {(link["source"], link["target"]) for link in result["links"]} == {
        tuple(hosts),
        tuple(reversed(hosts)),
    }
    assert result["ddp"]["sizes"] == "quick" and result["allreduce"]["busbw_gbs"] > 0
    assert joint.details["rendezvous"] in [
        f"127.0.0.1:{port}" for port in sshmultinode.rendezvous_ports(result_run_id(joint))
    ]
    checks = {c["check"].split(" (")[0]: c for c in joint.report["host"]["checks"]}
    assert checks["multi-node ddp parameters identical"]["verdict"] == "pass"
    assert (
        checks["multi-node ddp efficiency over the nodes' own rates"]["verdict"] == "not judged"
    )  # the suites ran no DDP (-k)
    fleet = analysis.analyse(outcomes)
    text = terminal.render_table(fleet, verbose=True)
    assert f"\n{joint.host}: ready" in text
    assert json.loads(jsonreport.render_json(fleet))["hosts"][joint.host]["status"] == READY
    left = dockercases.session_containers(LABEL, "multinode")
    assert left == [], "the job's containers are removed"


# --- the rendezvous port, probed on the head before the containers start ---


def held_ports(count: int, listening: int) -> tuple[str, list[socket.socket]]:
    """A run id whose first `count` ports this test can hold on 127.0.0.1, and their sockets: the
    first `listening` listen (busy to a probe), the others are bound only (refused, so free to a
    probe, and no other process can listen there while the test runs)."""
    for n in range(200):
        run_id = f"port-test-{n}"
        held = []
        try:
            for port in sshmultinode.rendezvous_ports(run_id)[:count]:
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            for sock in held[:listening]:
                sock.listen()
            return run_id, held
        except OSError:
            for sock in held:
                sock.close()
    raise AssertionError("no run id whose ports are free here")


def test_a_busy_rendezvous_port_makes_the_run_take_the_next_one_and_say_so():
    """What an earlier run (or another service) left listening on the run's port would take the
    head's store: the controller's probe of the head finds it, and the run takes the next port of
    its sequence, naming the one in use in its progress line."""
    run_id, held = held_ports(2, listening=1)
    try:
        ports = sshmultinode.rendezvous_ports(run_id)
        assert sshmultinode.port_state("127.0.0.1", ports[0]) == sshmultinode.BUSY
        assert sshmultinode.port_state("127.0.0.1", ports[1]) == sshmultinode.FREE
        assert sshmultinode.choose_port("127.0.0.1", run_id) == (ports[1], f" ({ports[0]} in use)")
    finally:
        for sock in held:
            sock.close()
    free_id, held = held_ports(1, listening=0)
    try:
        first = sshmultinode.rendezvous_ports(free_id)[0]
        assert sshmultinode.choose_port("127.0.0.1", free_id) == (first, "")
    finally:
        for sock in held:
            sock.close()


def test_every_port_of_the_run_busy_is_a_named_failure_before_any_container():
    """The job is not started (no engine is reached: nothing answers on ONE's SSH port here) and
    its row names the ports in use on the head."""
    from gpuenv.fleet.outcome import FAILED
    from gpuenv.fleet.sshhosts import FleetState, SuiteRun

    run_id, held = held_ports(sshmultinode.PORT_TRIES, listening=sshmultinode.PORT_TRIES)
    state = FleetState()
    state.run_id = run_id
    said: list[tuple[str, str, str]] = []
    try:
        outcome = sshmultinode.run_ssh_multinode(
            [HostOutcome(url, READY, "", report=report(0)) for url in (ONE, TWICE)],
            SuiteRun(image="img", gpus="none"),
            progress=lambda *line: said.append(line),
            state=state,
        )
    finally:
        for sock in held:
            sock.close()
    ports = ", ".join(map(str, sshmultinode.rendezvous_ports(run_id)))
    named = f"not started: the rendezvous ports {ports} on 127.0.0.1 are all in use"
    assert outcome is not None and outcome.status == FAILED, outcome
    assert outcome.reason.startswith(named) and outcome.host == f"multi-node job ({ONE},{TWICE})"
    assert said == [(outcome.host, "done", f"{FAILED}: {outcome.reason}")]


def test_a_head_the_probe_cannot_tell_about_keeps_the_port_and_says_so():
    """No answer (a firewall drops the probe) or no address for the name here: the port is kept,
    and the progress line says its state is not known."""
    first = sshmultinode.rendezvous_ports("abc")[0]
    port, note = sshmultinode.choose_port("gpuenv-no-such-host.invalid", "abc")
    assert port == first and note.startswith(" (its state not known: "), note


def test_a_name_lookup_that_hangs_is_bounded():
    """getaddrinfo takes no timeout: a resolver that does not answer (here a lookup that sleeps,
    standing in for an unreachable DNS server) costs RESOLVE_S, not its own retries."""
    import threading
    import time

    answered = threading.Event()

    def hanging(*_args, **_kwargs):
        time.sleep(30)
        answered.set()

    with pytest.raises(OSError, match="its name did not resolve within 0.2 s"):
        sshmultinode.head_address("gpu01", timeout=0.2, lookup=hanging)
    assert not answered.is_set(), "given up before the lookup ended"
    assert sshmultinode.head_address("127.0.0.1") == "127.0.0.1"


# --- a host's own GPUs; a container that sees fewer than its suite did (issue 33 D17) ---

ONE = "ssh://ops@127.0.0.1:2222"
TWICE = "ssh://ops@localhost:2222"  # the same engine reached twice: two "hosts" on one machine


def test_per_host_gpus_parse_from_the_command_line_and_name_a_stranger():
    from gpuenv.errors import BadInput
    from gpuenv.fleet.sshhosts import parse_host_gpus

    assert parse_host_gpus("0,1", [ONE, TWICE]) == ("0,1", {})
    both = (None, {ONE: "0,1", TWICE: "2,3"})
    assert parse_host_gpus(f"{ONE}=0,1; {TWICE}=2,3", [ONE, TWICE]) == both
    assert parse_host_gpus("ssh://ops@LOCALHOST:02222=3;all", [ONE, TWICE]) == ("all", {TWICE: "3"})
    with pytest.raises(BadInput, match="not one of --hosts"):
        parse_host_gpus("ssh://ops@gpu09=0", [ONE, TWICE])
    with pytest.raises(BadInput, match="empty entry"):
        parse_host_gpus(f"{ONE}=0,,1", [ONE, TWICE])


def test_the_cli_hands_each_host_its_own_gpus():
    from gpuenv.errors import BadInput
    from gpuenv.fleet.modes import merge_options

    opts = merge_options({"hosts": f"{ONE},{TWICE}", "gpus": f"{ONE}=0;{TWICE}=1"}, {})
    assert opts.gpus is None and opts.host_gpus == {ONE: "0", TWICE: "1"}
    with pytest.raises(BadInput, match="only --hosts takes"):
        merge_options({"slurm": True, "gpus": f"{ONE}=0"}, {})


def test_one_machines_gpus_split_between_its_engine_reached_twice_give_each_container_its_own():
    """The create options of the two job containers: each its own device request, one rank each,
    and the guard expecting the one GPU its suite saw with that set."""
    from gpuenv.engine import container_options
    from gpuenv.fleet.sshhosts import SuiteRun

    run = SuiteRun(image="img", suite_args=["--quick"], host_gpus={ONE: "0", TWICE: "1"})
    parts = [
        sshmultinode.node_part(
            HostOutcome(url, READY, "", report=report(1)),
            run,
            2,
            "127.0.0.1",
            url == ONE,
            "abc",
            29600,
        )
        for url in (ONE, TWICE)
    ]
    assert [gpus for _, gpus in parts] == ["0", "1"]
    requests = [container_options(gpus, "8g", {})["device_requests"] for _, gpus in parts]
    assert [r[0]["DeviceIDs"] for r in requests] == [["0"], ["1"]]
    for command, gpus in parts:
        assert command[:2] == ["sh", "-c"] and "--nproc-per-node=1" in command[2]
        assert 'if [ "$n" -lt 1 ]' in command[2] and f"check --gpus ({gpus})" in command[2]
    shared = SuiteRun(image="img", gpus="all")  # without a split: both get --gpus all, as before
    eight = HostOutcome(ONE, READY, "", report=report(2))
    assert sshmultinode.node_part(eight, shared, 2, "h", True, "a", 1)[1] == "all"


def test_without_gpus_the_command_is_torchrun_itself():
    from gpuenv.fleet.sshhosts import SuiteRun

    cpu = SuiteRun(image="img", gpus="none")
    none = HostOutcome(ONE, READY, "", report=report(0))
    words = sshmultinode.node_part(none, cpu, 2, "h", True, "a", 1)[0]
    assert words[:3] == ["python", "-m", "torch.distributed.run"]


@pytest.mark.frameworks
def test_a_container_seeing_fewer_gpus_than_its_suite_fails_named(torch_image, docker_engine):
    """The rendered guard run for real in the job's image: its worker counts 0 GPUs (this machine
    has none), the host's suite saw 2: exit 3, and the last log line (the job's reason) says so."""
    from gpuenv.engine import Engine

    command = sshmultinode.node_command(
        ONE, 2, 2, "127.0.0.1", True, "abc", "quick", 29600, expect_gpus=2, gpus="0,1"
    )
    labels = {"io.gpuenv.test": "gpu-guard"}
    container = Engine.local().start_container(torch_image, command, gpus="none", labels=labels)
    try:
        assert container.wait(120) == 3
        assert container.log_tail(1)[-1].strip() == (
            "the job sees 0 GPU(s) here where the host's own suite saw 2: "
            "check --gpus (0,1) for this host and that the container gets them"
        )
    finally:
        container.remove()


# --- the fabric and the fleet's environment reach the job's containers (review D1, D9) ---------


class _Created:
    """What the Docker SDK's containers.create returns, as far as start_container uses it."""

    id = "c0ffee"

    def start(self) -> None:
        pass

    def remove(self, force: bool = False) -> None:
        pass


class _RecordingClient:
    """A Docker SDK client whose containers.create records its options: the engine's own
    start_container runs, nothing is created."""

    def __init__(self) -> None:
        self.created: list[dict] = []
        outer = self

        class _Containers:
            @staticmethod
            def create(**options):
                outer.created.append(options)
                return _Created()

        self.containers = _Containers()


def test_start_container_gives_an_infiniband_host_its_devices_and_the_fleets_environment():
    """The options the engine really creates the job's container with (not only the pure
    fabric_options): the verbs devices, IPC_LOCK and NCCL's settings on a host with ports."""
    from gpuenv.engine import Engine

    client = _RecordingClient()
    engine = Engine(client, "fake")
    engine.start_container(
        "img",
        ["true"],
        gpus="none",
        host_network=True,
        env={"NCCL_SOCKET_IFNAME": "ib0"},
        infiniband=True,
    )
    engine.start_container("img", ["true"], gpus="none", host_network=True)
    with_ib, without = client.created
    assert with_ib["devices"] == ["/dev/infiniband:/dev/infiniband:rwm"]
    assert with_ib["cap_add"] == ["IPC_LOCK"] and with_ib["network_mode"] == "host"
    assert with_ib["environment"]["NCCL_SOCKET_IFNAME"] == "ib0"
    assert "devices" not in without and "cap_add" not in without


class _Probe:
    """The short container host_infiniband starts: it answers `ls -A /sys/class/infiniband | wc
    -l`."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def wait(self, timeout):
        return 0

    def log_tail(self, lines):
        return [self.answer]

    def remove(self):
        pass


class _JobEngine:
    """An engine reached over SSH: the IB probe answers `ports`; the job's container is recorded
    and refused, so the job ends at once with that host's failure."""

    def __init__(self, ports: str, started: list[dict]) -> None:
        self.ports, self.started = ports, started

    def start_container(self, image, command, **options):
        if command == sshmultinode.IB_PROBE:
            return _Probe(self.ports)
        self.started.append(options)
        raise RuntimeError("recorded, not started")

    def close(self):
        pass


def test_each_ssh_hosts_job_container_gets_the_fabric_its_probe_found_and_fleet_env(monkeypatch):
    """run_ssh_multinode as `invoke validate --hosts` runs it, up to the job container's start:
    the host whose probe counts IB ports gets infiniband=True, and invoke.yaml's fleet.env reaches
    the container (before, neither was checked past the pure option builders)."""
    from gpuenv.engine import Engine
    from gpuenv.fleet.sshhosts import SuiteRun

    started: list[dict] = []
    monkeypatch.setattr(
        Engine, "connect", classmethod(lambda cls, url, **kw: _JobEngine("2", started))
    )
    hosts = [HostOutcome(f"ssh://gpu0{i}", READY, "", report=report(0)) for i in (1, 2)]
    run = SuiteRun(image="reg/gpuenv/x:1", gpus="none", env={"NCCL_SOCKET_IFNAME": "ib0"})
    outcome = sshmultinode.run_ssh_multinode(hosts, run)
    assert outcome is not None and outcome.status != READY
    assert started and started[0]["infiniband"] is True
    assert started[0]["env"] == {"NCCL_SOCKET_IFNAME": "ib0"} and started[0]["host_network"]
    assert sshmultinode.host_infiniband(_JobEngine("0", []), "img", {}) is False
