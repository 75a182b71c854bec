"""The session-end check (tests/leftovers.py) can fail: a container a test deliberately leaves is
found, named with its module, reported as an error that fails the run, and removed; a gpuenv
container that mounts a folder outside the session's basetemp (another user's) is never counted."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import leftovers
import pytest
from dockercases import containers_labelled

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("GPUENV_TEST_BASE_IMAGE", "gpuenv-test-base:bookworm")
LABEL = "io.gpuenv.test-leftover"


@pytest.fixture
def base(docker_engine) -> str:
    from gpuenv.engine import Engine

    if Engine.local().image_info(IMAGE) is None:
        pytest.skip(f"{IMAGE} is missing: scripts/setup.sh makes it (its images step)")
    return IMAGE


def _remove_labelled(value: str) -> None:
    from dockercases import _client

    for cid in containers_labelled(LABEL, value):
        _client().api.remove_container(cid, force=True)


def test_a_container_left_behind_is_found_and_another_users_is_not(base, tmp_path, request):
    from dockercases import _client

    api = _client().api
    run = uuid.uuid4().hex
    since = time.time()
    elsewhere = Path(tempfile.mkdtemp(prefix="another-user-"))  # not under this session's basetemp
    try:
        ours = api.create_container(
            base,
            ["true"],
            labels={LABEL: run},
            host_config=api.create_host_config(binds=[f"{tmp_path}:/workspace"]),
        )["Id"]
        theirs = api.create_container(
            base,
            ["true"],
            labels={LABEL: run},
            host_config=api.create_host_config(binds=[f"{elsewhere}:/workspace"]),
        )["Id"]
        roots = [request.config._tmp_path_factory.getbasetemp()]
        windows = [(since - 1, time.time() + 1, "tests/test_leftover_containers.py")]
        found = [
            c for c in leftovers.find_leftovers(since, roots, windows) if c.id in (ours, theirs)
        ]
        assert [c.id for c in found] == [ours], (
            "only the container that mounts this session's folder is this session's"
        )
        assert (
            found[0].status == "created" and found[0].module == "tests/test_leftover_containers.py"
        )
        text = leftovers.describe(found)
        assert (
            f"{ours[:12]} " in text
            and "made during tests/test_leftover_containers.py" in text
            and theirs[:12] not in text
        )
        leftovers.remove(found)
        assert ours not in [c.id for c in leftovers.find_leftovers(since, roots)]
        assert containers_labelled(LABEL, run) == [theirs], (
            "the other user's container is left alone"
        )
    finally:
        _remove_labelled(run)
        os.rmdir(elsewhere)


LEAVES_ONE = """
from dockercases import _client


def test_leaves_a_container(tmp_path):
    api = _client().api
    api.create_container("{image}", ["true"], labels={{"{label}": "{run}"}},
                         host_config=api.create_host_config(binds=[f"{{tmp_path}}:/workspace"]))
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "two-workers"])
def test_a_session_that_leaves_a_container_fails_naming_it_and_its_module(base, tmp_path, workers):
    """A real pytest session (`-p leftovers`, as tests/conftest.py loads it) whose one test passes
    but leaves a container: the run fails with the error, and the container is gone. With two
    pytest-xdist workers (the test command's), the controller finds what a worker left."""
    run = uuid.uuid4().hex
    folder = tmp_path / "inner"
    folder.mkdir()
    (folder / "test_leaves.py").write_text(LEAVES_ONE.format(image=base, label=LABEL, run=run))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "leftovers",
                *workers,
                "test_leaves.py",
            ],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 1, out
        assert "1 passed, 1 error" in out, out
        assert "container(s) made by this test session were left behind (now removed)" in out, out
        assert "made during test_leaves.py" in out and f"image {base}" in out, out
        assert containers_labelled(LABEL, run) == [], "the check removed what it reported"
    finally:
        _remove_labelled(run)
