"""PyTorch measurements for the speed checks, timed the way GPUs must be timed.

Every figure is the median of several repeats after warm-up; GPU work is timed with CUDA events
(recorded on the stream, read after the end event has completed), never with host clocks around
asynchronous launches. `torch` is passed in so this module imports without it.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any, Callable

WARMUP = 3


def _device_index(torch: Any, device: str | int) -> int:
    """'cuda:3' -> 3 (torch.device(...).index); a bare 'cuda' means the current device."""
    if isinstance(device, int):
        return device
    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else int(index)


def _time_cuda(
    torch: Any, device: str | int, work: Callable[[], None], repeats: int, inner: int
) -> float:
    """Median seconds of one `work()` call on `device`, timed with CUDA events over `inner` calls.

    Everything happens inside `torch.cuda.device(device)`: the events are recorded on that
    device's current stream and synchronised there. Recorded on the process's current device
    (GPU 0) instead, GPUs 1..7 would time only the launches and report many times their peak.
    """
    index = _device_index(torch, device)
    with torch.cuda.device(index):
        stream = torch.cuda.current_stream(index)
        for _ in range(WARMUP):
            work()
        torch.cuda.synchronize(index)
        samples = []
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(inner):
                work()
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1000.0 / inner)
    return statistics.median(samples)


def fp32_precision_setter(torch: Any) -> Callable[[str], Callable[[], None]]:
    """A function that sets float32 matmul precision to "tf32" or "ieee" and returns a restorer.

    PyTorch 2.9 deprecates torch.set_float32_matmul_precision for
    torch.backends.cuda.matmul.fp32_precision; older releases only have the former.
    """
    matmul = torch.backends.cuda.matmul
    try:
        previous = matmul.fp32_precision
    except (AttributeError, RuntimeError):
        previous = None
    if previous is not None:

        def set_new(mode: str) -> Callable[[], None]:
            matmul.fp32_precision = mode
            return lambda: setattr(matmul, "fp32_precision", previous)

        return set_new
    old = torch.get_float32_matmul_precision()

    def set_old(mode: str) -> Callable[[], None]:
        torch.set_float32_matmul_precision("high" if mode == "tf32" else "highest")
        return lambda: torch.set_float32_matmul_precision(old)

    return set_old


def precisions_for(capability: str | None) -> list[str]:
    """The matmul precisions a GPU of this compute capability runs on Tensor Cores (or plain fp32
    before Volta): tf32 and bf16 from Ampere (8.0), fp16 from Volta (7.0)."""
    major = int((capability or "0.0").split(".")[0])
    if major >= 8:
        return ["fp32", "tf32", "bf16"]
    return ["fp32", "fp16"] if major >= 7 else ["fp32"]


#: Matmul size for the speed floors: the per-model references were measured at this n (at
#: n = 4096 a bf16 product sits well below its large-matrix throughput on an H100).
MATMUL_N = 8192


def matmul_tflops(
    torch: Any, device: str, precision: str, n: int = MATMUL_N, repeats: int = 5, inner: int = 10
) -> float:
    """Dense n x n matrix multiply throughput in TFLOPS (2 n^3 flops per product).

    precision: "fp32" (full IEEE fp32, TF32 off), "tf32" (fp32 inputs on TF32 Tensor Cores),
    "bf16" or "fp16" (half-precision inputs, fp32 accumulate).
    """
    dtype = {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }[precision]
    restore = fp32_precision_setter(torch)("tf32" if precision == "tf32" else "ieee")
    try:
        with torch.cuda.device(_device_index(torch, device)):
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            out = torch.empty(n, n, device=device, dtype=dtype)
        seconds = _time_cuda(torch, device, lambda: torch.mm(a, b, out=out), repeats, inner)
    finally:
        restore()
    return 2 * n**3 / seconds / 1e12


def device_copy_gbs(
    torch: Any, device: str, nbytes: int, repeats: int = 5, inner: int = 5
) -> float:
    """Device-memory bandwidth in GB/s from a device-to-device copy (reads + writes nbytes each)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _time_cuda(torch, device, lambda: dst.copy_(src), repeats, inner)
    return 2 * nbytes / seconds / 1e9


def host_to_device_gbs(
    torch: Any, device: str, nbytes: int, pinned: bool, repeats: int = 5
) -> float:
    """Host-to-device copy bandwidth in GB/s from pinned or pageable host memory."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    seconds = _time_cuda(torch, device, lambda: target.copy_(host, non_blocking=pinned), repeats, 1)
    return nbytes / seconds / 1e9


def _small_cnn(torch: Any, classes: int) -> Any:
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, classes),
    )


def _grad_scaler(torch: Any, enabled: bool) -> Any:
    """fp16 needs loss scaling; torch.amp.GradScaler is 2.3+, older images have torch.cuda.amp's."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def train_cnn(
    torch: Any, device: str, steps: int, batch: int, image: int = 32, classes: int = 10
) -> dict[str, Any]:
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
        losses.append(
            loss.detach()
        )  # read after the loop: a .item() per step would serialise the GPU
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


def _load_one_gpu(
    torch: Any,
    device: str,
    precision: str,
    n: int,
    stop: threading.Event,
    ready: threading.Barrier,
    out: dict[str, float],
) -> None:
    """One GPU's share of the sustained load, in its own thread: matmuls until `stop`, at most two
    rounds queued, timed with CUDA events on this GPU's stream. Its figure is its own work over its
    own time, whatever the other GPUs do."""
    dtypes = {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }
    index = _device_index(torch, device)
    with torch.cuda.device(index):  # the current device is per thread in PyTorch
        a = torch.randn(n, n, device=device, dtype=dtypes[precision])
        b = torch.randn(n, n, device=device, dtype=dtypes[precision])
        product = torch.empty_like(a)
        stream = torch.cuda.current_stream(index)
        ready.wait()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        previous = None
        rounds = 0
        while not stop.is_set():
            for _ in range(SUSTAINED_PER_ROUND):
                torch.mm(a, b, out=product)
            event = torch.cuda.Event()
            event.record(stream)
            if previous is not None:
                previous.synchronize()  # keeps one round queued behind the running one
            previous = event
            rounds += 1
        end.record(stream)
        end.synchronize()
        seconds = start.elapsed_time(end) / 1000.0
    out[device] = (
        2 * n**3 * SUSTAINED_PER_ROUND * rounds / seconds / 1e12 if seconds > 0 else float("nan")
    )


#: Products per round of the sustained load (a round is what one GPU has queued at most twice).
SUSTAINED_PER_ROUND = 4


def sustained_load(
    torch: Any,
    devices: dict[str, str],
    seconds: float,
    sample: Callable[[], None],
    every: float = 0.5,
    n: int = MATMUL_N,
) -> dict[str, float]:
    """Keep every GPU in `devices` ({device: precision}) busy at once with matmuls for `seconds`,
    calling `sample()` about every `every` seconds; returns each device's own TFLOPS over the load.

    Each GPU is driven by its own thread and timed on its own stream, so a slow GPU slows only its
    own figure: eight GPUs report eight figures, not the slowest one's eight times (one thread
    waiting on every GPU in turn ran them in lockstep). n is the speed check's size, so the
    figures compare with the same measured references.
    """
    stop = threading.Event()
    ready = threading.Barrier(len(devices) + 1)
    figures: dict[str, float] = {}
    errors: list[BaseException] = []

    def run(device: str, precision: str) -> None:
        try:
            _load_one_gpu(torch, device, precision, n, stop, ready, figures)
        except BaseException as err:  # re-raised in the caller's thread below
            errors.append(err)
            ready.abort()

    threads = [
        threading.Thread(target=run, args=item, name=f"load-{item[0]}", daemon=True)
        for item in devices.items()
    ]
    for thread in threads:
        thread.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass
    started = last_sample = time.perf_counter()
    try:
        if not errors:
            sample()
        while not errors and time.perf_counter() - started < seconds:
            time.sleep(min(every / 5, max(seconds - (time.perf_counter() - started), 0)))
            if time.perf_counter() - last_sample >= every:
                sample()
                last_sample = time.perf_counter()
        if not errors:
            sample()  # the last one while the GPUs are still loaded
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return figures
