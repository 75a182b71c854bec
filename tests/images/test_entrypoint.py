"""The image's start-up driver gate (docker/entrypoint.sh), run by the real /bin/sh on recorded
drivers.

With CDI the NVIDIA toolkit skips NVIDIA_REQUIRE_CUDA (nvidia-container-toolkit#1470), so the
image checks its own min_driver at every start. The driver version comes from the kernel module's
/proc file; these are recorded copies of it from real hosts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from imagecases import ROOT

ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"

#: /proc/driver/nvidia/version as the proprietary and the open kernel modules write it.
PROPRIETARY_535 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
OPEN_550 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
    "(dvs-builder@U16-I3-B13-4-3)  Tue Mar  5 19:53:13 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
FLOORS_12 = "12.4=550.54.14 12.2=535.54.03 12.1=530.30.02 12.0=525.60.13"


def _gate(
    tmp_path: Path, version_text: str | None, min_driver: str, *command: str, **env: str
) -> subprocess.CompletedProcess:
    version_file = tmp_path / "version"
    if version_text is not None:
        version_file.write_text(version_text)
    full_env = {
        "PATH": os.environ["PATH"],
        "GPUENV_MIN_DRIVER": min_driver,
        "GPUENV_CUDA_FLOORS": FLOORS_12,
        "GPUENV_DRIVER_VERSION_FILE": str(version_file),
        **env,
    }
    return subprocess.run(
        ["/bin/sh", str(ENTRYPOINT), *command],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_an_older_driver_stops_the_container_naming_both_and_a_cuda_it_runs(tmp_path):
    proc = _gate(tmp_path, PROPRIETARY_535, "550.54.14", "echo", "should not run")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip() == (
        "gpuenv: driver 535.104.05 is older than 550.54.14 needed by this image: "
        "upgrade the driver to >= 550.54.14, or build for --cuda 12.2"
    )


def test_the_open_kernel_module_line_is_read_too(tmp_path):
    proc = _gate(tmp_path, OPEN_550, "570.26", "true")
    assert proc.returncode == 1
    assert "driver 550.54.15 is older than 570.26" in proc.stderr
    assert "--cuda 12.4" in proc.stderr


def test_versions_compare_as_numbers_not_text(tmp_path):
    # "535.104.05" sorts before "535.54.03" as text; as a driver it is newer.
    proc = _gate(tmp_path, PROPRIETARY_535, "535.54.03", "echo", "ran")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran\n"


def test_a_new_enough_driver_runs_the_command_with_its_arguments_intact(tmp_path):
    proc = _gate(
        tmp_path, OPEN_550, "550.54.15", "sh", "-c", 'printf "%s|" "$@"', "_", "a b", "", "c"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "a b||c|"


def test_no_floor_older_than_the_driver_says_upgrade_and_how_to_find_one(tmp_path):
    old = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01  Wed Oct 27 2021\n"
    proc = _gate(tmp_path, old, "530.30.02", "true")
    assert proc.returncode == 1
    assert "driver 470.82.01 is older than 530.30.02" in proc.stderr
    assert "invoke resolve --driver 470.82.01" in proc.stderr


@pytest.mark.parametrize(
    "case, env, version_text",
    [
        ("cpu image: no min_driver", {"GPUENV_MIN_DRIVER": ""}, PROPRIETARY_535),
        ("no NVIDIA driver visible", {}, None),
        ("gate skipped on purpose", {"GPUENV_SKIP_DRIVER_GATE": "1"}, PROPRIETARY_535),
    ],
)
def test_the_gate_lets_the_command_run_when_it_has_nothing_to_judge(
    tmp_path, case, env, version_text
):
    proc = _gate(tmp_path, version_text, "590.0", "echo", "ran", **env)
    assert proc.returncode == 0, f"{case}: {proc.stderr}"
    assert proc.stdout == "ran\n", case


def test_the_command_exit_code_comes_back_through_the_gate(tmp_path):
    proc = _gate(tmp_path, OPEN_550, "550.0", "sh", "-c", "exit 7")
    assert proc.returncode == 7


@pytest.mark.docker
def test_the_built_image_runs_the_gate_at_start(cpu_image, tmp_path):
    """The real image's ENTRYPOINT, with a recorded old driver and a GPU image's floor."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    tmp_path.chmod(0o755)
    (tmp_path / "version").write_text(PROPRIETARY_535)
    (tmp_path / "version").chmod(0o644)
    seen: list[str] = []
    env = {
        "GPUENV_MIN_DRIVER": "550.54.14",
        "GPUENV_CUDA_FLOORS": FLOORS_12,
        "GPUENV_DRIVER_VERSION_FILE": "/workspace/version",
    }
    code = engine.run_container(
        cpu_image.id,
        ["python", "-c", "print('ran')"],
        gpus="none",
        workdir_mount=tmp_path,
        env=env,
        stream=seen.append,
    )
    assert code == 1
    assert "driver 535.104.05 is older than 550.54.14 needed by this image" in "".join(seen)
    assert "ran" not in "".join(seen)
    # The CPU image itself has no floor, so the same start runs the command.
    seen.clear()
    code = engine.run_container(
        cpu_image.id,
        ["python", "-c", "print('ran')"],
        gpus="none",
        workdir_mount=tmp_path,
        env={"GPUENV_DRIVER_VERSION_FILE": "/workspace/version"},
        stream=seen.append,
    )
    assert code == 0 and "ran" in "".join(seen)
