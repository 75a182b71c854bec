"""Slurm, for real: a one-node cluster on loopback (munge, slurmctld, slurmd) started by the test.
The CPU suite runs through sbatch from a prefix (this project's venv, as `invoke install --prefix`
would lay one out) and in an image on a node with Docker; a job that times out and one cancelled
by Ctrl-C say so per node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuenv.fleet.outcome import CANCELLED, FAILED, READY, TIMEOUT
from gpuenv.fleet.slurm import run_job
from gpuenv.fleet.slurm_job import SlurmJob
from gpuenv.fleet.slurm_queue import parse_scontrol_job, scontrol_job_command

ROOT = Path(__file__).resolve().parents[2]  # the repository (tests/fleet/../..)

#: A prefix with Python, pytest, PyTorch CPU and TensorFlow CPU: the venv the tests run in.
PREFIX = Path(sys.prefix)


def invoke_slurm(
    cluster, cwd: Path, *args: str, **kw
) -> subprocess.Popen | subprocess.CompletedProcess:
    env = {**os.environ, **cluster.env, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "validate", "--slurm", *args]
    if kw.get("background"):
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=kw.get("timeout", 600)
    )


def job_state(cluster, job_id: str):
    proc = subprocess.run(
        scontrol_job_command(job_id),
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
    )
    return parse_scontrol_job(proc.stdout, job_id)


def test_cpu_suite_through_sbatch_from_a_prefix(slurm_cluster, tmp_path):
    if not (PREFIX / "bin" / "python").exists():
        pytest.skip(f"no python in the prefix {PREFIX}")
    rundir = tmp_path / "run"
    baseline = (
        tmp_path / "baseline.json"
    )  # CPU figures live under "host"; a low bar this machine clears
    baseline.write_text(
        json.dumps(
            {
                "format": "gpuenv-validate-baseline/1",
                "models": {"host": {"cnn training samples/s (cpu)": 1.0}},
            }
        )
    )
    proc = invoke_slurm(
        slurm_cluster,
        tmp_path,
        "--nodes",
        "1",
        "--prefix",
        str(PREFIX),
        "--time",
        "10",
        "--expect-gpus",
        "0",
        "--quick",
        "--rundir",
        str(rundir),
        "--baseline",
        str(baseline),
        "--json",
        "fleet.json",
        "--junit",
        "fleet.xml",
        "--report",
        "fleet.html",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (
        "job " in proc.stdout and "running" in proc.stdout and "completed" in proc.stdout
    )  # progress lines
    data = json.loads((tmp_path / "fleet.json").read_text())
    node = data["hosts"][slurm_cluster.node]
    assert (
        node["status"] == READY
        and node["details"]["runner"] == "prefix"
        and node["details"]["job_state"] == "COMPLETED"
    )
    checks = {c["check"]: c for c in node["host"]["checks"]}
    assert checks["torch version"]["verdict"] == "info" and checks["torch version"][
        "measured"
    ].endswith("+cpu")
    assert checks["cnn training loss (cpu, bfloat16 autocast)"]["verdict"] == "pass"
    speed = checks["cnn training samples/s (cpu)"]
    assert (
        speed["verdict"] == "pass" and speed["threshold"] == ">= 0.85 x baseline 1"
    )  # the node read the baseline
    assert (
        node["figures"]["cnn training samples/s (cpu)"]["reference"] == "baseline"
    )  # and so did the fleet report
    assert (rundir / "nodes" / slurm_cluster.node / "report.json").is_file()
    assert (
        "<testsuite " in (tmp_path / "fleet.xml").read_text()
        and (tmp_path / "fleet.html").stat().st_size > 1000
    )
    assert "1 of 1 host(s) ready" in proc.stdout


def test_node_with_docker_runs_the_suite_in_the_image(slurm_cluster, suite_image, tmp_path):
    """Given both --image and --prefix, a node whose Docker answers uses the image."""
    outcomes = run_job(
        SlurmJob(
            rundir=str(tmp_path / "run"),
            nodes=1,
            image=suite_image,
            prefix="/nonexistent/prefix",
            gpus="none",
            suite_args=["--expect-gpus", "0", "--quick"],
            time="10",
        ),
        poll_s=0.5,
    )
    [node] = outcomes
    assert node.host == slurm_cluster.node and node.details["runner"] == "docker"
    assert node.status == READY, node.reason
    reasons = [c["reason"] for c in node.report["host"]["checks"] if c["check"] == "torch build"]
    assert reasons and "PyTorch is not installed" in reasons[0]  # the image's suite, not the venv's


def test_a_job_past_its_time_limit_says_timeout_per_node(slurm_cluster, tmp_path):
    """A node that hangs (its python never returns, as on a wedged GPU) until --time 0:05 runs
    out."""
    hung = tmp_path / "hung-prefix"
    (hung / "bin").mkdir(parents=True)
    (hung / "bin" / "python").write_text("#!/bin/sh\nexec sleep 600\n")
    (hung / "bin" / "python").chmod(0o755)
    events = []
    started = time.monotonic()
    [node] = run_job(
        SlurmJob(rundir=str(tmp_path / "run"), nodes=1, prefix=str(hung), time="0:05"),
        progress=lambda *e: events.append(e),
        poll_s=1,
    )
    assert node.host == slurm_cluster.node and node.status == TIMEOUT
    assert "time limit (--time 0:05)" in node.reason and node.details["job_state"] == "TIMEOUT"
    job_events = [(phase, detail) for who, phase, detail in events if who.startswith("job ")]
    node_events = [(phase, detail) for who, phase, detail in events if who == slurm_cluster.node]
    assert ("running", "0/1 node(s) done") in [
        (p, d.split(",")[0]) for p, d in job_events
    ] and job_events[-1][0] == "timeout"
    # a node is "queued" until its started file appears (under load the first poll can come first),
    # then "running", and it ends in a timeout
    phases = [phase for phase, _ in node_events]
    assert next(p for p in phases if p != "queued") == "running", phases
    assert node_events[-1] == ("done", TIMEOUT)
    print(f"timeout noticed after {time.monotonic() - started:.0f}s")


@pytest.mark.parametrize(
    "sig, code, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_an_interrupt_cancels_the_job(slurm_cluster, tmp_path, sig, code, name):
    rundir = tmp_path / "run"
    proc = invoke_slurm(
        slurm_cluster,
        tmp_path,
        "--nodes",
        "1",
        "--prefix",
        str(PREFIX),
        "--expect-gpus",
        "0",
        "--rundir",
        str(rundir),
        background=True,
    )
    started = rundir / "nodes" / slurm_cluster.node / "started"
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert started.exists(), "the node never started the suite"
    sent = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    print(f"{name} to exit (Slurm): {time.monotonic() - sent:.1f}s")
    assert proc.returncode == code, out[-2000:] + err[-2000:]
    assert "Traceback" not in err and "nothing half-written" not in err
    job_id = next(p.name.split("-")[1].split(".")[0] for p in rundir.glob("slurm-*.out"))
    assert err.strip().splitlines()[-1] == (
        f"gpuenv: interrupted ({name}): cancelled job {job_id} (scancel); the run folder {rundir} "
        "keeps what the nodes wrote; no fleet report was written"
    )
    for _ in range(50):
        state = job_state(slurm_cluster, job_id)
        if state and state.final:
            break
        time.sleep(0.2)
    assert state.state == "CANCELLED"
    assert not (
        rundir / "nodes" / slurm_cluster.node / "exit"
    ).exists()  # the suite was stopped, not finished


def test_a_node_that_cannot_run_the_suite_fails_with_why(slurm_cluster, tmp_path):
    """No Docker image given and the prefix is not on this node: the job fails, the node says
    why."""
    [node] = run_job(
        SlurmJob(
            rundir=str(tmp_path / "run"),
            nodes=1,
            prefix=str(tmp_path / "not-shared-prefix"),
            time="5",
        ),
        poll_s=0.5,
    )
    assert node.host == slurm_cluster.node and node.status == FAILED
    assert node.details["job_state"] == "FAILED" and node.exit_code == 127
    assert f"no {tmp_path / 'not-shared-prefix'}/bin/python" in node.reason


def test_a_job_cancelled_by_someone_else_says_so_per_node(slurm_cluster, tmp_path):
    """scancel from outside while the real suite runs: the node is reported cancelled."""
    job_ids = []

    def progress(who, phase, detail):
        if who.startswith("job ") and not job_ids:
            job_ids.append(who.split()[1])
        if who == slurm_cluster.node and phase == "running":
            subprocess.run(["scancel", job_ids[0]], check=True)

    [node] = run_job(
        SlurmJob(
            rundir=str(tmp_path / "run"),
            nodes=1,
            prefix=str(PREFIX),
            suite_args=["--expect-gpus", "0"],
        ),
        progress=progress,
        poll_s=0.5,
    )
    assert node.status == CANCELLED and "was cancelled while this node's suite ran" in node.reason


def test_slurm_daemons_listen_on_loopback_only(slurm_cluster):
    """slurmctld and slurmd bind 127.0.0.1 (CommunicationParameters in tests/fleet/servers.py), as
    `ss` sees them."""
    import servers

    daemons = slurm_cluster.pids[1:]  # munged talks over a unix socket only
    assert len(daemons) == 2
    for pid in daemons:
        addresses = servers.listening_addresses(pid)
        assert addresses and all(a.startswith("127.0.0.1:") for a in addresses), (pid, addresses)


def test_a_job_that_can_never_start_fails_at_once_with_the_reason(slurm_cluster, tmp_path):
    """--nodes 2 on a one-node partition: Slurm keeps it pending (PartitionNodeLimit) forever;
    gpuenv cancels it at once and says why."""
    events = []
    started = time.monotonic()
    [outcome] = run_job(
        SlurmJob(rundir=str(tmp_path / "run"), nodes=2, prefix=str(PREFIX), time="5"),
        progress=lambda *e: events.append(e),
        poll_s=0.5,
    )
    seconds = time.monotonic() - started
    assert outcome.status == FAILED, outcome.reason
    assert (
        "can never start as asked (PartitionNodeLimit" in outcome.reason
        and "ask for fewer nodes" in outcome.reason
    )
    assert "cancelled it" in outcome.reason
    assert seconds < 30, seconds
    job_id = outcome.details["job_id"]
    state = job_state(slurm_cluster, job_id)
    assert state is not None and state.state == "CANCELLED"
    assert not any("None" in detail for _, _, detail in events), events  # never "pending: None"


def test_a_job_pending_past_queue_time_is_cancelled(slurm_cluster, tmp_path):
    """A job that may start only in an hour (--begin) waits for a reason that can clear; the
    queue-time limit (3 s here) cancels it."""
    started = time.monotonic()
    [outcome] = run_job(
        SlurmJob(
            rundir=str(tmp_path / "run"),
            nodes=1,
            prefix=str(PREFIX),
            time="5",
            queue_time="0:03",
            extra_sbatch=["--begin=now+1hour"],
        ),
        poll_s=0.5,
    )
    seconds = time.monotonic() - started
    assert outcome.status == TIMEOUT, outcome.reason
    assert (
        "past --queue-time 0:03" in outcome.reason
        and "BeginTime" in outcome.reason
        and "cancelled it" in outcome.reason
    )
    assert seconds < 3 + 20, seconds
    state = job_state(slurm_cluster, outcome.details["job_id"])
    assert state is not None and state.state == "CANCELLED"


def test_a_job_for_a_down_node_fails_at_once(slurm_cluster, tmp_path):
    """ReqNodeNotAvail for a node that is down cannot clear by waiting: cancelled at once, the node
    named."""
    env = {**os.environ, **slurm_cluster.env}
    node = slurm_cluster.node
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", "state=down", "reason=gpuenv-test"],
        env=env,
        check=True,
    )
    try:
        started = time.monotonic()
        [outcome] = run_job(
            SlurmJob(rundir=str(tmp_path / "run"), nodelist=node, prefix=str(PREFIX), time="5"),
            poll_s=0.5,
        )
        assert outcome.status == FAILED, outcome.reason
        assert (
            f"ReqNodeNotAvail: the node(s) it needs are down or drained: {node} (down"
            in outcome.reason
        )
        assert time.monotonic() - started < 30
    finally:
        subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=resume"], env=env, check=True
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = subprocess.run(
                ["sinfo", "--noheader", "--nodes", node, "--format=%T"],
                env=env,
                capture_output=True,
                text=True,
            ).stdout.strip()
            if state in ("idle", "mixed", "allocated"):
                break
            time.sleep(0.3)
