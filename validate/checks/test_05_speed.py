"""Check 5, training speed: matmul throughput and memory bandwidth against 75% of what healthy
GPUs of the same model measured (gpu_peaks.yaml, each figure with its public source: DCGM's
rule), host-to-device copies against the PCIe link, a small mixed-precision CNN training loop
(GPU and CPU) whose loss must fall. NCCL all-reduce bus bandwidth is judged beside DDP, in
test_07_multigpu.py.

A model (or dtype) without a measured reference gets its figure recorded with the verdict "not
judged", never a pass or a fail from a fraction of its datasheet; `--baseline` (a known-good server
of the same model) judges it, and wins over the reference. A MIG instance is judged against its
parent's reference scaled by its share of the GPU's SMs."""

from __future__ import annotations

import pytest

from validate.host.devices import tf_gpu_uuids
from validate.judge.pcie import host_to_device_verdict
from validate.judge.peaks import (
    SUITE_TF_MATMUL_METHODS,
)
from validate.judge.speed import loss_falls_verdict, throughput_verdict
from validate.judge.verdict import FAIL, INFO, NOT_JUDGED, Verdict
from validate.measure import bench

SIZES = {
    # quick, full. Matmuls stay at n = 8192 in both: the references were measured there.
    "matmul_repeats": (3, 5),
    "copy_bytes": (1024 * 2**20, 1024 * 2**20),
    "h2d_bytes": (128 * 2**20, 512 * 2**20),
    "train_steps_gpu": (40, 100),
    "train_batch_gpu": (128, 256),
}
#: The CPU run of the CNN (steps, batch, image side), quick and full. bf16 autocast on a CPU without
#: bf16 instructions is slow (40 x 32 images of 32 px took 40-110 s on 2 cores), so --quick trains
#: 16 px images: 4x fewer pixels, and the loss still falls to about a third within 30 steps.
CPU_TRAIN = {"quick": (30, 16, 16), "full": (40, 32, 32)}
#: PyTorch threads of that run with --quick: one. The quick run proves the framework trains (the
#: loss falls) and keeps within its CPU budget (validate/measure/budget.py); one thread cannot
#: oversubscribe a busy host's cores, where OpenMP threads waiting on each other crawl: on two
#: cores at load average 17, the quick run took 142.8 s with two threads and 4.8 s with one
#: (docs/validation-results.md). The full suite keeps PyTorch's default, so its figure is the
#: host's.
QUICK_CPU_THREADS = 1


def size(suite, name: str) -> int:
    quick, full = SIZES[name]
    return quick if suite.quick else full


def test_matmul_throughput(gpu, torch, cuda_device, suite, record):
    """fp32, tf32 and bf16/fp16 matrix-multiply TFLOPS (n = 8192, as the references were measured)
    against 75% of what healthy GPUs of this model measured."""
    repeats = size(suite, "matmul_repeats")
    for precision in bench.precisions_for(gpu.compute_capability):
        tflops = bench.matmul_tflops(
            torch, cuda_device, precision, bench.MATMUL_N, repeats=repeats, inner=2 * repeats
        )
        check = f"matmul {precision} TFLOPS"
        measured, verdict = suite.judge(gpu, check, f"{precision}_tflops", tflops, "TFLOPS")
        record.add(check, measured, verdict, gpu=gpu.uuid, value=tflops)
    record.finish()


def test_memory_bandwidth(gpu, torch, cuda_device, suite, record):
    """Device-memory bandwidth from a device-to-device copy (read + write bytes), against 75% of a
    measured reference where there is one."""
    gbs = bench.device_copy_gbs(torch, cuda_device, size(suite, "copy_bytes"))
    check = "device memory GB/s"
    measured, verdict = suite.judge(gpu, check, "memory_bandwidth_gbs", gbs, "GB/s")
    record.add(check, measured, verdict, gpu=gpu.uuid, value=gbs)
    record.finish()


def test_host_to_device(gpu, torch, cuda_device, suite, record):
    """Pinned host-to-device copies against the PCIe link; pageable copies reported beside them."""
    nbytes = size(suite, "h2d_bytes")
    pinned = bench.host_to_device_gbs(torch, cuda_device, nbytes, pinned=True)
    check = "host-to-device pinned GB/s"
    base = suite.baseline_for(gpu.name, check)
    verdict = (
        throughput_verdict(check, pinned, base)
        if base is not None
        else host_to_device_verdict(pinned, gpu.pcie_link_gen_max, gpu.pcie_link_width_max)
    )  # the link GPU and slot allow; a GPU trained below its own generation fails the load check
    record.add(check, f"{pinned:.1f} GB/s", verdict, gpu=gpu.uuid, value=pinned)
    pageable = bench.host_to_device_gbs(torch, cuda_device, nbytes, pinned=False)
    check = "host-to-device pageable GB/s"
    verdict = throughput_verdict(check, pageable, suite.baseline_for(gpu.name, check))
    record.add(
        check,
        f"{pageable:.1f} GB/s",
        verdict if verdict.verdict != NOT_JUDGED else INFO,
        gpu=gpu.uuid,
        value=pageable,
    )
    record.finish()


def _training(
    suite,
    record,
    torch,
    device: str,
    gpu_name: str | None,
    uuid: str | None,
    steps: int,
    batch: int,
    image: int = 32,
    note: str = "",
) -> None:
    result = bench.train_cnn(torch, device, steps=steps, batch=batch, image=image)
    where = "gpu" if uuid else "cpu"
    _record_training(
        record,
        suite,
        "cnn training",
        result,
        where,
        gpu_name,
        uuid,
        note=note,
        loss_where=f"{where}, {result['amp_dtype']} autocast",
    )
    record.finish()


def _record_training(
    record,
    suite,
    name: str,
    result: dict,
    where: str,
    gpu_name: str | None,
    uuid: str | None,
    note: str = "",
    loss_where: str | None = None,
) -> None:
    """A training run's two rows, the same for both frameworks: the loss must fall, and the
    samples/s figure is judged against the baseline (no reference: a CNN is no standard load)."""
    record.add(
        f"{name} loss ({loss_where or where})",
        f"{result['first_loss']:.3f} -> {result['last_loss']:.3f}{note}",
        loss_falls_verdict(result["first_loss"], result["last_loss"]),
        gpu=uuid,
    )
    check = f"{name} samples/s ({where})"
    rate = result.get("samples_per_s")
    if rate:
        verdict = throughput_verdict(check, rate, suite.baseline_for(gpu_name, check))
        record.add(check, f"{rate:.0f} samples/s", verdict, gpu=uuid, value=rate, seconds=0)


def test_training_loop_gpu(gpu, torch, cuda_device, suite, record):
    """A small CNN trained with mixed precision on this GPU: the loss falls; samples/s reported."""
    _training(
        suite,
        record,
        torch,
        cuda_device,
        gpu.name,
        gpu.uuid,
        size(suite, "train_steps_gpu"),
        size(suite, "train_batch_gpu"),
    )


def test_training_loop_cpu(torch, suite, record):
    """The same CNN on the CPU (bf16 autocast): proves the framework trains even without a GPU."""
    steps, batch, image = CPU_TRAIN["quick" if suite.quick else "full"]
    if not suite.quick:
        _training(suite, record, torch, "cpu", None, None, steps, batch, image)
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(QUICK_CPU_THREADS)
    try:
        _training(
            suite,
            record,
            torch,
            "cpu",
            None,
            None,
            steps,
            batch,
            image,
            note=f" ({QUICK_CPU_THREADS} thread, --quick)",
        )
    finally:
        torch.set_num_threads(threads)


# TensorFlow: the same references and verdicts as PyTorch's figures above, from
# TensorFlow's own matmuls, plus a short convolutional training run that needs cuDNN on a GPU.


def _tf_gpu_entry(gpu, tf_info, tf_speed, suite) -> dict:
    """TensorFlow's speed entry for this NVML GPU (matched by PCI bus id), or skip saying why."""
    if not tf_info["is_cuda_build"]:
        pytest.skip(
            "TensorFlow is a CPU build: it has no GPU to measure (its CPU figures are in "
            "'tensorflow ... (cpu)')"
        )
    if gpu.mig_enabled and suite.selected_mig_device(gpu) is None:
        pytest.skip(
            f"GPU {gpu.index} is in MIG mode: its instances are validated one per run (see the "
            "MIG check)"
        )
    if gpu not in suite.visible_gpus():
        pytest.skip(
            f"GPU {gpu.index} is hidden from this run by CUDA_VISIBLE_DEVICES={suite.caller_mask!r}"
        )
    uuids = tf_gpu_uuids(tf_info["gpus"], suite.host.gpus)
    for entry, uuid in zip(tf_speed["gpus"], uuids):
        if uuid == gpu.uuid:
            return entry
    pytest.skip(f"TensorFlow does not list GPU {gpu.index} (the visibility check says why)")


def test_tensorflow_matmul_throughput(gpu, tf_info, tf_speed, suite, record):
    """TensorFlow's matmul TFLOPS in the dtypes this GPU supports (n = 8192). Judged like for like:
    against a TensorFlow-measured reference when gpu_peaks.yaml has one, else against PyTorch's
    measured figures under the unconfirmed rule (warn below 75%, fail below 55%): chained tf.matmul
    timed on the host is not torch.matmul."""
    entry = _tf_gpu_entry(gpu, tf_info, tf_speed, suite)
    for precision, tflops in entry["matmul"].items():
        check = f"tensorflow matmul {precision} TFLOPS"
        measured, verdict = suite.judge(
            gpu, check, f"{precision}_tflops", tflops, "TFLOPS", SUITE_TF_MATMUL_METHODS
        )
        record.add(check, measured, verdict, gpu=gpu.uuid, value=tflops)
    for what, error in entry["errors"].items():
        if what.startswith("matmul"):
            record.add(f"tensorflow {what}", "-", Verdict(FAIL, "runs", error), gpu=gpu.uuid)
    record.finish()


def test_tensorflow_conv_training_gpu(gpu, tf_info, tf_speed, suite, record):
    """A short training run of a small convolutional network on this GPU: its Conv2D runs through
    cuDNN, so a missing or mismatched cuDNN fails here at run time; the loss must fall."""
    entry = _tf_gpu_entry(gpu, tf_info, tf_speed, suite)
    cudnn = tf_info.get("cudnn_version") or "?"
    if "conv" in entry["errors"]:
        record.add(
            "tensorflow conv training loss (gpu)",
            "-",
            Verdict(FAIL, "runs on the GPU", f"cuDNN {cudnn}: {entry['errors']['conv']}"),
            gpu=gpu.uuid,
        )
        record.finish()
    conv = entry["conv"]
    placed = conv.get("conv_device") or ""
    if "GPU" not in placed.upper():
        record.add(
            "tensorflow conv on the GPU",
            placed or "unknown",
            Verdict(
                FAIL, "GPU", f"TensorFlow ran the convolution on {placed or 'an unknown device'}"
            ),
            gpu=gpu.uuid,
        )
    _record_training(
        record,
        suite,
        "tensorflow conv training",
        conv,
        "gpu",
        gpu.name,
        gpu.uuid,
        f" (cuDNN {cudnn})",
    )
    record.finish()


def test_tensorflow_cpu_speed(tf_info, tf_speed, suite, record):
    """The same TensorFlow code on the CPU (what CI's tensorflow-cpu runs): the training loss must
    fall; the CPU matmul figure is recorded, not judged (no reference for CPUs)."""
    cpu = tf_speed["cpu"]
    for precision, tflops in cpu["matmul"].items():
        check = f"tensorflow matmul {precision} TFLOPS (cpu)"
        record.add(
            check,
            f"{tflops:.3f} TFLOPS at n={cpu['n']}",
            throughput_verdict(check, tflops, suite.baseline_for(None, check)),
            value=tflops,
        )
    _record_training(record, suite, "tensorflow conv training", cpu["conv"], "cpu", None, None)
    record.finish()
