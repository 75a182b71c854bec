"""`invoke lock` (also `--file`), `invoke export --lock` and `invoke install --prefix` on the conda
path, as a user runs them: the team's mirror setting (INVOKE_GPUENV_CONDA_MIRRORS, as
invoke.yaml's gpuenv.conda_mirrors) points conda-forge at the local test channel. The framework
wheel is a STAND-IN (tests/conftest.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from teamcases import CPU_STACK_ARGS, run_invoke

from gpuenv.envs import condalock

pytestmark = pytest.mark.network  # numpy, pytest and nvidia-ml-py come from PyPI


def progress_steps(stdout: str) -> list[str]:
    """The progress lines of a task's output (not a terminal: one "[  12s] step" line per step),
    without the times."""
    return [m.group(1) for m in re.finditer(r"^\[\s*\d+s\] (.+)$", stdout, re.MULTILINE)]


def test_lock_relock_and_install_a_conda_lock_from_the_teams_mirror_with_progress(
    conda_channel, standin_wheels, tmp_path
):
    env = {
        "GPUENV_LOCKS_DIR": str(tmp_path / "locks"),
        "INVOKE_GPUENV_CONDA_MIRRORS": f"conda-forge={conda_channel.as_uri()}",
    }
    lock_args = (
        "lock",
        *CPU_STACK_ARGS,
        "--backend",
        "conda-lock",
        "--wheelhouse",
        str(standin_wheels),
    )
    first = run_invoke(*lock_args, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "locked: " in first.stdout and "conda-lock.yml" in first.stdout
    steps = progress_steps(first.stdout)  # the long steps of a lock, each said as it starts
    assert any(
        s.startswith("solving the conda part for linux-64 from conda-forge (") for s in steps
    ), first.stdout
    assert any(
        s.startswith("locking with uv for Python 3.11 on x86_64-manylinux_2_35 from wheelhouse ")
        for s in steps
    ), first.stdout
    again = run_invoke(*lock_args, env=env, timeout=600)
    assert again.returncode == 0 and "unchanged: " in again.stdout, again.stdout + again.stderr

    prefix = tmp_path / "envs" / "torch-cpu"
    done = run_invoke(
        "install",
        *CPU_STACK_ARGS,
        "--prefix",
        str(prefix),
        "--wheelhouse",
        str(standin_wheels),
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    locked = condalock.read_lock(next((tmp_path / "locks").glob("*/conda-lock.yml")), "linux-64")
    steps = progress_steps(done.stdout)  # the long steps of an install, with the counts of the lock
    for start in (
        f"fetching {len(locked.conda)} conda packages, each checked against the lock's sha256",
        f"linking {len(locked.conda)} conda packages into ",
        f"installing {len(locked.pip)} pip packages with uv, every hash required",
        "compiling the bytecode (each file once",
        f"moving it into place: {prefix}",
    ):
        assert any(s.startswith(start) for s in steps), (start, done.stdout)
    probe = subprocess.run(
        [prefix / "bin" / "python", "-c", "import torch, validate; print(torch.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.stdout == "2.13.0+cpu\n", probe.stderr


def test_a_mirror_setting_that_is_not_a_url_is_one_line_exit_2(tmp_path):
    env = {
        "GPUENV_LOCKS_DIR": str(tmp_path / "locks"),
        "INVOKE_GPUENV_CONDA_MIRRORS": "conda-forge=/srv/mirror",
    }
    proc = run_invoke("lock", *CPU_STACK_ARGS, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert (
        "\n" not in line
        and "conda_mirrors" in line
        and "'conda-forge=/srv/mirror' is not CHANNEL=URL" in line
    )
    assert not (tmp_path / "locks").exists()


def test_a_conda_lock_installs_with_no_network_from_the_channel_mirror_and_a_wheelhouse(
    conda_channel, standin_wheels, tmp_path
):
    """Offline means offline: under `unshare -n`, the channel's file:// mirror and a wheelhouse of
    every pip wheel of the lock are all the install has."""
    import os
    import shutil
    import sys
    import urllib.request

    from gpuenv.envs import condalock

    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0
    ):
        pytest.skip(
            "unshare -n is not available here (util-linux, and the right to make a network "
            "namespace)"
        )
    env = {
        "GPUENV_LOCKS_DIR": str(tmp_path / "locks"),
        "INVOKE_GPUENV_CONDA_MIRRORS": f"conda-forge={conda_channel.as_uri()}",
    }
    lock = run_invoke(
        "lock",
        *CPU_STACK_ARGS,
        "--backend",
        "conda-lock",
        "--wheelhouse",
        str(standin_wheels),
        env=env,
        timeout=600,
    )
    assert lock.returncode == 0, lock.stderr
    # where the network is: every wheel of the lock into one folder
    wheels = tmp_path / "wheelhouse"
    shutil.copytree(standin_wheels, wheels)
    lock_file = next((tmp_path / "locks").glob("*/conda-lock.yml"))
    for pin in condalock.read_lock(lock_file, "linux-64").pip:
        if pin.url.startswith("https://"):
            urllib.request.urlretrieve(
                pin.url, wheels / urllib.request.unquote(pin.url.rsplit("/", 1)[-1])
            )
    # the server: no network, an empty uv cache
    cache = tmp_path / "empty-uv-cache"
    prefix = tmp_path / "envs" / "offline"
    done = subprocess.run(
        [
            "unshare",
            "-n",
            sys.executable,
            "-m",
            "invoke",
            "install",
            *CPU_STACK_ARGS,
            "--prefix",
            str(prefix),
            "--wheelhouse",
            str(wheels),
            "--offline",
        ],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        env={**os.environ, **env, "UV_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (prefix / "bin" / "python").exists() and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def team_lock(conda_channel, standin_wheels, tmp_path_factory) -> dict[str, str]:
    """The environment of a team whose `invoke lock` made a conda lock of the CPU stack from its
    mirror."""
    root = tmp_path_factory.mktemp("team")
    env = {
        "GPUENV_LOCKS_DIR": str(root / "locks"),
        "INVOKE_GPUENV_CONDA_MIRRORS": f"conda-forge={conda_channel.as_uri()}",
    }
    done = run_invoke(
        "lock",
        *CPU_STACK_ARGS,
        "--backend",
        "conda-lock",
        "--wheelhouse",
        str(standin_wheels),
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return env


def test_export_lock_hands_over_the_hashed_conda_lock_itself(team_lock, tmp_path):
    from conda_lock.lockfile import parse_conda_lock_file

    made = next(Path(team_lock["GPUENV_LOCKS_DIR"]).glob("*/conda-lock.yml"))
    done = run_invoke("export", *CPU_STACK_ARGS, "--lock", env=team_lock, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    shared = tmp_path / "conda-lock.yml"
    assert shared.read_bytes() == made.read_bytes()
    assert (
        done.stdout
        == f"wrote conda-lock.yml for {made.parent.name}: the lock itself, every package with "
        f"its hash (from {made})\n"
    )
    lock = parse_conda_lock_file(shared)  # what `conda-lock install` and pixi read
    managers = {d.manager for d in lock.package}
    assert managers == {"conda", "pip"} and all(
        re.fullmatch(r"[0-9a-f]{64}", d.hash.sha256 or "") for d in lock.package
    )


def test_lock_file_locks_a_received_environment_with_the_conda_backend(
    team_lock, standin_wheels, tmp_path
):
    """A colleague receives the exported environment.yml and locks it as users do: `invoke lock
    --file`."""
    made = next(Path(team_lock["GPUENV_LOCKS_DIR"]).glob("*/conda-lock.yml"))
    received = tmp_path / "environment.yml"
    done = run_invoke("export", *CPU_STACK_ARGS, "--output", str(received), env=team_lock)
    assert done.returncode == 0, done.stdout + done.stderr
    colleague = {**team_lock, "GPUENV_LOCKS_DIR": str(tmp_path / "colleague-locks")}
    done = run_invoke(
        "lock",
        *CPU_STACK_ARGS,
        "--backend",
        "conda-lock",
        "--wheelhouse",
        str(standin_wheels),
        "--file",
        str(received),
        env=colleague,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    theirs = next((tmp_path / "colleague-locks").glob("*/conda-lock.yml"))
    assert (
        f"locked: {theirs} (backend conda-lock" in done.stdout
        and f"from {received} (invoke lock --file)" in done.stdout
    ), done.stdout

    def entries(path: Path) -> set[tuple[str, str, str]]:
        part = condalock.read_lock(path, "linux-64")
        return {(p.name, p.version, p.sha256) for p in (*part.conda, *part.pip)}

    assert entries(theirs) == entries(made)
