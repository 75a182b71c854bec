"""Check 5, training speed: matmul throughput and memory bandwidth against floors from
gpu_peaks.yaml (75% of a measured per-model reference, DCGM's rule, else 0.55 of the datasheet,
which still catches half speed; the threshold column says which), host-to-device copies against
the PCIe link, a small mixed-precision CNN training loop (GPU and CPU) whose loss must fall, and
NCCL all-reduce bus bandwidth against a floor for the interconnect (NVLink or PCIe).

Unknown GPU models get the figure with verdict "no reference"; `--baseline` compares with a
known-good server of the same model instead, and wins over both rules."""

from __future__ import annotations

import pytest

from validate import bench
from validate.peaks import interconnect_of, load_interconnects, nccl_floor
from validate.subproc import run_probe
from validate.thresholds import (
    INFO,
    NO_REFERENCE,
    Verdict,
    host_to_device_verdict,
    loss_falls_verdict,
    throughput_verdict,
)

SIZES = {
    # quick, full. Matmuls stay at n = 8192 in both: the references were measured there.
    "matmul_repeats": (3, 5),
    "copy_bytes": (1024 * 2**20, 1024 * 2**20),
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
    """Measured text and verdict for a higher-is-better figure: baseline, else the measured
    reference, else the datasheet peak."""
    peak = suite.peak(gpu_name, metric) if gpu_name else None
    reference = suite.reference(gpu_name, metric) if gpu_name else None
    verdict = throughput_verdict(
        metric, value, peak, suite.baseline_for(gpu_name, check),
        reference=reference[0] if reference else None, reference_note=reference[1] if reference else "",
    )
    measured = f"{value:.1f} {unit}" + (f" ({value / peak:.0%} of datasheet)" if peak else "")
    return measured, verdict


def _precisions(capability: str | None) -> list[str]:
    major = int((capability or "0.0").split(".")[0])
    if major >= 8:
        return ["fp32", "tf32", "bf16"]
    return ["fp32", "fp16"] if major >= 7 else ["fp32"]


def test_matmul_throughput(gpu, torch, cuda_device, suite, record):
    """fp32, tf32 and bf16/fp16 matrix-multiply TFLOPS against the datasheet peak."""
    repeats = size(suite, "matmul_repeats")
    for precision in _precisions(gpu.compute_capability):
        tflops = bench.matmul_tflops(torch, cuda_device, precision, bench.MATMUL_N, repeats=repeats, inner=2 * repeats)
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
    )  # the link GPU and slot allow; a GPU trained below its own generation fails the load check
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


@pytest.mark.isolated
def test_nccl_all_reduce(torch, suite, record):
    """All-reduce bus bandwidth over NCCL across every GPU PyTorch sees (as nccl-tests reports
    busbw), against the floor for the interconnect (NVLink or PCIe)."""
    suite.require_gpus()
    if torch.version.cuda is None:
        pytest.fail("PyTorch is a CPU build: no NCCL", pytrace=False)
    if suite.host.mig_gpus:
        pytest.skip("a GPU is in MIG mode: NCCL does not run across MIG instances")
    # The world is what PyTorch (and so each worker) can use, not what NVML lists: masking and
    # MIG make them differ.
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        pytest.skip(f"all-reduce needs 2 or more GPUs; PyTorch sees {count}")
    result = run_probe(["allreduce", str(size(suite, "allreduce_bytes")), "10" if suite.quick else "20"], {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    if result.error or result.data is None:
        pytest.fail(f"NCCL all-reduce failed: {result.error}", pytrace=False)
    busbw = float(result.data["busbw_gbs"])
    check = f"nccl all-reduce busbw GB/s ({result.data['world']} GPUs)"
    baseline = suite.baseline_for(suite.host.gpus[0].name, check)
    kind, link = interconnect_of(suite.host.gpus, suite.peaks)
    floor = nccl_floor(kind, link, load_interconnects())
    if baseline is not None or floor is None:
        verdict = throughput_verdict(check, busbw, None, baseline)
    else:
        minimum, rule = floor
        verdict = Verdict("pass", rule) if busbw >= minimum else Verdict("fail", rule, f"{kind} all-reduce busbw {busbw:.1f} GB/s is below {minimum:.1f}")
    record.add(check, f"{busbw:.1f} GB/s over {kind} (NCCL {result.data['nccl']})", verdict, value=busbw, seconds=result.seconds)
    record.finish()
