"""The test servers (Slurm's munged, slurmctld and slurmd, sshd, the registry:
tests/fleet/servers.py) die with the test run that started them. Before, the Slurm daemons
daemonized and sshd and the registry were plain children: a pytest killed mid-run (SIGKILL, a
cancelled CI job) left them running, holding their ports and munge socket, for every later run to
meet.

A pytest-like parent (a Python process in the fixtures' context managers) is killed with SIGKILL,
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


def killed_parent_leaves_none(tmp_path: Path, starts: str, count: int) -> None:
    """Run `starts` (Python lines that start servers in `servers`' context managers and write
    their pids into PIDS) in a pytest-like parent, check the `count` servers run, kill the
    parent with SIGKILL, and require every server gone within DEATH_BOUND_S."""
    pids_file = tmp_path / "pids"
    parent = "\n".join(
        [
            "import sys, time",
            "from pathlib import Path",
            f"sys.path[:0] = [{str(TESTS / 'fleet')!r}, {str(TESTS)!r}]",
            "import servers",
            f"PIDS = Path({str(pids_file)!r})",
            f"TMP = Path({str(tmp_path)!r})",
            textwrap.dedent(starts),
        ]
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    started: dict[int, bytes] = {}
    try:
        deadline = time.monotonic() + START_BOUND_S
        while not pids_file.exists() or not pids_file.read_text():
            assert proc.poll() is None, proc.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, f"nothing started within {START_BOUND_S} s"
            time.sleep(0.2)
        for pid in map(int, pids_file.read_text().split()):
            started[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert len(started) == count and all(_running(p, c) for p, c in started.items()), started
        proc.kill()  # as a cancelled CI job or `kill -9` ends pytest: no finally runs
        proc.wait(timeout=DEATH_BOUND_S)
        deadline = time.monotonic() + DEATH_BOUND_S
        while any(_running(p, c) for p, c in started.items()) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {p: c.split(b"\0")[0].decode() for p, c in started.items() if _running(p, c)}
        assert left == {}, f"outlived their test run by {DEATH_BOUND_S} s: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEATH_BOUND_S)
        for pid, cmdline in started.items():  # only what this test started, by its pid
            if _running(pid, cmdline):
                os.kill(pid, signal.SIGKILL)


def test_the_slurm_daemons_die_with_the_test_run_that_started_them(tmp_path):
    reason = servers.missing("munged", "slurmctld", "slurmd", "sinfo")
    if reason:
        pytest.skip(reason)
    starts = """
        with servers.slurm_cluster(TMP / "slurm") as cluster:
            PIDS.write_text(" ".join(map(str, cluster.pids)))
            time.sleep(600)
        """
    killed_parent_leaves_none(tmp_path, starts, 3)


def test_sshd_and_the_registry_die_with_the_test_run_that_started_them(tmp_path):
    reason = servers.missing(servers.SSHD, "docker-registry")
    if reason:
        pytest.skip(reason)
    starts = """
        pids = []
        with servers.sshd(TMP / "sshd") as ssh, servers.registry(TMP / "registry", pids):
            PIDS.write_text(" ".join(map(str, [ssh.pid, *pids])))
            time.sleep(600)
        """
    killed_parent_leaves_none(tmp_path, starts, 2)
