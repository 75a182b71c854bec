"""The test command's two workers (tests/workergroups.py): every test that uses the shared Docker
engine, SSH or a registry is in the `engine` unit that a single worker runs in order, the Slurm
tests without Docker and the Chromium tests in the `engine-slurm` unit that the other worker runs
beside it, the rest go by module, and a real two-worker session keeps to that."""

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
        ("tests/fleet/test_fleet_slurm.py::test_cancel[2-130]", "engine-slurm"),
        ("tests/fleet/test_fleet_slurm.py::test_in_an_image", "engine"),
        ("tests/compat/test_resolve.py::test_rule[a@b]", "tests/compat/test_resolve.py"),
        ("tests/validate/test_x.py::TestCase::test_y", "tests/validate/test_x.py"),
    ],
)
def test_a_test_of_an_engine_unit_goes_with_it_and_any_other_with_its_module(nodeid, unit):
    group = {
        "tests/fleet/test_fleet_slurm.py::test_cancel[2-130]": "engine-slurm",
        "tests/fleet/test_fleet_slurm.py::test_in_an_image": "engine",
    }
    assert workergroups.unit_of(nodeid, group) == unit


def test_the_units_written_by_a_worker_are_read_back_whole_parameters_with_spaces_too(tmp_path):
    (tmp_path / "gw0").write_text(
        "engine tests/a.py::test_x[one, two]\nengine-slurm tests/b.py::t\n"
    )
    (tmp_path / "gw1.partial").write_text("engine tests/half.py::t\n")  # still being written
    assert workergroups.read_group(tmp_path) == {
        "tests/a.py::test_x[one, two]": "engine",
        "tests/b.py::t": "engine-slurm",
    }


#: Modules of the real suite whose every test uses a shared server, and modules that use none.
ALL_ENGINE = (
    "tests/fleet/test_fleet_slurm.py",  # the Slurm test cluster
    "tests/fleet/test_fleet_ssh.py",  # sshd in front of the engine (marked docker)
    "tests/fleet/test_fleet_html_browser.py",  # headless Chromium, started by the tests
    "tests/team/test_registry.py",  # the registry
    "tests/test_leftover_containers.py",  # containers on the engine
)
NO_ENGINE = ("tests/compat/test_resolve.py", "tests/validate/test_validate_replay.py")
#: Engine tests of the real suite and their unit: the Slurm ones that use no Docker and the
#: Chromium ones beside the Docker ones, a Slurm node that runs the suite in an image with them.
UNITS = {
    "tests/fleet/test_fleet_slurm.py::test_a_job_past_its_time_limit_says_timeout_per_node": (
        "engine-slurm"
    ),
    "tests/fleet/test_fleet_slurm.py::test_cpu_suite_through_sbatch_from_a_prefix": "engine-slurm",
    "tests/fleet/test_fleet_multinode.py::test_two_slurm_nodes_run_their_suites_then_one_job_"
    "across_them": "engine-slurm",
    "tests/fleet/test_fleet_html_browser.py::test_fleet_page_renders_in_chromium": "engine-slurm",
    "tests/fleet/test_fleet_slurm.py::test_node_with_docker_runs_the_suite_in_the_image": "engine",
    "tests/fleet/test_fleet_ssh.py::test_only_this_sessions_fleet_containers_are_counted": "engine",
    "tests/team/test_registry.py::test_push_then_pull_by_digest_then_run_and_validate": "engine",
}


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


def inner_pytest(args: list[str], cwd: Path, first_on_path: Path) -> subprocess.CompletedProcess:
    """`python -m pytest -q ARGS` in a process of its own (no cache folder left), `first_on_path`
    ahead of this run's PYTHONPATH (the plugin or helpers it loads by name)."""
    path = [str(first_on_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=300,
    )


UNIT_PRINTER = """
import workergroups


def pytest_collection_finish(session):
    for item in session.items:
        print("UNIT", workergroups.engine_unit(item), item.nodeid)
"""


def test_the_real_suites_slurm_and_chromium_tests_are_a_unit_beside_the_docker_ones(tmp_path):
    """A Slurm test that uses no Docker, and a Chromium test, are in `engine-slurm`; a Slurm test
    that runs the suite in an image, and every Docker, SSH and registry test, in `engine`."""
    (tmp_path / "unitprinter.py").write_text(UNIT_PRINTER)
    done = inner_pytest(
        ["--collect-only", "-p", "unitprinter", *sorted({n.split("::")[0] for n in UNITS})],
        cwd=ROOT,
        first_on_path=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    units = {
        nodeid: unit
        for _, unit, nodeid in (
            line.split(" ", 2) for line in done.stdout.splitlines() if line.startswith("UNIT ")
        )
    }
    assert {nodeid: units.get(nodeid) for nodeid in UNITS} == UNITS
    slurm = [nodeid for nodeid, unit in units.items() if unit == "engine-slurm"]
    assert all("slurm" in n or "multinode" in n or "html_browser" in n for n in slurm), slurm


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


@pytest.fixture(scope="module")
def slurm_cluster():
    return "the name is what puts a test in the Slurm unit"
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

INNER_SLURM = """
import os
import time


def record(nodeid):
    with open({log!r}, "a") as log:
        log.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{nodeid}}\\n")


def test_slurm_a(slurm_cluster, request):
    record(request.node.nodeid)
    time.sleep(0.2)


def test_slurm_in_an_image(slurm_cluster, docker_engine, request):
    record(request.node.nodeid)
    time.sleep(0.2)


def test_slurm_b(slurm_cluster, request):
    record(request.node.nodeid)
    time.sleep(0.2)
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


def test_two_workers_run_each_engine_unit_on_one_in_order_and_a_module_once(tmp_path):
    """A real `-n 2 --dist loadscope` session: the engine tests (by fixture, and by the docker
    mark) of three modules run on one worker in collection order, the Slurm tests without Docker
    on the other, both from the start, the other tests go by module, so a module-scoped fixture
    runs once, and both workers work."""
    folder, log = tmp_path / "inner", tmp_path / "log.txt"
    folder.mkdir()
    (folder / "conftest.py").write_text(INNER_CONFTEST)
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    docker: the engine\n")
    for name in ("one", "two"):
        (folder / f"test_engine_{name}.py").write_text(INNER_ENGINE.format(log=str(log), name=name))
    (folder / "test_engine_slurm.py").write_text(INNER_SLURM.format(log=str(log)))
    for name, count in (("big", 12), ("small", 3)):
        (folder / f"test_cpu_{name}.py").write_text(INNER_CPU.format(log=str(log), count=count))
    done = inner_pytest(
        ["-n", "2", "--dist", "loadscope"], cwd=folder, first_on_path=ROOT / "tests"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "24 passed" in done.stdout, done.stdout[-2000:]
    lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
    engine = [(worker, test) for worker, test in lines if "test_engine_" in test]
    grouped = [test for _, test in engine if test.endswith(("_a", "_b", "_in_an_image"))]
    docker = [test for test in grouped if "slurm_a" not in test and "slurm_b" not in test]
    slurm = [test for test in grouped if test not in docker]
    assert docker == [  # in collection order
        "test_engine_one.py::test_one_a",
        "test_engine_one.py::test_one_b",
        "test_engine_slurm.py::test_slurm_in_an_image",
        "test_engine_two.py::test_two_a",
        "test_engine_two.py::test_two_b",
    ]
    assert slurm == ["test_engine_slurm.py::test_slurm_a", "test_engine_slurm.py::test_slurm_b"]
    docker_workers = {worker for worker, test in engine if test in docker}
    slurm_workers = {worker for worker, test in engine if test in slurm}
    assert len(docker_workers) == 1 and len(slurm_workers) == 1, engine
    assert docker_workers != slurm_workers, "both units are handed out first, one to each worker"
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
