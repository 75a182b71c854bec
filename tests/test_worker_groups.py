"""The test command's two workers (tests/workergroups.py): every test that uses the shared Docker
engine, SSH, Slurm, a registry or Chromium is in the one group that a single worker runs in
order, the rest go by module, and a real two-worker session keeps to that."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import workergroups

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("nodeid", "unit"),
    [
        ("tests/fleet/test_fleet_slurm.py::test_cancel[2-130]", "engine"),
        ("tests/compat/test_resolve.py::test_rule[a@b]", "tests/compat/test_resolve.py"),
        ("tests/validate/test_x.py::TestCase::test_y", "tests/validate/test_x.py"),
    ],
)
def test_a_test_of_the_group_goes_with_it_and_any_other_with_its_module(nodeid, unit):
    group = {"tests/fleet/test_fleet_slurm.py::test_cancel[2-130]"}
    assert workergroups.unit_of(nodeid, group) == unit


#: Modules of the real suite whose every test uses a shared server, and modules that use none.
ALL_ENGINE = (
    "tests/fleet/test_fleet_slurm.py",  # the Slurm test cluster
    "tests/fleet/test_fleet_ssh.py",  # sshd in front of the engine (marked docker)
    "tests/fleet/test_fleet_html_browser.py",  # headless Chromium, started by the tests
    "tests/team/test_registry.py",  # the registry
    "tests/test_leftover_containers.py",  # containers on the engine
)
NO_ENGINE = ("tests/compat/test_resolve.py", "tests/validate/test_validate_replay.py")


def collected(*args: str, cwd: Path = ROOT) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_real_suites_server_tests_carry_the_engine_mark_and_no_other():
    """`-m engine` selects what the group holds: every test of the server modules, none of the
    others."""
    both = collected(*ALL_ENGINE, *NO_ENGINE)
    engine = set(collected("-m", workergroups.ENGINE_GROUP, *ALL_ENGINE, *NO_ENGINE))
    for module in ALL_ENGINE + NO_ENGINE:
        mine = {nodeid for nodeid in both if nodeid.startswith(module + "::")}
        assert mine, f"nothing collected from {module}"
        want = mine if module in ALL_ENGINE else set()
        assert mine & engine == want, (module, sorted(mine ^ want)[:5])


INNER_CONFTEST = """
import pytest
from workergroups import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_configure_node,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)


@pytest.fixture(scope="session")
def docker_engine():
    return "the name is what puts a test in the group"
"""

INNER_ENGINE = """
import os
import time

import pytest


def record(nodeid):
    with open({log!r}, "a") as log:
        log.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{nodeid}}\\n")


def test_{name}_a(docker_engine, request):
    record(request.node.nodeid)
    time.sleep(0.2)


@pytest.mark.docker
def test_{name}_b(request):
    record(request.node.nodeid)
    time.sleep(0.2)


def test_{name}_cpu(request):
    record(request.node.nodeid)
"""

INNER_CPU = """
import os

import pytest


@pytest.fixture(scope="module")
def shared():
    with open({log!r}, "a") as log:
        log.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} module fixture\\n")


@pytest.mark.parametrize("n", range({count}))
def test_cpu(shared, n, request):
    with open({log!r}, "a") as log:
        log.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{request.node.nodeid}}\\n")
"""


def test_two_workers_run_the_engine_group_on_one_in_order_and_a_module_once(tmp_path):
    """A real `-n 2 --dist loadscope` session: the engine tests (by fixture, and by the docker
    mark) of two modules run on one worker in collection order, the other tests go by module,
    so a module-scoped fixture runs once, and both workers work."""
    folder, log = tmp_path / "inner", tmp_path / "log.txt"
    folder.mkdir()
    (folder / "conftest.py").write_text(INNER_CONFTEST)
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    docker: the engine\n")
    for name in ("one", "two"):
        (folder / f"test_engine_{name}.py").write_text(INNER_ENGINE.format(log=str(log), name=name))
    for name, count in (("big", 12), ("small", 3)):
        (folder / f"test_cpu_{name}.py").write_text(INNER_CPU.format(log=str(log), count=count))
    path = [str(ROOT / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2"]
        + ["--dist", "loadscope"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "21 passed" in done.stdout, done.stdout[-2000:]
    lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
    engine = [(worker, test) for worker, test in lines if "test_engine_" in test]
    grouped = [test for _, test in engine if not test.endswith("_cpu")]
    assert grouped == [
        f"test_engine_{name}.py::test_{name}_{x}" for name in ("one", "two") for x in "ab"
    ]
    assert len({worker for worker, test in engine if test in grouped}) == 1, engine
    for module in ("test_cpu_big.py", "test_cpu_small.py"):
        ran = {worker for worker, test in lines if test.startswith(module)}
        assert len(ran) == 1, (module, ran)
    assert sum(test == "module fixture" for _, test in lines) == 2, "once per module"
    assert len({worker for worker, _ in lines}) == 2, "both workers worked"


SIGHUP_PROBE = """
import signal


def test_sighup_is_handled_not_default():
    assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, signal.SIG_IGN)
"""


def test_the_workers_of_a_run_under_nohup_outlive_a_closed_terminal_too(tmp_path):
    """A run started under nohup (SIGHUP ignored): tests/conftest.py, loaded as the test command
    loads it, swaps the ignore for a handler in the controller, and each xdist worker, started
    afterwards with SIGHUP at its default, gets the same handler rather than dying on a hang-up."""
    import signal

    (tmp_path / "test_probe.py").write_text(SIGHUP_PROBE)
    path = [str(ROOT / "tests"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {k: v for k, v in os.environ.items() if k != "GPUENV_TEST_NOHUP"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest"]
        + ["-n", "2", "test_probe.py"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": os.pathsep.join(path)},
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # as nohup starts it
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]
