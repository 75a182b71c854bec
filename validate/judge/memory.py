"""The memory rules: TensorFlow's memory growth on and off, PyTorch's caching allocator holding
and releasing, and the /dev/shm size NCCL and DataLoader workers need."""

from __future__ import annotations

from validate.judge.verdict import FAIL, INFO, PASS, SKIP, Verdict, at_least

#: With memory growth on, a small computation holds the CUDA context (0.3-1.2 GiB, depending on
#: the GPU, the framework's kernels and CUDA_MODULE_LOADING) and a few MiB of tensors: 2 GiB is a
#: generous ceiling; growth silently off maps about 90% of the GPU, far above it.
GROWTH_MAX_BYTES = 2 * 2**30

#: ... and on a small GPU, never more than half of it.
GROWTH_MAX_FRACTION = 0.5

#: With growth off, TensorFlow maps most of the free memory (about 90% by default).
NO_GROWTH_MIN_FRACTION = 0.5


def growth_on_verdict(used_bytes: int, total_bytes: int | None) -> Verdict:
    """Memory growth on: a small computation keeps little (the context and a few MiB)."""
    limit = (
        GROWTH_MAX_BYTES
        if not total_bytes
        else min(GROWTH_MAX_BYTES, GROWTH_MAX_FRACTION * total_bytes)
    )
    threshold = f"<= {limit / 2**30:.1f} GiB"
    if used_bytes <= limit:
        return Verdict(PASS, threshold)
    return Verdict(
        FAIL, threshold, f"holds {used_bytes / 2**30:.2f} GiB: memory growth is not in effect"
    )


def growth_off_verdict(used_bytes: int, free_before_bytes: int) -> Verdict:
    """Memory growth off: TensorFlow maps most of the free memory (shows the check can fail)."""
    minimum = NO_GROWTH_MIN_FRACTION * free_before_bytes
    threshold = f">= {NO_GROWTH_MIN_FRACTION:.2f} x {free_before_bytes / 2**30:.1f} GiB free"
    if used_bytes >= minimum:
        return Verdict(PASS, threshold)
    return Verdict(
        FAIL,
        threshold,
        f"holds only {used_bytes / 2**30:.2f} GiB with growth off: the measurement is not seeing "
        "it",
    )


def cache_holds_verdict(used_after_free: int, allocated: int) -> Verdict:
    """PyTorch's caching allocator keeps freed blocks: NVML still counts them until
    empty_cache()."""
    minimum = int(0.9 * allocated)
    return at_least(
        used_after_free, minimum, f">= 0.9 x {allocated / 2**30:.2f} GiB freed", "bytes held"
    )


def cache_released_verdict(
    used_after_empty: int, used_before_alloc: int, allocated: int
) -> Verdict:
    """After empty_cache() (or with caching off) the freed block goes back to the driver."""
    limit = used_before_alloc + allocated // 4
    threshold = f"<= {limit / 2**30:.2f} GiB"
    if used_after_empty <= limit:
        return Verdict(PASS, threshold)
    return Verdict(FAIL, threshold, f"still holds {used_after_empty / 2**30:.2f} GiB after release")


#: NCCL's shared-memory transport and PyTorch's DataLoader workers need more than Docker's
#: default 64 MB /dev/shm; NVIDIA's NCCL troubleshooting guide runs containers with
#: --shm-size=1g (or --ipc=host).
MIN_SHM_BYTES = 1 * 2**30


def shm_verdict(shm_bytes: int | None, gpus: int) -> Verdict:
    threshold = f">= {MIN_SHM_BYTES / 2**30:.0f} GiB"
    if shm_bytes is None:
        return Verdict(SKIP, threshold, "/dev/shm is not mounted here")
    if shm_bytes >= MIN_SHM_BYTES:
        return Verdict(PASS, threshold)
    verdict = FAIL if gpus >= 2 else INFO
    return Verdict(
        verdict,
        threshold,
        f"/dev/shm holds only {shm_bytes / 2**20:.0f} MiB: NCCL across GPUs and DataLoader "
        "workers need more; run the container with --shm-size=1g or --ipc=host",
    )
