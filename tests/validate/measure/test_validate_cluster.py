"""Shared-cluster modes and small fixes (issue 11 items 3, 8, 9, 10, 2): orphaned probe workers,
Exclusive_Process mode, PTX-only TensorFlow builds, /dev/shm, the bare-host expectation, memory
growth limits and TensorFlow's cuDNN claim, on recorded observations and real processes."""

from __future__ import annotations

import os
import sys
import time

import pytest

from validate.conftest import exclusive_first
from validate.judge.claims import claims_verdict, versions_agree
from validate.judge.memory import growth_on_verdict, shm_verdict
from validate.judge.verdict import FAIL, INFO, PASS
from validate.judge.visibility import (
    BARE_HOST,
    expected_gpus,
    kernel_image_verdict,
    probe_parallelism,
    ptx_only,
)
from validate.measure.subproc import probe_env, run_command, run_probe

GIB = 2**30

# tf.sysconfig.get_build_info() of TensorFlow 2.18.0 (Linux x86_64 wheel with CUDA).
TF_218_BUILD_INFO = {
    "cpu_compiler": "/usr/lib/llvm-18/bin/clang",
    "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"],
    "cuda_version": "12.5.1",
    "cudnn_version": "9",
    "is_cuda_build": True,
    "is_rocm_build": False,
    "is_tensorrt_build": False,
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie is dead
        return handle.read().split(")")[-1].split()[0] != "Z"


def test_timeout_kills_the_probe_and_its_workers(tmp_path):
    """A probe that started a worker (as mp.spawn starts NCCL workers) and hangs: on timeout the
    whole process group goes, not only the probe."""
    pidfile = tmp_path / "worker.pid"
    script = (
        "import subprocess, sys, time\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(worker.pid))\n"
        "time.sleep(120)\n"
    )
    status, _, _, seconds = run_command([sys.executable, "-c", script], probe_env({}), timeout=3)
    assert status is None and seconds < 30
    worker = int(pidfile.read_text())
    deadline = time.time() + 5
    while _alive(worker) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived its probe's timeout"


def test_probe_timeout_says_the_group_was_killed():
    result = run_probe(["tf-info"], timeout=0.01)
    assert (
        result.error is not None
        and "did not finish within" in result.error
        and "process group was killed" in result.error
    )


def test_exclusive_process_runs_masking_probes_one_at_a_time():
    assert probe_parallelism(["Default", "Default"], 16) == 8
    assert probe_parallelism(["Default", "Exclusive_Process"], 16) == 1
    assert probe_parallelism([None], 2) == 2


def test_exclusive_process_runs_child_process_checks_first():
    items = [
        "driver gate",
        "driver",
        "torch computes",
        "memory[growth]",
        "masking[torch]",
        "matmul",
        "nccl",
    ]
    isolated = {"memory[growth]", "masking[torch]", "nccl"}
    ordered = exclusive_first(items, isolated.__contains__, lambda item: item == "driver gate")
    assert ordered == [
        "driver gate",
        "memory[growth]",
        "masking[torch]",
        "nccl",
        "driver",
        "torch computes",
        "matmul",
    ]


def test_tensorflow_with_only_ptx_for_the_gpu_is_flagged():
    archs = TF_218_BUILD_INFO["cuda_compute_capabilities"]
    assert ptx_only("9.0", archs) is True  # H100: only compute_90, JIT at first use
    assert ptx_only("10.0", archs) is True  # B200: PTX 9.0 runs through JIT too
    assert kernel_image_verdict("10.0", archs).verdict == PASS
    assert ptx_only("8.0", archs) is False and ptx_only("8.6", archs) is False  # sm_80 cubin
    assert (
        ptx_only("7.5", ["compute_80"]) is False
    )  # nothing runs at all: the kernel check fails instead


def test_tensorflow_probe_times_the_first_op():
    """The real TensorFlow probe (CPU here) reports the first op's time per device."""
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed in this venv")
    result = run_probe(["tf-info"], {"CUDA_VISIBLE_DEVICES": ""})
    assert result.error is None, result.error
    cpu = result.data["compute"][0]
    assert cpu["device"] == "/CPU:0" and cpu["first_op_seconds"] >= 0


@pytest.mark.parametrize(
    ("size", "gpus", "verdict"),
    [(64 * 2**20, 8, FAIL), (64 * 2**20, 1, INFO), (2 * GIB, 8, PASS), (1 * GIB, 2, PASS)],
)
def test_shm_too_small_for_nccl(size, gpus, verdict):
    result = shm_verdict(size, gpus)
    assert result.verdict == verdict
    if verdict != PASS:
        assert "--shm-size=1g or --ipc=host" in result.reason and "64 MiB" in result.reason


def test_bare_host_expects_a_gpu_unless_told_otherwise():
    expectation = expected_gpus(None, None, cpu_stack=False, in_image=False)
    assert expectation is not None and expectation.count == 1 and not expectation.exact
    assert expectation.source == BARE_HOST and "--expect-gpus 0" in expectation.describe()
    assert expected_gpus(0, None, in_image=False) is None
    assert (
        expected_gpus(None, None, in_image=True) is None
    )  # a CPU image without NVIDIA_VISIBLE_DEVICES
    assert (
        expected_gpus(None, None, in_image=False, cpu_only_host=True) is None
    )  # no driver, no device: CPU-only
    assert (
        expected_gpus(2, None, in_image=False, cpu_only_host=True).count == 2
    )  # unless the team asks for GPUs


def test_growth_limit_is_a_realistic_figure():
    # TF with growth on: context + pool about 0.5 GiB. 25% of an 80 GiB GPU was 20 GiB.
    assert growth_on_verdict(int(0.6 * GIB), 80 * GIB).verdict == PASS
    failed = growth_on_verdict(6 * GIB, 80 * GIB)
    assert failed.verdict == FAIL and failed.threshold == "<= 2.0 GiB"
    assert growth_on_verdict(int(1.5 * GIB), 2 * GIB).verdict == FAIL  # half of a small GPU
    assert (
        growth_on_verdict(int(0.5 * GIB), None).verdict == PASS
    )  # memory unreadable (MIG container)


def test_tensorflow_cudnn_major_only_agrees_with_the_label():
    """TF's build info says cuDNN "9"; the image label says "9.3": compare what both state."""
    claimed = {"framework_version": "2.18.0", "cuda": "12.5", "cudnn": "9.3"}
    installed = {
        "framework_version": "2.18.0",
        "cuda": TF_218_BUILD_INFO["cuda_version"],
        "cudnn": TF_218_BUILD_INFO["cudnn_version"],
    }
    assert claims_verdict(claimed, installed).verdict == PASS
    wrong = claims_verdict({**claimed, "cudnn": "8.9"}, installed)
    assert wrong.verdict == FAIL and "cuDNN 9 loaded, image claims 8.9" in wrong.reason
    assert versions_agree("12.5", "12.5.1") and not versions_agree("12.4", "12.5.1")
    assert not versions_agree("9.3", None)


def test_tensorflow_build_info_is_read_without_importing_tensorflow():
    """The file TensorFlow 2.18's GPU wheel ships, parsed as a literal, never executed."""
    from validate.host.tfbuild import parse_build_info

    text = (
        '"""Auto-generated module providing information about the build."""\nimport collections\n\n'
        "build_info = collections.OrderedDict([('cpu_compiler', '/usr/lib/llvm-18/bin/clang'), "
        "('cuda_compute_capabilities', ['sm_60', 'sm_70', 'sm_80', 'sm_89', 'compute_90']), "
        "('cuda_version', '12.5.1'), "
        "('cudnn_version', '9'), ('is_cuda_build', True), ('is_rocm_build', False), "
        "('is_tensorrt_build', False)])\n"
    )
    assert parse_build_info(text) == TF_218_BUILD_INFO
    assert parse_build_info("build_info = os.system('x')\n") is None
    assert parse_build_info("not python (") is None


def test_the_installed_tensorflows_build_info_is_what_tensorflow_itself_says():
    """The real file of the TensorFlow installed here, read unexecuted, against TensorFlow's own
    answer (tf.sysconfig.get_build_info(), imported in a child so this process stays without it)."""
    import importlib.util
    import json

    from validate.host.tfbuild import installed_build_info

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed in this venv: no build_info file to read")
    status, stdout, stderr, _ = run_command(
        [
            sys.executable,
            "-c",
            "import json, tensorflow as tf; print(json.dumps(dict(tf.sysconfig.get_build_info())))",
        ],
        env=dict(os.environ),
        timeout=300,
    )
    assert status == 0, stderr[-2000:]
    assert installed_build_info() == json.loads(stdout.strip().splitlines()[-1])


def test_tensorflow_info_probe_pauses_for_the_memory_measurement():
    """Shared work: the info probe stops after its products so the parent measures TensorFlow's
    memory with growth on there, instead of starting a second TensorFlow for it."""
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed in this venv")
    from validate.measure.subproc import run_stepped_probe

    seen: list[tuple[str, int]] = []
    result = run_stepped_probe(
        ["tf-info", "--pause", "--speed-quick"],
        {"CUDA_VISIBLE_DEVICES": "", "TF_FORCE_GPU_ALLOW_GROWTH": "true"},
        lambda step, pid: seen.append((step, pid)) or {"bytes": 0, "method": "test"},
    )
    assert result.error is None, result.error
    assert [step for step, _ in seen] == ["small"] and seen[0][1] > 0
    assert result.steps["small"]["bytes"] == 0 and result.data["compute"][0]["device"] == "/CPU:0"
    # The speed figures come from the same TensorFlow, after the memory step (issue 17 item 5):
    # no GPU here, so only the CPU ran the matmul and the convolutional training.
    speed = result.data["speed"]
    assert speed["gpus"] == []
    assert speed["cpu"]["matmul"]["fp32"] > 0
    conv = speed["cpu"]["conv"]
    assert conv["conv_device"].endswith("CPU:0") and conv["last_loss"] <= 0.7 * conv["first_loss"]
