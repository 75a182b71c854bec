"""Check 5, training speed: matmul throughput and memory bandwidth as fractions of the datasheet
peak (gpu_peaks.yaml), host-to-device copies against the PCIe link, a small mixed-precision CNN
training loop (GPU and CPU) whose loss must fall, and NCCL all-reduce bus bandwidth.

Unknown GPU models get the figure with verdict "no reference"; `--baseline` compares with a
known-good server of the same model instead."""

from __future__ import annotations

import pytest

from validate import bench
from validate.subproc import run_probe
from validate.thresholds import (
    INFO,
    NO_REFERENCE,
    host_to_device_verdict,
    loss_falls_verdict,
    throughput_verdict,
)

SIZES = {
    # quick, full
    "matmul_n": (4096, 8192),
    "copy_bytes": (256 * 2**20, 1024 * 2**20),
    "h2d_bytes": (128 * 2**20, 512 * 2**20),
    "train_steps_gpu": (40, 100),
    "train_batch_gpu": (128, 256),
    "allreduce_bytes": (64 * 2**20, 256 * 2**20),
}
CPU_TRAIN_STEPS, CPU_TRAIN_BATCH = 40, 32


def size(suite, name: str) -> int:
    quick, full = SIZES[name]
    return quick if suite.quick else full


def _against(suite, gpu_name: str | None, check: str, metric: str, value: float, unit: str):
    """Measured text and verdict for a higher-is-better figure (baseline, else datasheet peak)."""
    peak = suite.peak(gpu_name, metric) if gpu_name else None
    verdict = throughput_verdict(metric, value, peak, suite.baseline_for(gpu_name, check))
    measured = f"{value:.1f} {unit}" + (f" ({value / peak:.0%} of peak)" if peak else "")
    return measured, verdict


def _precisions(capability: str | None) -> list[str]:
    major = int((capability or "0.0").split(".")[0])
    if major >= 8:
        return ["fp32", "tf32", "bf16"]
    return ["fp32", "fp16"] if major >= 7 else ["fp32"]


def test_matmul_throughput(gpu, torch, cuda_device, suite, record):
    """fp32, tf32 and bf16/fp16 matrix-multiply TFLOPS against the datasheet peak."""
    n = size(suite, "matmul_n")
    for precision in _precisions(gpu.compute_capability):
        tflops = bench.matmul_tflops(torch, cuda_device, precision, n)
        check = f"matmul {precision} TFLOPS"
        measured, verdict = _against(suite, gpu.name, check, f"{precision}_tflops", tflops, "TFLOPS")
        record.add(check, measured, verdict, gpu=gpu.uuid, value=tflops)
    record.finish()


def test_memory_bandwidth(gpu, torch, cuda_device, suite, record):
    """Device-memory bandwidth from a device-to-device copy, against the datasheet peak."""
    gbs = bench.device_copy_gbs(torch, cuda_device, size(suite, "copy_bytes"))
    check = "device memory GB/s"
    measured, verdict = _against(suite, gpu.name, check, "memory_bandwidth_gbs", gbs, "GB/s")
    record.add(check, measured, verdict, gpu=gpu.uuid, value=gbs)
    record.finish()


def test_host_to_device(gpu, torch, cuda_device, suite, record):
    """Pinned host-to-device copies against the PCIe link; pageable copies reported beside them."""
    nbytes = size(suite, "h2d_bytes")
    pinned = bench.host_to_device_gbs(torch, cuda_device, nbytes, pinned=True)
    check = "host-to-device pinned GB/s"
    base = suite.baseline_for(gpu.name, check)
    verdict = (
        throughput_verdict(check, pinned, None, base)
        if base is not None
        else host_to_device_verdict(pinned, gpu.pcie_link_gen_max, gpu.pcie_link_width_max)
    )
    record.add(check, f"{pinned:.1f} GB/s", verdict, gpu=gpu.uuid, value=pinned)
    pageable = bench.host_to_device_gbs(torch, cuda_device, nbytes, pinned=False)
    check = "host-to-device pageable GB/s"
    verdict = throughput_verdict(check, pageable, None, suite.baseline_for(gpu.name, check))
    record.add(check, f"{pageable:.1f} GB/s", verdict if verdict.verdict != NO_REFERENCE else INFO, gpu=gpu.uuid, value=pageable)
    record.finish()


def _training(suite, record, torch, device: str, gpu_name: str | None, uuid: str | None, steps: int, batch: int) -> None:
    result = bench.train_cnn(torch, device, steps=steps, batch=batch)
    where = "gpu" if uuid else "cpu"
    record.add(
        f"cnn training loss ({where}, {result['amp_dtype']} autocast)",
        f"{result['first_loss']:.3f} -> {result['last_loss']:.3f}",
        loss_falls_verdict(result["first_loss"], result["last_loss"]),
        gpu=uuid,
    )
    check = f"cnn training samples/s ({where})"
    verdict = throughput_verdict(check, result["samples_per_s"], None, suite.baseline_for(gpu_name, check))
    record.add(check, f"{result['samples_per_s']:.0f} samples/s", verdict, gpu=uuid, value=result["samples_per_s"], seconds=0)
    record.finish()


def test_training_loop_gpu(gpu, torch, cuda_device, suite, record):
    """A small CNN trained with mixed precision on this GPU: the loss falls; samples/s reported."""
    _training(suite, record, torch, cuda_device, gpu.name, gpu.uuid, size(suite, "train_steps_gpu"), size(suite, "train_batch_gpu"))


def test_training_loop_cpu(torch, suite, record):
    """The same CNN on the CPU (bf16 autocast): proves the framework trains even without a GPU."""
    _training(suite, record, torch, "cpu", None, None, CPU_TRAIN_STEPS, CPU_TRAIN_BATCH)


def test_nccl_all_reduce(torch, suite, record):
    """All-reduce bus bandwidth over NCCL across every GPU (as nccl-tests reports busbw)."""
    suite.require_gpus()
    count = len(suite.host.gpus)
    if count < 2:
        pytest.skip(f"all-reduce needs 2 or more GPUs; NVML sees {count}")
    if torch.version.cuda is None:
        pytest.fail("PyTorch is a CPU build: no NCCL", pytrace=False)
    result = run_probe(["allreduce", str(size(suite, "allreduce_bytes")), "10" if suite.quick else "20"], {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    if result.error or result.data is None:
        pytest.fail(f"NCCL all-reduce failed: {result.error}", pytrace=False)
    busbw = float(result.data["busbw_gbs"])
    check = f"nccl all-reduce busbw GB/s ({result.data['world']} GPUs)"
    verdict = throughput_verdict(check, busbw, None, suite.baseline_for(suite.host.gpus[0].name, check))
    record.add(check, f"{busbw:.1f} GB/s (NCCL {result.data['nccl']})", verdict, value=busbw, seconds=result.seconds)
    record.finish()
