"""The fixtures of the image, team and fleet tests skip only when something outside gpuenv is
unreachable.

A broken lock, a lock with a wrong hash, a failing base-image script or a missing local base image
must fail the tests that depend on them: as skips, a regression would leave CI green. These tests
break the fixtures' real inputs (a wheelhouse, the lock through tests/wrong_hash_lock.py, the
script's PATH, the base image's name) and run the real dependent tests in a fresh pytest; the
bare-base build's skip is checked against real uv downloads (no network, a 404 mirror, a refused
one).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from outsidecauses import PYTHON_BUILD_STANDALONE_HOST, no_route_cause, python_download_unreachable

ROOT = Path(__file__).resolve().parent.parent
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def _pytest(
    node: str, env: dict[str, str], *plugins: str, timeout: float = 900
) -> subprocess.CompletedProcess:
    """The real dependent test, in a pytest of its own, with this checkout first on the path
    (and tests/, for the guard plugins named in `plugins`)."""
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        **env,
    }
    loaded = [arg for name in plugins for arg in ("-p", name)]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rsfE", "-p", "no:cacheprovider", *loaded, node],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def broken_wheelhouse(tmp_path) -> Path:
    """A wheelhouse whose torch wheel is not a zip: uv cannot lock from it, for a reason that is no
    network's."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / TORCH_WHEEL).write_bytes(b"not a wheel\n")
    return folder


def _summary(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize(
    "node",
    [
        "tests/team/test_install_dry.py::test_dry_push_names_what_it_would_push",
        # The image fixture asks for the lock before the engine: the lock's failure is what shows.
        "tests/images/test_build_run.py::test_build_tags_after_success_and_prints_image_size_labels",
    ],
    ids=["team", "images"],
)
def test_a_lock_uv_cannot_solve_fails_the_tests_that_need_it(broken_wheelhouse, node):
    proc = _pytest(node, {"GPUENV_TEST_WHEELHOUSE": str(broken_wheelhouse)})
    summary = _summary(proc)
    assert "1 error" in summary and "skipped" not in summary, proc.stdout[-2000:]
    assert "uv could not lock" in proc.stdout, proc.stdout[-2000:]
    assert proc.returncode == 1


def _tiny_wheel(folder: Path) -> Path:
    """A real, installable wheel of a one-module package (pip downloads it from a local folder)."""
    path = folder / "gpuenvprobe-1.0-py3-none-any.whl"
    files = {
        "gpuenvprobe.py": b"VALUE = 1\n",
        "gpuenvprobe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: gpuenvprobe\n"
        b"Version: 1.0\n",
        "gpuenvprobe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append("gpuenvprobe-1.0.dist-info/RECORD,,")
        zf.writestr("gpuenvprobe-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _pip_download(requirement: str, tmp_path: Path, *source: str) -> subprocess.CompletedProcess:
    req = tmp_path / "req.txt"
    req.write_text(requirement + "\n")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "download",
            "--no-deps",
            "--require-hashes",
            "--dest",
            str(tmp_path / "out"),
            *source,
            "-r",
            str(req),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_hash_mismatch_is_no_outside_cause_but_a_refused_connection_is(tmp_path):
    wheel = _tiny_wheel(tmp_path)
    wrong = "0" * 64
    mismatch = _pip_download(
        f"gpuenvprobe==1.0 --hash=sha256:{wrong}",
        tmp_path,
        "--no-index",
        "--find-links",
        str(tmp_path),
    )
    assert mismatch.returncode != 0 and "DO NOT MATCH THE HASHES" in mismatch.stderr, (
        mismatch.stderr
    )
    assert no_route_cause(mismatch.stderr + mismatch.stdout) is None

    right = hashlib.sha256(wheel.read_bytes()).hexdigest()
    unreachable = _pip_download(
        f"gpuenvprobe==1.0 --hash=sha256:{right}",
        tmp_path,
        "--retries",
        "1",
        "--timeout",
        "5",
        "--index-url",
        "http://127.0.0.1:9/simple",
    )
    assert unreachable.returncode != 0
    cause = no_route_cause(unreachable.stderr + unreachable.stdout)
    assert cause is not None and "Connection refused" in cause, unreachable.stderr


#: A base image name no machine has: its fixture must run the base-image script.
NEVER_MADE = "gpuenv-test-base:guard-never-made"


def test_a_lock_with_a_wrong_hash_fails_the_tests_that_download_its_wheels():
    # complete_wheelhouse downloads the lock's wheels with pip --require-hashes: a bad lock is a
    # hash mismatch there, which is gpuenv's failure, never an unreachable host.
    proc = _pytest(
        "tests/team/test_offline_build.py::test_offline_build_names_every_missing_wheel_first",
        {},
        "wrong_hash_lock",
    )
    summary = _summary(proc)
    assert "1 error" in summary and "skipped" not in summary, proc.stdout[-3000:]
    assert (
        "downloading the lock's wheels with pip --require-hashes failed, and not for want of a "
        "network route" in proc.stdout
    )
    assert "0" * 64 in proc.stdout, proc.stdout[
        -3000:
    ]  # pip names the wrong hash the lock asked for
    assert proc.returncode == 1


def _path_without_debootstrap() -> str:
    """This PATH less every folder that holds debootstrap (as for a login without sbin on its
    PATH)."""
    return os.pathsep.join(
        d
        for d in os.environ["PATH"].split(os.pathsep)
        if d and not (Path(d) / "debootstrap").exists()
    )


@pytest.mark.parametrize(
    "node",
    [
        "tests/team/test_offline_build.py::test_offline_build_names_every_missing_wheel_first",
        "tests/images/test_build_hostile.py::test_the_plan_never_names_two_different_images_alike",
    ],
    ids=["team", "images"],
)
def test_a_failing_base_image_script_fails_the_tests_that_need_the_base(node, docker_engine):
    from gpuenv.engine import Engine

    assert Engine.local().image_info(NEVER_MADE) is None
    path = _path_without_debootstrap()
    assert shutil.which("debootstrap", path=path) is None
    proc = _pytest(node, {"GPUENV_TEST_BASE_IMAGE": NEVER_MADE, "PATH": path})
    summary = _summary(proc)
    assert "1 error" in summary and "skipped" not in summary, proc.stdout[-3000:]
    assert (
        f"making the base image {NEVER_MADE} failed, and not for want of a network route"
        in proc.stdout
    ), proc.stdout[-3000:]
    assert "make-test-base-image: debootstrap is missing" in proc.stdout
    assert Engine.local().image_info(NEVER_MADE) is None


def test_a_missing_local_base_image_fails_the_fleet_tests_with_the_fix(docker_engine):
    # scripts/setup.sh makes the base image on this machine: its absence is no outside cause.
    proc = _pytest(
        "tests/fleet/test_fleet_ssh.py::test_two_hosts_one_unreachable_real_suite_through_invoke",
        {"GPUENV_TEST_BASE_IMAGE": NEVER_MADE},
    )
    summary = _summary(proc)
    assert "1 error" in summary and "skipped" not in summary, proc.stdout[-3000:]
    assert f"the local base image {NEVER_MADE} is missing: run scripts/setup.sh" in proc.stdout, (
        proc.stdout[-3000:]
    )


def _python_download_error(env: dict[str, str], *, offline: bool = False) -> str:
    """gpuenv's one-line error when `install_standalone_python` fails, from a real uv in a child
    (in a network namespace of its own when `offline`: no route to any host)."""
    code = (
        "import sys, tempfile\nfrom pathlib import Path\n"
        "from gpuenv.envs.uv import install_standalone_python\n"
        "from gpuenv.errors import ToolError\ntry:\n    install_standalone_python('3.11', "
        "'x86_64', Path(tempfile.mkdtemp()))\nexcept ToolError as err:\n    "
        "print(err.render())\nelse:\n    print('installed')\n"
    )
    command = [sys.executable, "-c", code]
    if offline:
        command = ["unshare", "-n", *command]
    full_env = {k: v for k, v in os.environ.items() if k != "UV_PYTHON_INSTALL_MIRROR"}
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**full_env, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def not_found_mirror(tmp_path):
    """A python-build-standalone mirror on 127.0.0.1 that answers every request with 404."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_only_an_unreachable_python_build_standalone_host_may_skip_the_bare_base_build(
    not_found_mirror,
):
    if shutil.which("unshare") is None:
        pytest.fail("no unshare (util-linux) to run the download with no network", pytrace=False)
    offline = _python_download_error({}, offline=True)
    assert offline.startswith(
        "cannot download Python 3.11 (x86_64) for the image from https://github.com/"
    ), offline
    cause = python_download_unreachable(offline)
    assert cause is not None and PYTHON_BUILD_STANDALONE_HOST in offline, offline

    missing = _python_download_error({"UV_PYTHON_INSTALL_MIRROR": not_found_mirror})
    assert missing.startswith(
        f"cannot download Python 3.11 (x86_64) for the image from {not_found_mirror}/"
    ), missing
    assert "404" in missing and python_download_unreachable(missing) is None

    refused = _python_download_error({"UV_PYTHON_INSTALL_MIRROR": "http://127.0.0.1:9"})
    assert no_route_cause(refused) is not None, (
        refused
    )  # unreachable, but a mirror this run chose: not the outside
    assert python_download_unreachable(refused) is None
    assert (
        python_download_unreachable("gpuenv: uv could not lock: Name or service not known") is None
    )
