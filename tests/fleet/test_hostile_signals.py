"""SIGHUP (the operator's SSH session drops) ends a run as Ctrl-C does: the cleanups run (the suite
container on the remote host is removed), one line says so, and the exit status is 129, as
shells report it. A signal the program was started ignoring (nohup) stays ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hangbound import HANG_BOUND_S
from invoke.exceptions import Exit

from gpuenv.cli.task import Terminated, terminate_as_interrupt, user_errors

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "signum, name, code", [(signal.SIGHUP, "SIGHUP", 129), (signal.SIGTERM, "SIGTERM", 143)]
)
def test_a_task_ends_cleanly_on_sighup_as_on_sigterm(signum, name, code):
    cleaned: list[str] = []

    # The handler before the task: a Python one, whatever the run inherited (under nohup SIGHUP
    # arrives ignored, and a task rightly leaves an ignored signal ignored: test_nohup_stays_nohup).
    # It swallows the signal, so a task that installs no handler fails below instead of ending
    # pytest.
    def before(_signum: int, _frame: object) -> None:
        return None

    previous = signal.signal(signum, before)

    @user_errors
    def task() -> None:
        try:
            os.kill(os.getpid(), signum)
            time.sleep(HANG_BOUND_S)  # cut short: the task's handler raises
        finally:
            cleaned.append("cleanup ran")

    try:
        with pytest.raises(Exit) as ended:
            task()
        assert signal.getsignal(signum) is before, "the previous handler is back"
    finally:
        signal.signal(signum, previous)
    assert (
        ended.value.code == code
        and ended.value.message == f"gpuenv: terminated ({name}); nothing half-written was left"
    )
    assert cleaned == ["cleanup ran"]


def test_nohup_stays_nohup():
    """Under nohup SIGHUP is ignored: a task must not revive it."""
    child = textwrap.dedent("""
        import os, signal, time
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        from gpuenv.cli.task import terminate_as_interrupt
        with terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.2)
            print("still running")
    """)
    done = subprocess.run(
        [sys.executable, "-c", child],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "still running", done.stderr


def test_terminated_names_its_signal():
    assert (Terminated(signal.SIGHUP).signal_name, Terminated(signal.SIGHUP).exit_code) == (
        "SIGHUP",
        129,
    )
    assert (Terminated().signal_name, Terminated().exit_code) == ("SIGTERM", 143)
    with terminate_as_interrupt():
        assert signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL


@pytest.mark.docker
def test_sighup_during_the_suite_removes_the_remote_container(
    ssh_server, tmp_path, docker_engine, hanging_image
):
    from servers import Run

    def ours() -> list[
        str
    ]:  # the shared engine runs other developers' fleet tests too: count this image's only
        return [
            c.id
            for c in docker_engine.containers.list(
                all=True, filters={"label": "io.gpuenv.fleet", "ancestor": hanging_image}
            )
        ]

    run = Run(
        ["--hosts", ssh_server.url, "--image", hanging_image, "--gpus", "none"],
        ssh_server.home,
        tmp_path,
    )
    try:
        run.wait_for("running: the suite")
        assert len(ours()) == 1
        code, seconds = run.stop(signal.SIGHUP)
    finally:
        if (
            run.proc.poll() is None
        ):  # a failed assertion must not leave the run (and its container) behind
            run.stop(signal.SIGINT)
    err = "".join(run.err)
    assert code == 129, err[-2000:]
    assert seconds < 15, seconds
    assert "Traceback" not in err
    assert (
        "gpuenv: interrupted (SIGHUP): removed 1 suite container(s); no fleet report was written"
        in err
    )
    assert ours() == []


@pytest.fixture
def hanging_image(docker_engine):
    import servers
    from dockercases import BASE_IMAGE

    # 599 s, not the 600 of test_fleet_interrupts: an image of its own, so its containers are told
    # apart
    with servers.hanging_suite_image(BASE_IMAGE, "gpuenv-fleet-hanging-sighup", 599) as tag:
        yield tag
