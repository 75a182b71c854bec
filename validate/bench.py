"""PyTorch measurements for the speed checks, timed the way GPUs must be timed.

Every figure is the median of several repeats after warm-up; GPU work is timed with CUDA events
(recorded on the stream, read after the end event has completed), never with host clocks around
asynchronous launches. `torch` is passed in so this module imports without it.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

WARMUP = 3


def _time_cuda(torch: Any, work: Callable[[], None], repeats: int, inner: int) -> float:
    """Median seconds of one `work()` call, timed with CUDA events over `inner` calls per repeat."""
    for _ in range(WARMUP):
        work()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            work()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1000.0 / inner)
    return statistics.median(samples)


def matmul_tflops(torch: Any, device: str, precision: str, n: int, repeats: int = 5, inner: int = 10) -> float:
    """Dense n x n matrix multiply throughput in TFLOPS (2 n^3 flops per product).

    precision: "fp32" (full IEEE fp32, TF32 off), "tf32" (fp32 inputs on TF32 Tensor Cores),
    "bf16" or "fp16" (half-precision inputs, fp32 accumulate).
    """
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        seconds = _time_cuda(torch, lambda: torch.mm(a, b, out=out), repeats, inner)
    finally:
        torch.set_float32_matmul_precision(previous)
    return 2 * n**3 / seconds / 1e12


def device_copy_gbs(torch: Any, device: str, nbytes: int, repeats: int = 5, inner: int = 5) -> float:
    """Device-memory bandwidth in GB/s from a device-to-device copy (reads + writes nbytes each)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _time_cuda(torch, lambda: dst.copy_(src), repeats, inner)
    return 2 * nbytes / seconds / 1e9


def host_to_device_gbs(torch: Any, device: str, nbytes: int, pinned: bool, repeats: int = 5) -> float:
    """Host-to-device copy bandwidth in GB/s from pinned or pageable host memory."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    seconds = _time_cuda(torch, lambda: target.copy_(host, non_blocking=pinned), repeats, 1)
    return nbytes / seconds / 1e9


def _small_cnn(torch: Any, classes: int) -> Any:
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, classes),
    )


def _grad_scaler(torch: Any, enabled: bool) -> Any:
    """fp16 needs loss scaling; torch.amp.GradScaler is 2.3+, older images have torch.cuda.amp's."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def train_cnn(torch: Any, device: str, steps: int, batch: int, image: int = 32, classes: int = 10) -> dict[str, Any]:
    """Train a small CNN on synthetic, learnable data with mixed precision.

    Each class is a fixed random image; samples are that image plus noise, so a working stack
    learns it within a few dozen steps. Returns first/last loss (mean of 3 steps) and samples/s
    over the steps after warm-up.
    """
    generator = torch.Generator().manual_seed(0)
    prototypes = torch.randn(classes, 3, image, image, generator=generator)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _small_cnn(torch, classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    is_cuda = device.startswith("cuda")
    if is_cuda:
        amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        amp_dtype = torch.bfloat16
    scaler = _grad_scaler(torch, enabled=is_cuda and amp_dtype == torch.float16)
    batches = []
    for _ in range(min(steps, 8)):
        labels = torch.randint(0, classes, (batch,), generator=generator)
        inputs = prototypes[labels] + 0.5 * torch.randn(batch, 3, image, image, generator=generator)
        batches.append((inputs.to(device), labels.to(device)))
    losses: list[Any] = []
    timed_from = None
    for number in range(steps):
        if number == WARMUP:
            if is_cuda:
                torch.cuda.synchronize()
            timed_from = time.perf_counter()
        inputs, labels = batches[number % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda" if is_cuda else "cpu", dtype=amp_dtype):
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.detach())  # read after the loop: a .item() per step would serialise the GPU
    if is_cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - (timed_from or time.perf_counter())
    timed_steps = max(steps - WARMUP, 1)
    values = [float(loss) for loss in losses]
    return {
        "first_loss": statistics.mean(values[:3]),
        "last_loss": statistics.mean(values[-3:]),
        "samples_per_s": timed_steps * batch / elapsed if elapsed > 0 else float("nan"),
        "amp_dtype": str(amp_dtype).replace("torch.", ""),
        "steps": steps,
        "batch": batch,
    }
