"""Check 1, environment: the driver and every GPU from NVML, the framework builds, and whether
the installed builds are the ones the image's labels claim."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from validate import nvml
from validate.thresholds import (
    Verdict,
    claims_verdict,
    cudnn_version_text,
    driver_runs_runtime_verdict,
    ecc_verdict,
    pcie_width_verdict,
    throttle_verdict,
)


def test_driver(suite, record):
    """NVIDIA driver and the CUDA version it supports."""
    if suite.host.error:
        suite.require_gpus()  # skips with NVML's reason, or fails when GPUs are expected
    record.add("driver version", suite.host.driver_version or "unknown")
    record.add("CUDA driver version", suite.host.cuda_driver_version or "unknown")


def test_gpu_health(gpu: nvml.GpuInfo, record):
    """One GPU's identity and health: ECC errors, PCIe link width, clock slowdowns, power limit."""
    record.add("gpu identity", f"{gpu.name} cc {gpu.compute_capability} {gpu.pci_bus_id}", gpu=gpu.uuid)
    record.add("memory", f"{gpu.memory_total_bytes / 2**30:.1f} GiB total, {gpu.memory_used_bytes / 2**30:.2f} GiB used", gpu=gpu.uuid)
    record.add("ecc uncorrected errors", str(gpu.ecc_uncorrected_volatile), ecc_verdict(gpu.ecc_uncorrected_volatile), gpu=gpu.uuid)
    record.add(
        "pcie link",
        f"gen{gpu.pcie_link_gen} x{gpu.pcie_link_width} (max gen{gpu.pcie_link_gen_max} x{gpu.pcie_link_width_max})",
        pcie_width_verdict(gpu.pcie_link_width, gpu.pcie_link_width_max),
        gpu=gpu.uuid,
    )
    record.add(
        "clock slowdown",
        ",".join(gpu.throttle_reasons or []) or ("none" if gpu.throttle_reasons is not None else "unknown"),
        throttle_verdict(gpu.throttle_reasons, nvml.BAD_THROTTLE_REASONS),
        gpu=gpu.uuid,
    )
    record.add("power limit", f"{gpu.power_limit_watts:.0f} W" if gpu.power_limit_watts else "unknown", gpu=gpu.uuid)
    record.finish()


def test_torch_build(torch, suite, record):
    """PyTorch's version, CUDA, cuDNN, NCCL and compiled architectures; the driver must run its CUDA."""
    info: dict[str, Any] = suite.frameworks["torch"]
    record.add("torch version", info["version"])
    record.add("torch CUDA / cuDNN / NCCL", f"{info['cuda'] or 'CPU build'} / {info['cudnn'] or '-'} / {info['nccl'] or '-'}")
    record.add("torch architectures", ",".join(info["arch_list"]) or "none (CPU build)")
    if info["cuda"] and not suite.host.error:
        record.add(
            "driver runs torch CUDA",
            f"driver CUDA {suite.host.cuda_driver_version}",
            driver_runs_runtime_verdict(suite.host.cuda_driver_version, info["cuda"]),
        )
    record.finish()


def test_tensorflow_build(tf_info, suite, record):
    """TensorFlow's version and build info (CUDA, cuDNN, compute capabilities)."""
    record.add("tensorflow version", tf_info["version"])
    record.add(
        "tensorflow CUDA / cuDNN",
        f"{tf_info['cuda_version'] or 'CPU build'} / {tf_info['cudnn_version'] or '-'}" if tf_info["is_cuda_build"] else "CPU build",
    )
    if tf_info["is_cuda_build"] and not suite.host.error:
        record.add(
            "driver runs tensorflow CUDA",
            f"driver CUDA {suite.host.cuda_driver_version}",
            driver_runs_runtime_verdict(suite.host.cuda_driver_version, tf_info["cuda_version"]),
        )
    record.finish()


def _stack_claims() -> dict[str, Any]:
    path = os.environ.get("GPUENV_STACK_FILE")
    if not path:
        pytest.skip("GPUENV_STACK_FILE is not set: not inside a gpuenv image, no claims to compare")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, json.JSONDecodeError) as err:
        pytest.fail(f"GPUENV_STACK_FILE={path} cannot be read: {err}", pytrace=False)


def test_stack_matches_image_labels(suite, record, request):
    """The framework build installed is the one the image's labels (stack.json) claim."""
    stack = _stack_claims()
    framework = stack.get("framework")
    # the build's CUDA (framework_cuda) can differ from the image's (`cuda`): older by the CUDA rule, or
    # newer within the major by minor-version compatibility; stack.json files without it predate that
    build_cuda = stack.get("framework_cuda") or stack.get("cuda")
    claimed = {"framework_version": stack.get("framework_version"), "cuda": build_cuda, "cudnn": stack.get("cudnn")}
    if framework == "torch":
        info = request.getfixturevalue("torch") and suite.frameworks["torch"]
        installed = {"framework_version": info["version"], "cuda": info["cuda"], "cudnn": cudnn_version_text(info["cudnn"])}
    elif framework == "tensorflow":
        tf = request.getfixturevalue("tf_info")
        installed = {"framework_version": tf["version"], "cuda": tf["cuda_version"], "cudnn": tf["cudnn_version"]}
    else:
        pytest.fail(f"stack file names framework {framework!r}, expected torch or tensorflow", pytrace=False)
    measured = ", ".join(f"{k}={v}" for k, v in installed.items() if v)
    verdict: Verdict = claims_verdict(claimed, installed)
    record.add(f"{framework} build vs {stack.get('stack_id', 'image labels')}", measured, verdict)
    record.finish()
