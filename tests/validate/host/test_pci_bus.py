"""A GPU server is known by its PCI bus, not by its driver: a fake sysfs tree in a tmp folder
(files as the kernel writes them, "0x10de\\n"), read by validate/host/pcibus.py, and the real
suite (`python -m validate` in a subprocess) pointed at it with VALIDATE_SYSFS_ROOT while NVML
cannot be used here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from suiteruns import no_nvml_here
from sysfs_trees import hgx_h100, pci_function

from validate.host import nvml
from validate.host.pcibus import in_container, nvidia_gpus
from validate.judge.driver_floor import branch_to_install, driverless_text

REPO = Path(__file__).resolve().parents[3]


def test_only_nvidia_display_and_3d_controllers_are_gpus(tmp_path):
    gpus = nvidia_gpus(hgx_h100(tmp_path))
    assert [(g.address, g.device_id, g.class_code, g.driver) for g in gpus] == [
        ("0000:18:00.0", 0x2330, 0x030200, None),
        ("0000:2a:00.0", 0x2330, 0x030200, "vfio-pci"),
    ]
    assert gpus[0].product() == "H100 SXM5 80GB (PCI 10de:2330)"
    assert (gpus[0].subsystem_vendor, gpus[0].subsystem_device) == (0x10DE, 0x1795)


def test_a_vga_controller_counts_and_an_unreadable_bus_says_nothing(tmp_path):
    pci_function(tmp_path, "0000:01:00.0", 0x10DE, 0x2184, 0x030000)  # GTX 1660, VGA-compatible
    assert [g.product() for g in nvidia_gpus(tmp_path)] == ["GeForce GTX 1660 (PCI 10de:2184)"]
    assert nvidia_gpus(tmp_path / "no-such-root") == []


def test_a_container_is_told_by_dockerenv_containerenv_or_pid1_cgroup(tmp_path):
    assert not in_container(tmp_path)
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "cgroup").write_text("0::/\n")
    assert not in_container(tmp_path)
    (tmp_path / "proc" / "1" / "cgroup").write_text("12:pids:/docker/4f1c0a\n")
    assert in_container(tmp_path)
    podman = tmp_path / "podman"
    (podman / "run").mkdir(parents=True)
    (podman / "run" / ".containerenv").touch()
    assert in_container(podman)


def test_the_line_names_count_ids_products_and_the_driver_branch(tmp_path):
    text = driverless_text(
        nvidia_gpus(hgx_h100(tmp_path)), container=False, nvml_error=nvml.NO_DRIVER
    )
    assert text.startswith(
        "2 NVIDIA GPU(s) on the PCI bus (2x H100 SXM5 80GB (PCI 10de:2330); "
        "bound to vfio-pci, not to nvidia)"
    )
    assert text.endswith(
        "install an NVIDIA driver of branch R520 or newer for them, then load it (or reboot)"
    )
    inside = driverless_text(nvidia_gpus(tmp_path), container=True, nvml_error=nvml.NO_DRIVER)
    assert "this is a container: start it with the host's GPUs (docker run --gpus all" in inside


def test_the_branch_is_the_newest_of_the_framework_floor_and_the_gpus_first_branch():
    assert (
        branch_to_install(["7.5"]) == "R450 or newer"
    )  # Turing's R410 is older than any framework's floor
    assert branch_to_install(["10.0", "9.0"]) == "R570 or newer"
    assert branch_to_install([None]).startswith("R450 or newer (a product not in gpu_archs.yaml")


def run_suite(
    root: Path, *args: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    }
    env["VALIDATE_SYSFS_ROOT"] = str(root)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "validate", "--quick", "-k", "nvml_gpu_count", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@no_nvml_here
def test_the_suite_fails_a_server_whose_gpus_have_no_driver(tmp_path):
    done = run_suite(hgx_h100(tmp_path))
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout[-3000:]
    assert "validating as a CPU-only host" not in out
    brief = (
        "2 NVIDIA GPU(s) on the PCI bus but no usable NVML "
        "(the 'NVML GPU count' row names them and the fix)"
    )
    assert f"validate: not ready: {brief}" in out  # the start line, short
    assert f"driver -, CUDA driver -, {brief}" in out  # the host header, short
    assert "FAIL NVML GPU count [host]: 0 NVML sees 0 GPU(s), expected at least 1 GPU(s)" in out
    assert "host): 2 NVIDIA GPU(s) on the PCI bus (2x H100 SXM5 80GB (PCI 10de:2330)" in out
    # the products and the fix once, in the failing row
    assert out.count("2x H100 SXM5 80GB (PCI 10de:2330)") == 1
    assert out.count("install an NVIDIA driver of branch R520 or newer") == 1


@no_nvml_here
def test_a_driverless_run_says_the_fix_once(tmp_path):
    """The whole --quick run: every row that skips for it points to the failing count row."""
    done = run_suite(hgx_h100(tmp_path), "-k", "gpu_count or visible or driver or environment")
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout[-3000:]
    assert out.count("install an NVIDIA driver of branch R520 or newer") == 1, done.stdout


@no_nvml_here
def test_expect_gpus_0_is_the_users_word_but_the_gpus_are_named(tmp_path):
    done = run_suite(hgx_h100(tmp_path), "--expect-gpus", "0")
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout[-3000:]
    assert (
        "validate: warning: --expect-gpus 0 validates a CPU-only host, "
        "but 2 NVIDIA GPU(s) on the PCI bus" in out
    )
    # no row fails for them here: nothing points to one, the header keeps the products
    assert "'NVML GPU count' row names them" not in out
    assert "driver -, CUDA driver -, 2 NVIDIA GPU(s) on the PCI bus (2x H100 SXM5 80GB" in out


@no_nvml_here
def test_a_machine_with_no_nvidia_pci_gpu_is_still_cpu_only(tmp_path):
    pci_function(tmp_path, "0000:00:00.0", 0x8086, 0x09A2, 0x060000)
    pci_function(
        tmp_path, "0000:65:00.1", 0x10DE, 0x10F8, 0x040300
    )  # an NVIDIA audio function is no GPU
    done = run_suite(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.count("no NVIDIA GPU or driver here: validating as a CPU-only host") == 1
    assert "PCI bus" not in done.stdout


@no_nvml_here
def test_a_container_started_without_gpus_is_told_to_use_gpus(tmp_path):
    """An image (GPUENV_STACK_FILE of a CUDA stack) in a container (/.dockerenv) that was given no
    GPU and no NVIDIA_VISIBLE_DEVICES: the PCI bus still shows the host's GPUs, so it fails, and
    the fix is --gpus, not a driver inside the container."""
    root = hgx_h100(tmp_path / "root")
    (root / ".dockerenv").touch()
    stack = tmp_path / "stack.json"
    stack.write_text(
        '{"stack_id": "torch2.7.1-cu118-py3.11", "cuda": "11.8", "min_driver": "520.61.05"}'
    )
    done = run_suite(root, "-k", "nvml_gpu_count", env_extra={"GPUENV_STACK_FILE": str(stack)})
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout[-3000:]
    assert "expected at least 1 GPU(s) (2 NVIDIA GPU(s) on the PCI bus)" in out
    assert "this is a container: start it with the host's GPUs (docker run --gpus all" in out


def test_cpu_only_host_asks_the_pci_bus_too(tmp_path):
    """No driver library and no /dev/nvidia*, but GPUs on the bus: no CPU-only host."""
    dev = tmp_path / "dev"
    dev.mkdir()
    empty = tmp_path / "empty"
    assert nvml.cpu_only_host(nvml.HostInfo(error=nvml.NO_DRIVER), dev, empty)
    assert not nvml.cpu_only_host(
        nvml.HostInfo(error=nvml.NO_DRIVER), dev, hgx_h100(tmp_path / "hgx")
    )
