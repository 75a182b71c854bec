"""The suite's TensorFlow speed check judges its figures under the unconfirmed rule, like for like.

gpu_peaks.yaml's H100 references are torch.matmul figures; TensorFlow's chained tf.matmul timed on
the host is another method. So the check itself (validate/checks/test_05_speed.py, through
Suite.judge with SUITE_TF_MATMUL_METHODS) must warn below 75% of such a reference and fail only
below 55% of it. Run through the real suite on the SYNTHETIC two-H100 host (synthetic_gpu_host.py)
with a SYNTHETIC TensorFlow probe answer (tf_probe_answer.py) whose figures are set from the
table's own reference: one between 55% and 75% of it, one below 55%. Were the check to judge them
against the default (PyTorch) methods, the first would fail instead of warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nvml_synthetic import TWO_H100_HOST

from validate.judge.peaks import SUITE_MATMUL_METHODS, load_peaks, peaks_for
from validate.judge.speed import REFERENCE_FRACTION, UNCONFIRMED_FAIL_FRACTION

ROOT = Path(__file__).resolve().parents[3]
# the synthetic host's GPUs (the table synthetic_gpu_host.py serves)
H100 = TWO_H100_HOST["gpus"][0]["name"]
BUSES = tuple(gpu["bus"] for gpu in TWO_H100_HOST["gpus"])


def _probe_answer(figures: list[float]) -> dict:
    """TensorFlow's probe answer, shaped as `tf-info --speed` prints it, with one bf16 figure per
    GPU."""
    return {
        "version": "2.21.0",
        "is_cuda_build": True,
        "cuda_version": "12.5.1",
        "cudnn_version": "9",
        "gpus": [
            {"name": f"/physical_device:GPU:{i}", "pci_bus_id": bus} for i, bus in enumerate(BUSES)
        ],
        "speed": {
            "gpus": [{"matmul": {"bf16": tflops}, "errors": {}, "conv": {}} for tflops in figures]
        },
    }


def test_tensorflow_figures_against_a_torch_reference_warn_below_75_and_fail_below_55_percent(
    tmp_path,
):
    reference = peaks_for(H100, load_peaks()).reference_for("bf16_tflops", SUITE_MATMUL_METHODS)
    assert reference is not None and reference.confirmed, (
        "the table must hold a torch.matmul bf16 reference for the H100"
    )
    between = (
        (REFERENCE_FRACTION + UNCONFIRMED_FAIL_FRACTION) / 2 * reference.value
    )  # 65%: a confirmed floor fails it
    below = (UNCONFIRMED_FAIL_FRACTION - 0.05) * reference.value  # 50%: fails under either rule
    answer = tmp_path / "tf-probe.json"
    answer.write_text(json.dumps(_probe_answer([between, below])))
    report = tmp_path / "report.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent.parent)]),
        "GPUENV_TEST_TF_PROBE": str(answer),
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "--json",
            str(report),
            "-p",
            "synthetic_gpu_host",
            "-p",
            "tf_probe_answer",
            "-k",
            "tensorflow_matmul_throughput",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.is_file(), done.stdout[-3000:] + done.stderr[-2000:]
    data = json.loads(report.read_text())
    rows = [
        next(c for c in data[uuid]["checks"] if c["check"] == "tensorflow matmul bf16 TFLOPS")
        for uuid in (key for key, s in data.items() if isinstance(s, dict) and "gpu" in s)
    ]
    assert [r["value"] for r in rows] == [between, below]
    assert [r["verdict"] for r in rows] == ["warn", "fail"], rows
    assert all(f"unconfirmed reference {reference.value:.4g}" in r["threshold"] for r in rows), rows
    assert "not measured like the suite's figure" in rows[0]["reason"]
    assert "about half speed or worse" in rows[1]["reason"]
    assert done.returncode == 1  # the half-speed GPU fails the run
