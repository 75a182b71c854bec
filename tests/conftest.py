"""Shared test helpers: run the real `invoke` in a subprocess, from the repository root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from condachannel import build as condachannel
from dockercases import BASE_IMAGE

# The session-end check that no test left a container behind (tests/leftovers.py): hooks, taken in
# here.
from leftovers import pytest_runtest_logreport, pytest_sessionfinish, pytest_sessionstart  # noqa: F401
from outsidecauses import skip_only_if_unreachable

# Which tests share a worker under the test command's `-n 2 --dist loadscope`
# (tests/workergroups.py): hooks, taken in here.
from workergroups import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_configure_node,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)

ROOT = Path(__file__).resolve().parent.parent

# A run started under nohup inherits SIGHUP ignored, and an ignored signal stays ignored across
# exec: every child (a task, a suite run) would then ignore the SIGHUP its test sends and wait it
# out. A Python handler is reset to the default across exec, so children start as from a terminal,
# while this process still outlives a closed terminal, as nohup asked.
# The test command's xdist workers start after this ran, with SIGHUP at its default again: the
# variable carries "started under nohup" to them, so a closed terminal ends none of them either.
NOHUP = "GPUENV_TEST_NOHUP"
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN or os.environ.get(NOHUP) == "1":
    os.environ[NOHUP] = "1"
    signal.signal(signal.SIGHUP, lambda _signum, _frame: None)
# Likewise a run started as a background job of a non-interactive shell (`cmd &` in a script)
# inherits SIGINT ignored: a task under test would then ignore the Ctrl-C its test sends and
# never cancel what it started. Python's own Ctrl-C handler here, the default in children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
INVOKE = [sys.executable, "-m", "invoke"]


def run_invoke(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run `invoke ARGS` as a user would, capturing output (never through the shell)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*INVOKE, "--search-root", str(ROOT), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def invoke_cli():
    return run_invoke


@pytest.fixture(scope="session")
def docker_engine():
    """The engine gpuenv talks to; skips the Docker tests with the engine's own reason when down."""
    from gpuenv.engine import Engine
    from gpuenv.errors import ToolError

    try:
        return Engine.local().client
    except ToolError as err:
        pytest.skip(f"no Docker engine: {err.render()}")


@pytest.fixture(scope="session")
def base_image(docker_engine) -> str:
    """The local base image (debootstrapped bookworm, Python 3.11), made once and kept by name."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    if engine.image_info(BASE_IMAGE) is None:
        proc = subprocess.run(
            [str(ROOT / "scripts" / "make-test-base-image.sh"), BASE_IMAGE],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            skip_only_if_unreachable(
                f"making the base image {BASE_IMAGE}", proc.stderr + proc.stdout
            )
    return BASE_IMAGE


@pytest.fixture(scope="session")
def cpu_stack():
    """The CPU stack the image, registry and install tests build: torch 2.13.0+cpu (the wheel on
    disk), Python 3.11."""
    from gpuenv.compat.resolve import resolve_stack
    from gpuenv.compat.rules.request import Request

    return resolve_stack(Request(cuda="cpu", framework="torch", torch="2.13.0", python="3.11"))


@pytest.fixture(scope="session")
def conda_channel() -> Path:
    """The real local conda channel (tests/condachannel): built with py-rattler-build from its
    recipes on first use, then reused by their hash (GPUENV_TEST_CACHE, else
    ~/.cache/gpuenv-tests)."""
    problem = condachannel.tools_problem()
    if problem:
        promised, why = problem
        if promised:  # a machine scripts/setup.sh set up: a missing tool fails, it never skips
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return condachannel.build_channel()


@pytest.fixture
def conda_channel_http(conda_channel):
    """The test channel served over http on 127.0.0.1 (tests/condachannel/build.py: served), stopped
    after the test."""
    with condachannel.served(conda_channel) as url:
        yield url


@pytest.fixture(scope="session")
def standin_wheels(tmp_path_factory) -> Path:
    """A wheelhouse with STAND-IN torch 2.13.0+cpu and 2.5.1+cu121 wheels
    (tests/condachannel/build.py: standin_wheel)."""
    folder = tmp_path_factory.mktemp("standin-wheels")
    condachannel.standin_wheel(folder, "torch", "2.13.0+cpu")
    condachannel.standin_wheel(folder, "torch", "2.5.1+cu121")
    return folder


@pytest.fixture(scope="session")
def standin_wheels_both_arches(tmp_path_factory) -> Path:
    """A wheelhouse with STAND-IN torch 2.13.0+cpu wheels for x86_64 and aarch64: what an aarch64
    lock must tell apart."""
    folder = tmp_path_factory.mktemp("standin-wheels-both-arches")
    for arch in ("x86_64", "aarch64"):
        condachannel.standin_wheel(folder, "torch", "2.13.0+cpu", arch=arch)
    return folder
