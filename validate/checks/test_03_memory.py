"""Check 3, memory behaviour, measured from outside fresh processes through NVML.

TensorFlow: with memory growth on (set in code, or TF_FORCE_GPU_ALLOW_GROWTH=true) a small
computation holds little; with growth off it maps most of the GPU, which proves the measurement
can see a failure. PyTorch: the caching allocator keeps freed blocks until empty_cache(), and
the allocator settings from the environment (PYTORCH_NO_CUDA_MEMORY_CACHING,
PYTORCH_CUDA_ALLOC_CONF) are honoured.
"""

from __future__ import annotations

import importlib.util

import pytest

from validate.host import nvml
from validate.host.masking import DEVICE_ORDER
from validate.judge.memory import (
    cache_holds_verdict,
    cache_released_verdict,
    growth_off_verdict,
    growth_on_verdict,
)
from validate.judge.verdict import FAIL, PASS, Verdict
from validate.measure.memory_modes import (
    QUICK_MODES,
    SHARED_TF_MODE,
    TF_MODES,
    TORCH_MODES,
    outside_measurer,
)
from validate.measure.subproc import run_stepped_probe


def _first_gpu(suite) -> nvml.GpuInfo:
    """The first GPU the caller's CUDA_VISIBLE_DEVICES lets the suite use that is not in MIG mode
    (a mixed host keeps the check on its whole GPUs); the child is masked to it alone, which
    narrows the caller's mask, never widens it."""
    suite.require_gpus()
    visible = suite.visible_gpus()
    if not visible:
        pytest.skip(
            f"CUDA_VISIBLE_DEVICES={suite.caller_mask!r} hides every GPU NVML lists: nothing to "
            "measure"
        )
    whole = [g for g in visible if not g.mig_enabled]
    if not whole:
        pytest.skip(
            "every visible GPU is in MIG mode: memory is measured on whole GPUs (see the MIG check)"
        )
    gpu = whole[0]
    if gpu.memory_total_bytes is None:
        pytest.skip(
            f"NVML cannot read GPU {gpu.index}'s memory here, so the child's use cannot be measured"
        )
    return gpu


def _need(module: str, label: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{label} is not installed here (no module named {module!r})")


def _gib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 2**30:.2f} GiB"


def _skip_outside_quick(suite, mode: str) -> None:
    if suite.quick and mode not in QUICK_MODES:
        pytest.skip(f"--quick runs only {', '.join(sorted(QUICK_MODES))}")


@pytest.mark.isolated
@pytest.mark.parametrize("mode", list(TF_MODES))
def test_tensorflow_memory_growth(mode, suite, record):
    """TensorFlow's memory with growth on (code / environment) and off, seen from outside."""
    _need("tensorflow", "TensorFlow")
    gpu = _first_gpu(suite)
    _skip_outside_quick(suite, mode)
    # The TensorFlow info probe measured the first visible GPU on the way: only that one counts.
    shared = (
        suite.tf_memory_on_the_way()
        if mode == SHARED_TF_MODE and suite.visible_gpus()[0] is gpu
        else None
    )
    if shared is not None and shared[1].steps.get("small", {}).get("bytes") is not None:
        # The TensorFlow info probe runs with TF_FORCE_GPU_ALLOW_GROWTH=true and paused after its
        # small products for this measurement: no second TensorFlow start-up for the same thing.
        before, result = shared
    else:
        before, measure = outside_measurer(gpu.uuid, suite.nvml)
        env = {
            **TF_MODES[mode],
            "CUDA_VISIBLE_DEVICES": gpu.uuid,
            "CUDA_DEVICE_ORDER": DEVICE_ORDER,
        }  # within the caller's mask
        result = run_stepped_probe(["tf-memory", mode], env, measure)
    if result.error:
        pytest.fail(result.error, pytrace=False)
    held = result.steps.get("small", {}).get("bytes")
    if held is None:
        pytest.fail("NVML could not measure the child's GPU memory", pytrace=False)
    verdict = (
        growth_off_verdict(held, gpu.memory_total_bytes - before)
        if mode == "no-growth"
        else growth_on_verdict(held, gpu.memory_total_bytes)
    )
    record.add(
        f"tensorflow memory {mode}",
        f"{_gib(held)} ({result.steps['small']['method']})",
        verdict,
        gpu=gpu.uuid,
        seconds=result.seconds,
    )
    record.finish()


@pytest.mark.isolated
@pytest.mark.parametrize("mode", list(TORCH_MODES))
def test_torch_caching_allocator(mode, suite, record):
    """PyTorch's caching allocator and the allocator settings it reads from the environment."""
    _need("torch", "PyTorch")
    gpu = _first_gpu(suite)
    _skip_outside_quick(suite, mode)
    alloc = min(2 * 2**30, gpu.memory_total_bytes // 8)
    _, measure = outside_measurer(gpu.uuid, suite.nvml)
    env = {**TORCH_MODES[mode], "CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_DEVICE_ORDER": DEVICE_ORDER}
    result = run_stepped_probe(["torch-memory", mode, str(alloc)], env, measure)
    if result.error:
        pytest.fail(result.error, pytrace=False)
    small, freed, emptied = (
        result.steps.get(s, {}).get("bytes") for s in ("small", "freed", "emptied")
    )
    if small is None or freed is None or emptied is None:
        pytest.fail("NVML could not measure the child's GPU memory", pytrace=False)
    uuid = gpu.uuid
    record.add(
        f"torch {mode}: small work",
        _gib(small),
        growth_on_verdict(small, gpu.memory_total_bytes),
        gpu=uuid,
        seconds=result.seconds,
    )
    if mode == "caching":
        record.add(
            f"torch {mode}: freed block kept",
            _gib(freed),
            cache_holds_verdict(freed - small, alloc),
            gpu=uuid,
            seconds=0,
        )
        record.add(
            f"torch {mode}: empty_cache releases",
            _gib(emptied),
            cache_released_verdict(emptied, small, alloc),
            gpu=uuid,
            seconds=0,
        )
    elif mode == "no-caching":
        record.add(
            f"torch {mode}: freed block released",
            _gib(freed),
            cache_released_verdict(freed, small, alloc),
            gpu=uuid,
            seconds=0,
        )
    else:
        backend = (result.data or {}).get("allocator_backend")
        ok = backend == "cudaMallocAsync"
        record.add(
            f"torch {mode}: allocator backend",
            str(backend),
            Verdict(
                PASS if ok else FAIL,
                "cudaMallocAsync",
                "" if ok else "PYTORCH_CUDA_ALLOC_CONF was not honoured",
            ),
            gpu=uuid,
            seconds=0,
        )
        record.add(
            f"torch {mode}: empty_cache releases",
            _gib(emptied),
            cache_released_verdict(emptied, small, alloc),
            gpu=uuid,
            seconds=0,
        )
    record.finish()
