"""Docker hosts over SSH, for real: Debian's sshd on loopback with a key made by the test, and the
local Docker engine as the "remote" one, reached through the Docker SDK's ssh:// transport."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import dockercases
import pytest
from hangbound import HANG_BOUND_S
from servers import free_port

from gpuenv.errors import BadInput
from gpuenv.fleet.outcome import AUTH_REFUSED, FAILED, NO_GPU_RUNTIME, READY, TIMEOUT, UNREACHABLE
from gpuenv.fleet.sshhosts import SuiteRun, parse_hosts, validate_hosts

ROOT = Path(__file__).resolve().parents[2]  # the repository (tests/fleet/../..)

pytestmark = pytest.mark.docker


@pytest.fixture
def ssh_home(ssh_server, monkeypatch):
    """Point the SDK's SSH client (paramiko reads ~/.ssh) at the test's keys; no agent."""
    monkeypatch.setenv("HOME", str(ssh_server.home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return ssh_server.home


def leftover_containers(docker_engine) -> list[str]:
    """This session's fleet containers: those made from this session's suite or hanging image
    (dockercases.session_containers), never another run's on a shared engine."""
    return dockercases.session_containers("io.gpuenv.fleet")


def test_only_this_sessions_fleet_containers_are_counted(docker_engine):
    """A fleet container of another run on the same engine (another session's label, or none)
    is not this session's leftover; one made from this session's images is."""
    from dockercases import BASE_IMAGE, SESSION, SESSION_LABEL

    api = docker_engine.api
    made = {
        who: api.create_container(
            BASE_IMAGE, ["true"], labels={"io.gpuenv.fleet": "validate", **labels}
        )["Id"]
        for who, labels in (
            ("ours", {SESSION_LABEL: SESSION}),
            ("another session", {SESSION_LABEL: "another"}),
            ("unlabelled", {}),
        )
    }
    try:
        counted = set(leftover_containers(docker_engine)) & set(made.values())
        assert counted == {made["ours"]}, {who: cid in counted for who, cid in made.items()}
    finally:
        for cid in made.values():
            api.remove_container(cid, force=True)


def test_two_hosts_one_unreachable_real_suite_through_invoke(
    ssh_server, suite_image, docker_engine, tmp_path
):
    """The real suite runs in the image on the reachable host; the other is reported unreachable;
    the fleet exits 1 and writes JSON, JUnit and HTML."""
    dead = f"ssh://{ssh_server.user}@127.0.0.1:{free_port()}"
    out = tmp_path / "out"
    baseline = (
        tmp_path / "baseline.json"
    )  # copied into the container; a missing file would stop the suite
    baseline.write_text(
        json.dumps(
            {
                "format": "gpuenv-validate-baseline/1",
                "models": {"host": {"cnn training samples/s (cpu)": 1.0}},
            }
        )
    )
    env = {**os.environ, "HOME": str(ssh_server.home), "PYTHONPATH": str(ROOT)}
    env.pop("SSH_AUTH_SOCK", None)
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "--search-root",
            str(ROOT),
            "validate",
            "--hosts",
            f"{ssh_server.url},{dead}",
            "--image",
            suite_image,
            "--gpus",
            "none",
            "--expect-gpus",
            "0",
            "--quick",
            "--parallel",
            "2",
            "--baseline",
            str(baseline),
            "--json",
            str(out / "fleet.json"),
            "--junit",
            str(out / "fleet.xml"),
            "--report",
            str(out / "fleet.html"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    # progress per host, as plain lines (not a terminal)
    assert (
        f"{ssh_server.url}" in proc.stdout
        and "running: the suite" in proc.stdout
        and "\x1b[" not in proc.stdout
    )
    assert "1 of 2 host(s) ready" in proc.stdout
    data = json.loads((out / "fleet.json").read_text())
    good, bad = data["hosts"][ssh_server.url], data["hosts"][dead]
    assert good["status"] == READY, good["reason"]
    assert good["summary"]["ok"] is True and good["exit_code"] == 0
    assert good["host"]["nvml"]["gpus"] == [] and "NVML" in good["host"]["nvml"]["error"]
    checks = {c["check"]: c for c in good["host"]["checks"]}
    # the image holds the suite without frameworks: their checks skip with that reason
    assert (
        checks["torch build"]["verdict"] == "skip"
        and "PyTorch is not installed" in checks["torch build"]["reason"]
    )
    assert (
        checks["driver"]["verdict"] == "skip"
        and "libnvidia-ml.so.1 not found" in checks["driver"]["reason"]
    )
    assert good["details"]["engine"]["server_version"]
    assert (
        bad["status"] == UNREACHABLE
        and f"cannot reach 127.0.0.1:{dead.rsplit(':', 1)[1]} over SSH: connection refused"
        in bad["reason"]
    )
    assert data["ready"] is False
    suites = ET.parse(out / "fleet.xml").getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == [ssh_server.url, dead]
    assert (
        int(suites[0].get("tests")) == len(good["host"]["checks"])
        and suites[1].get("errors") == "1"
    )
    assert 'data-hosts="2" data-ready="1"' in (out / "fleet.html").read_text()
    assert leftover_containers(docker_engine) == []


def test_gpus_asked_of_an_engine_without_gpu_runtime(
    ssh_server, ssh_home, suite_image, docker_engine
):
    if "nvidia" in (docker_engine.info().get("Runtimes") or {}):
        pytest.skip(
            "this engine has the NVIDIA runtime: it can give GPUs, so the no-runtime path "
            "cannot be shown here"
        )
    [outcome] = validate_hosts([ssh_server.url], SuiteRun(image=suite_image, gpus="all"))
    assert outcome.status == NO_GPU_RUNTIME, outcome.reason
    assert "NVIDIA Container Toolkit" in outcome.reason
    assert leftover_containers(docker_engine) == []


def test_a_missing_image_is_pulled_by_digest_over_ssh(
    ssh_server, ssh_home, suite_image, docker_engine, tmp_path
):
    """Push the suite image to a real registry on loopback, drop that reference, then validate
    with REGISTRY/...@sha256:...: the host's engine pulls it by digest and runs the suite."""
    import servers

    reason = servers.missing("docker-registry")
    if reason:
        pytest.skip(f"registry: {reason}")
    with servers.registry(tmp_path / "registry") as address:
        repo = f"{address}/gpuenv/fleet-test-suite"
        docker_engine.images.get(suite_image).tag(repo, "push")
        try:
            for event in docker_engine.api.push(repo, tag="push", stream=True, decode=True):
                assert "error" not in event, event
            digest = docker_engine.images.get(f"{repo}:push").attrs["RepoDigests"][0]
            assert digest.startswith(f"{repo}@sha256:")
            docker_engine.images.remove(
                f"{repo}:push"
            )  # the engine no longer knows the digest reference
            events = []
            [outcome] = validate_hosts(
                [ssh_server.url],
                SuiteRun(image=digest, gpus="none", suite_args=["--expect-gpus", "0", "--quick"]),
                progress=lambda *e: events.append(e),
            )
            assert (ssh_server.url, "pulling", f"pulling {digest} by digest") in events
            assert outcome.status == READY, outcome.reason
            assert outcome.details["image_id"] == docker_engine.images.get(suite_image).id
        finally:
            for ref in (f"{repo}:push", digest if "digest" in locals() else None):
                if ref:
                    try:
                        docker_engine.images.remove(ref)
                    except Exception:
                        pass


def test_a_digest_that_cannot_be_pulled_fails_that_host(ssh_server, ssh_home, docker_engine):
    ref = (
        "127.0.0.1:9/gpuenv/nothing@sha256:" + "0" * 64
    )  # a registry port nobody listens on (loopback)
    events = []
    [outcome] = validate_hosts(
        [ssh_server.url], SuiteRun(image=ref, gpus="none"), progress=lambda *e: events.append(e)
    )
    assert (
        outcome.status == FAILED
        and "cannot be pulled" in outcome.reason
        and "invoke push" in outcome.reason
    )
    assert (ssh_server.url, "pulling", f"pulling {ref} by digest") in events


def test_a_suite_past_its_time_limit_is_stopped(ssh_server, ssh_home, docker_engine):
    """--time for SSH hosts: a suite that hangs (a wedged GPU, here a `python` that sleeps) is
    stopped at the limit and reported as such. A hanging stand-in, because the real CPU suite can
    finish inside any limit short enough for a test."""
    from dockercases import BASE_IMAGE
    from servers import hanging_suite_image

    # The limit is the whole visit: connecting over SSH and creating the container come first,
    # and on a loaded two-core runner those alone took past 3 s ("ran out while talking to the
    # engine"), so they get the project's hang bound before the suite is found hanging.
    with hanging_suite_image(BASE_IMAGE, "gpuenv-fleet-hanging", 120) as hanging:
        [outcome] = validate_hosts(
            [ssh_server.url], SuiteRun(image=hanging, gpus="none", timeout_s=HANG_BOUND_S)
        )
        assert (
            outcome.status == TIMEOUT
            and f"did not finish within --time ({HANG_BOUND_S}s)" in outcome.reason
        ), outcome.reason
        assert leftover_containers(docker_engine) == []


def test_ctrl_c_removes_the_containers_it_started(ssh_server, ssh_home, suite_image, docker_engine):
    """Ctrl-C (SIGINT to this process) while the suite runs on a host: the container goes, the
    interrupt propagates."""
    import signal
    import threading

    def progress(host, phase, detail):
        if phase == "running":  # the container exists and is about to start
            threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()

    with pytest.raises(KeyboardInterrupt):
        validate_hosts(
            [ssh_server.url], SuiteRun(image=suite_image, gpus="none"), progress=progress
        )
    assert leftover_containers(docker_engine) == []


def test_unknown_host_key_is_refused_with_the_fix(ssh_server, ssh_home):
    (ssh_home / ".ssh" / "known_hosts").write_text("")
    [outcome] = validate_hosts([ssh_server.url], SuiteRun(image="x", gpus="none"))
    assert outcome.status == AUTH_REFUSED
    assert (
        "host key" in outcome.reason
        and f"ssh-keyscan -p {ssh_server.port} 127.0.0.1 >> ~/.ssh/known_hosts" in outcome.reason
    )


@pytest.mark.parametrize("parallel", [1, 2])
def test_parallel_is_a_bound(ssh_server, ssh_home, parallel):
    """Three host entries (one server, three names); never more than N in flight at once."""
    port = ssh_server.port
    hosts = [
        f"ssh://root@127.0.0.1:{port}",
        f"ssh://127.0.0.1:{port}",
        f"ssh://root@localhost:{port}",
    ]
    ref = "127.0.0.1:9/gpuenv/nothing@sha256:" + "0" * 64
    active, peak, order = set(), [0], []

    def progress(host, phase, detail):
        if phase == "connecting":
            active.add(host)
            peak[0] = max(peak[0], len(active))
        elif phase == "done":
            active.discard(host)
            order.append(host)

    outcomes = validate_hosts(
        hosts, SuiteRun(image=ref, gpus="none"), parallel=parallel, progress=progress
    )
    assert [o.host for o in outcomes] == hosts and all(o.status == FAILED for o in outcomes)
    assert 1 <= peak[0] <= parallel
    if parallel == 1:
        assert order == hosts


@pytest.mark.parametrize(
    "bad", ["http://gpu1", "gpu1", "ssh://", "ssh://gpu1:99999", "ssh://gpu1/path", "ssh://a b"]
)
def test_bad_host_urls_are_refused(bad):
    with pytest.raises(BadInput, match="ssh://"):
        parse_hosts(bad)


def test_bad_hosts_through_invoke_is_one_line_exit_2(invoke_cli):
    proc = invoke_cli("validate", "--hosts", "gpu1.example,ssh://ops@gpu2")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "gpuenv: host 'gpu1.example' is not an ssh:// URL: write it as ssh://user@host or ssh://user@host:2222"
    )
