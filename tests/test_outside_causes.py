"""The fixtures of the image and team tests skip only when something outside gpuenv is unreachable.

A broken lock, a hash mismatch or a failing script must fail the tests that depend on them: as
skips, a locking regression would leave CI green. These tests break the fixtures' real inputs
and run the real dependent tests in a fresh pytest.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from outsidecauses import no_route_cause

ROOT = Path(__file__).resolve().parent.parent
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def _pytest(node: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    """The real dependent test, in a pytest of its own, with this checkout first on the path."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsfE", "-p", "no:cacheprovider", node],
                          cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def broken_wheelhouse(tmp_path) -> Path:
    """A wheelhouse whose torch wheel is not a zip: uv cannot lock from it, for a reason that is no network's."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / TORCH_WHEEL).write_bytes(b"not a wheel\n")
    return folder


def _summary(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize("node", [
    "tests/team/test_install_dry.py::test_dry_push_names_what_it_would_push",
    # The image fixture asks for the lock before the engine: the lock's failure is what shows.
    "tests/images/test_build_run.py::test_build_tags_after_success_and_prints_image_size_labels",
], ids=["team", "images"])
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
        "gpuenvprobe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: gpuenvprobe\nVersion: 1.0\n",
        "gpuenvprobe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
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
    return subprocess.run([sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--require-hashes", "--dest",
                           str(tmp_path / "out"), *source, "-r", str(req)], capture_output=True, text=True, timeout=120)


def test_a_hash_mismatch_is_no_outside_cause_but_a_refused_connection_is(tmp_path):
    wheel = _tiny_wheel(tmp_path)
    wrong = "0" * 64
    mismatch = _pip_download(f"gpuenvprobe==1.0 --hash=sha256:{wrong}", tmp_path, "--no-index", "--find-links", str(tmp_path))
    assert mismatch.returncode != 0 and "DO NOT MATCH THE HASHES" in mismatch.stderr, mismatch.stderr
    assert no_route_cause(mismatch.stderr + mismatch.stdout) is None

    right = hashlib.sha256(wheel.read_bytes()).hexdigest()
    unreachable = _pip_download(f"gpuenvprobe==1.0 --hash=sha256:{right}", tmp_path,
                                "--retries", "1", "--timeout", "5", "--index-url", "http://127.0.0.1:9/simple")
    assert unreachable.returncode != 0
    cause = no_route_cause(unreachable.stderr + unreachable.stdout)
    assert cause is not None and "Connection refused" in cause, unreachable.stderr
