"""The test Slurm's daemons (munged, slurmctld, slurmd: tests/fleet/servers.py) die with the test
run that started them. Before, they daemonized: a pytest killed mid-run (SIGKILL, a cancelled CI
job) left them running, holding their ports and munge socket, for every later run to meet.

A pytest-like parent (a Python process in the fixture's context manager) is killed with SIGKILL,
which no cleanup can catch; every daemon must be gone within DEATH_BOUND_S.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import servers

#: Seconds for the kernel to deliver the parent-death signal and the daemons to be gone.
DEATH_BOUND_S = 10
#: Seconds the parent has to bring the cluster up (slurmd to idle: 30 s in slurm_cluster).
START_BOUND_S = 60
TESTS = Path(__file__).resolve().parents[1]


def _running(pid: int, cmdline: bytes) -> bool:
    """The process `pid` is still the daemon it was: not gone, not a zombie waiting for a reaper
    (init in a container may never reap it), not a new process that took the number."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline
    except (OSError, IndexError):
        return False


def test_the_slurm_daemons_die_with_the_test_run_that_started_them(tmp_path):
    reason = servers.missing("munged", "slurmctld", "slurmd", "sinfo")
    if reason:
        pytest.skip(reason)
    pids_file = tmp_path / "pids"
    parent = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path[:0] = [{str(TESTS / "fleet")!r}, {str(TESTS)!r}]
        import servers
        with servers.slurm_cluster(Path({str(tmp_path / "slurm")!r})) as cluster:
            Path({str(pids_file)!r}).write_text(" ".join(map(str, cluster.pids)))
            time.sleep(600)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    daemons: dict[int, bytes] = {}
    try:
        deadline = time.monotonic() + START_BOUND_S
        while not pids_file.exists() or not pids_file.read_text():
            assert proc.poll() is None, proc.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, f"no cluster within {START_BOUND_S} s"
            time.sleep(0.2)
        for pid in map(int, pids_file.read_text().split()):
            daemons[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert len(daemons) == 3 and all(_running(p, c) for p, c in daemons.items()), daemons
        proc.kill()  # as a cancelled CI job or `kill -9` ends pytest: no finally runs
        proc.wait(timeout=DEATH_BOUND_S)
        deadline = time.monotonic() + DEATH_BOUND_S
        while any(_running(p, c) for p, c in daemons.items()) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {p: c.split(b"\0")[0].decode() for p, c in daemons.items() if _running(p, c)}
        assert left == {}, f"outlived their test run by {DEATH_BOUND_S} s: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEATH_BOUND_S)
        for pid, cmdline in daemons.items():  # only the daemons this test started, by their pid
            if _running(pid, cmdline):
                os.kill(pid, signal.SIGKILL)


def test_sshd_and_the_registry_die_with_the_test_run_that_started_them(tmp_path):
    reason = servers.missing(servers.SSHD, "docker-registry")
    if reason:
        pytest.skip(reason)
    pids_file = tmp_path / "pids"
    parent = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path[:0] = [{str(TESTS / "fleet")!r}, {str(TESTS)!r}]
        import servers
        pids = []
        with servers.sshd(Path({str(tmp_path / "sshd")!r})) as ssh:
            with servers.registry(Path({str(tmp_path / "registry")!r}), pids):
                Path({str(pids_file)!r}).write_text(" ".join(map(str, [ssh.pid, *pids])))
                time.sleep(600)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    servers_started: dict[int, bytes] = {}
    try:
        deadline = time.monotonic() + START_BOUND_S
        while not pids_file.exists() or not pids_file.read_text():
            assert proc.poll() is None, proc.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, f"no servers within {START_BOUND_S} s"
            time.sleep(0.2)
        for pid in map(int, pids_file.read_text().split()):
            servers_started[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert len(servers_started) == 2, servers_started
        proc.kill()  # no finally runs: only the kernel can stop them now
        proc.wait(timeout=DEATH_BOUND_S)
        deadline = time.monotonic() + DEATH_BOUND_S
        while (
            any(_running(p, c) for p, c in servers_started.items()) and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        left = {p: c.split(b"\0")[0].decode() for p, c in servers_started.items() if _running(p, c)}
        assert left == {}, f"outlived their test run by {DEATH_BOUND_S} s: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEATH_BOUND_S)
        for pid, cmdline in servers_started.items():  # only what this test started, by pid
            if _running(pid, cmdline):
                os.kill(pid, signal.SIGKILL)
