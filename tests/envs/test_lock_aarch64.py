"""Locks of linux-aarch64 plans (Grace servers), made on this x86_64 machine: the uv path against
PyPI, the conda path against the local channel (tests/condachannel: a metadata-only aarch64
python) with the pip part from PyPI. Solving and locking run here; installing or importing the
aarch64 wheels needs an aarch64 host, so here the install is refused, in one line."""

from __future__ import annotations

import platform

import pytest

from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.request import Request
from gpuenv.envs import condalock
from gpuenv.envs.locking import ensure_lock, lock_directory, read_metadata
from gpuenv.stack import LINUX_AARCH64, lock_platforms


def _grace_gpu_stack(python: str):
    """What a GB200 (compute capability 10.0, driver 580.173.02 as in its capture) plans."""
    return resolve_stack(
        Request(driver="580.173.02", gpu_archs=("10.0",), platform=LINUX_AARCH64, python=python)
    )


def test_an_aarch64_gpu_plan_locks_its_aarch64_cuda_build_with_uv(pypi, locks_dir):
    stack = _grace_gpu_stack("3.12")
    # PyPI's aarch64 file is the CUDA build
    assert stack.platform == LINUX_AARCH64 and stack.index_url is None
    result = ensure_lock(stack, backend="uv", platforms=lock_platforms(stack, ()))
    text = result.files.read_text(encoding="utf-8")
    pins = {
        line.split("==")[0]: line.split("==")[1].split()[0]
        for line in text.splitlines()
        if "==" in line
    }
    assert pins["torch"] == stack.framework_version
    # the aarch64 file pins CUDA 13 (cuda-toolkit) on every Linux machine: a CUDA build
    assert pins["cuda-toolkit"].startswith("13.0.") and "nvidia-cudnn-cu13" in pins
    assert not any(name.endswith("-cu12") for name in pins), sorted(pins)
    assert "--hash=sha256:" in text
    assert read_metadata(lock_directory(stack)).platforms == (LINUX_AARCH64,)


def test_an_aarch64_cpu_plan_locks_with_the_local_conda_channel(conda_channel, pypi, locks_dir):
    # the channel's aarch64 python stand-in is this interpreter's version
    python = ".".join(platform.python_version_tuple()[:2])
    stack = resolve_stack(Request(cuda="cpu", platform=LINUX_AARCH64, python=python))
    # PyPI's aarch64 CPU file
    assert stack.pip_requirement == "torch==2.10.0" and stack.index_url is None
    result = ensure_lock(
        stack,
        backend="conda-lock",
        platforms=lock_platforms(stack, ()),
        mirrors={"conda-forge": conda_channel.as_uri()},
    )
    part = condalock.read_lock(result.files, LINUX_AARCH64)
    assert {p.name: p.subdir for p in part.conda} == {"python": LINUX_AARCH64, "pip": "noarch"}
    wheels = {p.name: p.url.rsplit("/", 1)[-1] for p in part.pip}
    cp = "cp" + python.replace(".", "")
    assert wheels["torch"] == f"torch-2.10.0-{cp}-{cp}-manylinux_2_28_aarch64.whl"
    assert all("x86_64" not in name for name in wheels.values()), wheels
    with pytest.raises(Exception, match="locked for linux-aarch64, not for linux-64"):
        condalock.read_lock(result.files, "linux-64")


@pytest.mark.skipif(
    platform.machine() != "x86_64", reason="shows the refusal an x86_64 host gives an aarch64 stack"
)
def test_installing_an_aarch64_stack_here_is_refused_in_one_line(invoke_cli, locks_dir, tmp_path):
    result = invoke_cli(
        "install", "--prefix", str(tmp_path / "env"), "--platform", "linux-aarch64", "--cuda", "cpu"
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "is a linux-aarch64 stack, but this host is linux-64" in result.stderr
    assert not (tmp_path / "env").exists()
