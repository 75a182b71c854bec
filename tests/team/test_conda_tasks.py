"""`invoke lock` and `invoke install --prefix` on the conda path, as a user runs them: the team's
mirror setting (INVOKE_GPUENV_CONDA_MIRRORS, as invoke.yaml's gpuenv.conda_mirrors) points
conda-forge at the local test channel. The framework wheel is a STAND-IN (tests/conftest.py)."""

from __future__ import annotations

import subprocess

import pytest

from teamcases import CPU_STACK_ARGS, run_invoke

pytestmark = pytest.mark.network  # numpy, pytest and nvidia-ml-py come from PyPI


def test_lock_relock_and_install_a_conda_lock_from_the_teams_mirror(conda_channel, standin_wheels, tmp_path):
    env = {"GPUENV_LOCKS_DIR": str(tmp_path / "locks"), "INVOKE_GPUENV_CONDA_MIRRORS": f"conda-forge={conda_channel.as_uri()}"}
    lock_args = ("lock", *CPU_STACK_ARGS, "--backend", "conda-lock", "--wheelhouse", str(standin_wheels))
    first = run_invoke(*lock_args, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "locked: " in first.stdout and "conda-lock.yml" in first.stdout
    again = run_invoke(*lock_args, env=env, timeout=600)
    assert again.returncode == 0 and "unchanged: " in again.stdout, again.stdout + again.stderr

    prefix = tmp_path / "envs" / "torch-cpu"
    done = run_invoke("install", *CPU_STACK_ARGS, "--prefix", str(prefix), "--wheelhouse", str(standin_wheels), env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    probe = subprocess.run([prefix / "bin" / "python", "-c", "import torch, validate; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout == "2.13.0+cpu\n", probe.stderr


def test_a_mirror_setting_that_is_not_a_url_is_one_line_exit_2(tmp_path):
    env = {"GPUENV_LOCKS_DIR": str(tmp_path / "locks"), "INVOKE_GPUENV_CONDA_MIRRORS": "conda-forge=/srv/mirror"}
    proc = run_invoke("lock", *CPU_STACK_ARGS, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "conda_mirrors" in line and "'conda-forge=/srv/mirror' is not CHANNEL=URL" in line
    assert not (tmp_path / "locks").exists()


def test_a_conda_lock_installs_with_no_network_from_the_channel_mirror_and_a_wheelhouse(conda_channel, standin_wheels, tmp_path):
    """Offline means offline: under `unshare -n`, the channel's file:// mirror and a wheelhouse of
    every pip wheel of the lock are all the install has."""
    import os
    import shutil
    import sys
    import urllib.request

    from gpuenv.envs import condalock

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -n is not available here (util-linux, and the right to make a network namespace)")
    env = {"GPUENV_LOCKS_DIR": str(tmp_path / "locks"), "INVOKE_GPUENV_CONDA_MIRRORS": f"conda-forge={conda_channel.as_uri()}"}
    lock = run_invoke("lock", *CPU_STACK_ARGS, "--backend", "conda-lock", "--wheelhouse", str(standin_wheels), env=env, timeout=600)
    assert lock.returncode == 0, lock.stderr
    # where the network is: every wheel of the lock into one folder
    wheels = tmp_path / "wheelhouse"
    shutil.copytree(standin_wheels, wheels)
    lock_file = next((tmp_path / "locks").glob("*/conda-lock.yml"))
    for pin in condalock.read_lock(lock_file, "linux-64").pip:
        if pin.url.startswith("https://"):
            urllib.request.urlretrieve(pin.url, wheels / urllib.request.unquote(pin.url.rsplit("/", 1)[-1]))
    # the server: no network, an empty uv cache
    cache = tmp_path / "empty-uv-cache"
    prefix = tmp_path / "envs" / "offline"
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "invoke", "install", *CPU_STACK_ARGS, "--prefix", str(prefix), "--wheelhouse", str(wheels), "--offline"],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        env={**os.environ, **env, "UV_CACHE_DIR": str(cache)}, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (prefix / "bin" / "python").exists() and "Traceback" not in done.stderr
