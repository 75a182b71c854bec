"""Each reason a Docker host cannot be used has its own status and words, found against real
servers on loopback (issue 20, item 4): SSH refused, login refused, no `docker` there, an
engine that is down or hangs, a host that drops SYNs (iptables in a network namespace the test
makes), a registry that stalls mid-download. Every wait ends within its bound."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import servers
from hangbound import HANG_BOUND_S

from gpuenv import engine
from gpuenv.errors import ToolError
from gpuenv.fleet.outcome import AUTH_REFUSED, ENGINE_NOT_ANSWERING, NO_DOCKER, TIMEOUT, UNREACHABLE
from gpuenv.fleet.sshhosts import SuiteRun, validate_hosts

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.docker


@pytest.fixture
def client_home(tmp_path, monkeypatch):
    """A HOME for the SSH client; the server fixture fills its ~/.ssh."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return tmp_path


def _server(tmp_path, monkeypatch, environment=None):
    reason = servers.missing(servers.SSHD, "ssh-keygen", "docker")
    if reason:
        pytest.skip(f"sshd test server: {reason}")
    context = servers.sshd(tmp_path / "sshd", environment=environment)
    server = context.__enter__()
    monkeypatch.setenv("HOME", str(server.home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return context, server


def _one(server, **run) -> tuple:
    started = time.monotonic()
    [outcome] = validate_hosts(
        [server.url], SuiteRun(image="gpuenv-never-pulled:x", gpus="none", **run)
    )
    return outcome, time.monotonic() - started


def test_sshd_listens_on_loopback_only(tmp_path, monkeypatch):
    context, server = _server(tmp_path, monkeypatch)
    try:
        addresses = servers.listening_addresses(server.pid)
        assert addresses and all(a.startswith("127.0.0.1:") for a in addresses), addresses
    finally:
        context.__exit__(None, None, None)


def test_login_refused(tmp_path, monkeypatch):
    context, server = _server(tmp_path, monkeypatch)
    try:
        other = tmp_path / "other_key"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True
        )
        server.authorized_keys.write_text(
            other.with_suffix(".pub").read_text()
        )  # our key is no longer let in
        outcome, _ = _one(server)
        assert outcome.status == AUTH_REFUSED, outcome.reason
        assert outcome.reason.startswith(
            f"SSH login to 127.0.0.1:{server.port} as {server.user} refused"
        )
        assert "ssh-copy-id" in outcome.reason
    finally:
        context.__exit__(None, None, None)


def test_no_docker_command_on_the_remote(tmp_path, monkeypatch):
    context, server = _server(tmp_path, monkeypatch, environment={"PATH": "/nonexistent"})
    try:
        outcome, _ = _one(server)
        assert outcome.status == NO_DOCKER, outcome.reason
        assert (
            "SSH to root@127.0.0.1 works but there is no `docker` command on its PATH"
            in outcome.reason
        )
        assert "install Docker there" in outcome.reason
    finally:
        context.__exit__(None, None, None)


def test_engine_down_on_the_remote(tmp_path, monkeypatch):
    context, server = _server(
        tmp_path, monkeypatch, environment={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    )
    try:
        outcome, _ = _one(server)
        assert outcome.status == ENGINE_NOT_ANSWERING, outcome.reason
        assert (
            "works but its Docker engine does not answer" in outcome.reason
            and "Cannot connect to the Docker daemon" in outcome.reason
        )
        assert "start dockerd there" in outcome.reason
    finally:
        context.__exit__(None, None, None)


def test_engine_that_hangs_is_given_up_within_the_connect_timeout(tmp_path, monkeypatch):
    with servers.hung_unix_socket(tmp_path / "hung.sock") as sock:
        context, server = _server(
            tmp_path, monkeypatch, environment={"DOCKER_HOST": f"unix://{sock}"}
        )
        try:
            outcome, seconds = _one(server, connect_timeout_s=3)
            assert outcome.status == ENGINE_NOT_ANSWERING, outcome.reason
            assert "its Docker engine did not answer within 3s" in outcome.reason
            assert seconds < 3 + HANG_BOUND_S, seconds
        finally:
            context.__exit__(None, None, None)


def test_refused_port_is_unreachable_at_once(client_home, monkeypatch):
    monkeypatch.setenv("HOME", str(client_home))
    port = servers.free_port()
    started = time.monotonic()
    [outcome] = validate_hosts([f"ssh://root@127.0.0.1:{port}"], SuiteRun(image="x", gpus="none"))
    assert (
        outcome.status == UNREACHABLE
        and f"cannot reach 127.0.0.1:{port} over SSH: connection refused" in outcome.reason
    )
    assert time.monotonic() - started < HANG_BOUND_S


_DROPPED = textwrap.dedent("""
    import json, logging, subprocess, sys, time
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    # this namespace's loopback drops every SYN to these ports: hosts that are down or firewalled
    subprocess.run(
        ["iptables", "-A", "INPUT", "-i", "lo", "-p", "tcp", "--dport", "40000:40029", "--syn",
         "-j", "DROP"],
        check=True,
    )
    from gpuenv.fleet.sshhosts import SuiteRun, validate_hosts
    hosts = [f"ssh://root@127.0.0.1:{40000 + n}" for n in range(30)]
    started = time.monotonic()
    run = SuiteRun(image="x", gpus="none", connect_timeout_s=float(sys.argv[1]))
    outcomes = validate_hosts(hosts, run, parallel=8)
    print(json.dumps({"seconds": time.monotonic() - started,
                      "outcomes": [[o.status, o.reason] for o in outcomes]}))
""")


def test_thirty_hosts_that_drop_syns_take_one_connect_timeout_per_wave(tmp_path):
    """30 hosts, --parallel 8: 4 waves, each ends at the connect timeout (2 s here), not at the
    kernel's ~130 s of SYN retries. In a network namespace of its own (unshare -n), loopback
    only."""
    if os.geteuid() != 0 or not (
        shutil.which("unshare") and shutil.which("iptables") and shutil.which("ip")
    ):
        pytest.skip(
            "needs root, unshare, ip and iptables to drop SYNs in a private network namespace"
        )
    script = tmp_path / "dropped.py"
    script.write_text(_DROPPED)
    proc = subprocess.run(
        ["unshare", "--net", sys.executable, str(script), "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    if proc.returncode != 0 and "iptables" in proc.stderr and "Permission denied" in proc.stderr:
        pytest.skip(f"iptables refused in the namespace: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    statuses = {status for status, _ in result["outcomes"]}
    assert statuses == {UNREACHABLE}, result["outcomes"][:3]
    assert all("no answer within 2s" in reason for _, reason in result["outcomes"])
    assert result["seconds"] < 4 * 2 + 6, result[
        "seconds"
    ]  # 4 waves x 2 s, and a margin for a loaded machine
    # paramiko's transport thread prints no traceback per host (issue 21, item 11)
    assert "Traceback" not in proc.stderr and "paramiko" not in proc.stderr, proc.stderr[-2000:]


def test_a_registry_that_stalls_mid_download_ends_the_pull(docker_engine):
    """The SDK's pull has no read timeout; gpuenv's does (issue 21, item 9)."""
    with servers.stalling_registry() as registry:
        started = time.monotonic()
        with pytest.raises(ToolError) as caught:
            engine.Engine.local(timeout=3).pull_image(registry.reference)
        seconds = time.monotonic() - started
    assert "the download stalled (nothing for 3s)" in caught.value.render()
    assert any("/blobs/" in path for _, path in registry.served)  # it did get as far as the layer
    assert seconds < 3 + 10, seconds


def test_a_pull_is_stopped_at_its_deadline(docker_engine):
    with servers.stalling_registry() as registry:
        started = time.monotonic()
        with pytest.raises(ToolError, match="did not finish in time"):
            engine.Engine.local(timeout=60).pull_image(
                registry.reference, deadline=time.monotonic() + 3
            )
        assert time.monotonic() - started < 3 + HANG_BOUND_S


def test_time_covers_the_pull_on_a_host(tmp_path, monkeypatch, docker_engine):
    """--time is the host's whole visit: a pull that stalls is cut at the limit (issue 21, item
    9)."""
    context, server = _server(tmp_path, monkeypatch)
    try:
        with servers.stalling_registry() as registry:
            started = time.monotonic()
            [outcome] = validate_hosts(
                [server.url], SuiteRun(image=registry.reference, gpus="none", timeout_s=5)
            )
            seconds = time.monotonic() - started
        assert (
            outcome.status == TIMEOUT and "--time (5s) ran out while pulling" in outcome.reason
        ), outcome.reason
        assert seconds < 5 + 6, seconds
    finally:
        context.__exit__(None, None, None)


def test_the_test_registry_listens_on_loopback_only(tmp_path):
    reason = servers.missing("docker-registry")
    if reason:
        pytest.skip(f"registry: {reason}")
    pids: list[int] = []
    with servers.registry(tmp_path / "registry", pids) as address:
        addresses = servers.listening_addresses(pids[0])
        assert address in addresses and all(a.startswith("127.0.0.1:") for a in addresses), (
            addresses
        )


_NOISE = textwrap.dedent("""
    import socket, sys, threading
    from gpuenv.fleet.sshhosts import SuiteRun, validate_hosts
    # not SSH: accepts and answers garbage, so paramiko's transport thread fails on the banner
    server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(8)
    def serve():
        while True:
            conn, _ = server.accept(); conn.sendall(b"HTTP/1.0 400 nope\\r\\n\\r\\n"); conn.close()
    threading.Thread(target=serve, daemon=True).start()
    good, bad = sys.argv[1], f"ssh://root@127.0.0.1:{server.getsockname()[1]}"
    # the good host first: the SDK's own connect resets paramiko's log level on the way
    run = SuiteRun(image="gpuenv-never-pulled:x", gpus="none", connect_timeout_s=3)
    outcomes = validate_hosts([good, bad, bad.replace("root@", "")], run, parallel=1)
    print([o.status for o in outcomes])
""")


def test_paramiko_prints_no_traceback_for_a_host_that_is_not_ssh(tmp_path, monkeypatch):
    """Issue 21, item 11: no traceback per bad host on stderr, even after a good host's connect."""
    context, server = _server(tmp_path, monkeypatch)
    try:
        script = tmp_path / "noise.py"
        script.write_text(_NOISE)
        proc = subprocess.run(
            [sys.executable, str(script), server.url],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(server.home)},
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1] == "['failed', 'unreachable', 'unreachable']", (
            proc.stdout
        )
        assert proc.stderr.strip() == "", proc.stderr[-2000:]
    finally:
        context.__exit__(None, None, None)
