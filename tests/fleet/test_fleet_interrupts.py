"""Ctrl-C and SIGTERM stop a fleet run (issue 21, item 1): within seconds, every container the
run started removed, no new one started, exit 130 or 143, one line that says what was cleaned
up, and a second Ctrl-C is no traceback. Signals are sent to a real `invoke validate` at chosen
moments: while a pull stalls (a registry on loopback that stops mid-layer) and while the suite
runs (an image whose `python` hangs)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import dockercases
import pytest
import servers
from dockercases import BASE_IMAGE
from servers import Run

ROOT = Path(__file__).resolve().parents[2]
HANGING = "gpuenv-fleet-hanging-interrupt"

pytestmark = pytest.mark.docker


def fleet_containers(docker_engine) -> list[str]:
    """This session's fleet containers (never another run's on a shared engine)."""
    return dockercases.session_containers("io.gpuenv.fleet")


@pytest.fixture
def hanging_image(docker_engine):
    """An image whose `python` sleeps: a suite that never finishes, as on a wedged GPU."""
    with servers.hanging_suite_image(BASE_IMAGE, HANGING, 600) as tag:
        yield tag


def test_sigterm_during_a_stalled_pull(ssh_server, tmp_path, docker_engine):
    with servers.stalling_registry() as registry:
        run = Run(
            [
                "--hosts",
                ssh_server.url,
                "--image",
                registry.reference,
                "--gpus",
                "none",
                "--json",
                "fleet.json",
            ],
            ssh_server.home,
            tmp_path,
        )
        run.wait_for("pulling")
        time.sleep(1)  # well into the stalled layer
        code, seconds = run.stop(signal.SIGTERM)
    err = "".join(run.err)
    print(f"SIGTERM during a stalled pull: exit after {seconds:.1f}s")
    assert code == 143, err[-2000:]
    assert seconds < 10, seconds
    assert "Traceback" not in err and "nothing half-written" not in err
    assert err.strip().splitlines()[-1] == (
        "gpuenv: interrupted (SIGTERM): no suite container was running; no fleet report was written"
    )
    assert not (tmp_path / "fleet.json").exists()
    assert fleet_containers(docker_engine) == []


def test_ctrl_c_twice_during_the_suite_removes_it_and_starts_nothing_more(
    ssh_server, tmp_path, docker_engine, hanging_image
):
    """Two entries for the server, one at a time: Ctrl-C while the first runs its suite, a second
    Ctrl-C 0.3 s later. The first container goes, the second host never starts one."""
    # the same server under another name: another host entry
    second = f"ssh://127.0.0.1:{ssh_server.port}"
    run = Run(
        [
            "--hosts",
            f"{ssh_server.url},{second}",
            "--image",
            hanging_image,
            "--gpus",
            "none",
            "--parallel",
            "1",
        ],
        ssh_server.home,
        tmp_path,
    )
    run.wait_for("running: the suite")
    assert len(fleet_containers(docker_engine)) == 1
    code, seconds = run.stop(signal.SIGINT, signal.SIGINT)
    err, out = "".join(run.err), "".join(run.out)
    print(f"Ctrl-C twice during the suite: exit after {seconds:.1f}s")
    assert code == 130, err[-2000:]
    assert seconds < 15, seconds
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert (
        "gpuenv: interrupted (Ctrl-C): removed 1 suite container(s); no fleet report was written"
        in err
    )
    assert not any(second in line and "running" in line for line in out.splitlines()), out
    assert fleet_containers(docker_engine) == []
