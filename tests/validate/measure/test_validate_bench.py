"""Timing on the right GPU (issue 11 item 1) and the float32-precision API (item 10), on real
PyTorch where it can run here (CPU build) and on a recording stand-in for torch.cuda where only
a GPU could run it: the stand-in records which device is current at every CUDA call."""

from __future__ import annotations

import threading
import time
import types
from typing import Any

import pytest
import torch
from hangbound import HANG_BOUND_S

from validate.measure import bench


def device_context(cuda: Any) -> type:
    """torch.cuda.device as both fakes need it: a context that makes `index` cuda.current inside
    it."""

    class Device:
        def __init__(self, index: int) -> None:
            self.index, self.previous = index, 0

        def __enter__(self) -> None:
            self.previous, cuda.current = cuda.current, self.index

        def __exit__(self, *exc: object) -> None:
            cuda.current = self.previous

    return Device


class RecordingCuda:
    """torch.cuda as far as bench uses it, recording (call, current device, argument)."""

    def __init__(self) -> None:
        self.current = 0
        self.log: list[tuple[str, int, object]] = []
        outer = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.device: int | None = None

            def record(self, stream: object = None) -> None:
                self.device = outer.current
                outer.log.append(("event.record", outer.current, stream))

            def synchronize(self) -> None:
                outer.log.append(("event.synchronize", outer.current, self.device))

            def elapsed_time(self, other: "Event") -> float:
                return 1.0

        self.Event, self.device = Event, device_context(self)

    def synchronize(self, device: int | None = None) -> None:
        self.log.append(("synchronize", self.current, device))

    def current_stream(self, device: int | None = None) -> str:
        return f"stream-of-{device if device is not None else self.current}"

    def current_device(self) -> int:
        return self.current


def _fake_torch(cuda: RecordingCuda) -> types.SimpleNamespace:
    return types.SimpleNamespace(cuda=cuda, device=torch.device)


def test_every_cuda_call_happens_on_the_timed_gpu():
    cuda = RecordingCuda()
    launches: list[int] = []
    seconds = bench._time_cuda(
        _fake_torch(cuda), "cuda:5", lambda: launches.append(cuda.current), repeats=3, inner=2
    )
    assert seconds == 1.0 / 1000.0 / 2
    assert set(launches) == {5}  # the work is launched with GPU 5 current
    assert cuda.log and all(device == 5 for _, device, _ in cuda.log), cuda.log
    assert ("synchronize", 5, 5) in cuda.log
    assert all(arg == "stream-of-5" for call, _, arg in cuda.log if call == "event.record")
    assert cuda.current == 0  # the caller's current device is restored


def test_device_index_reads_torch_device_strings():
    cuda = RecordingCuda()
    fake = _fake_torch(cuda)
    assert bench._device_index(fake, "cuda:7") == 7
    assert bench._device_index(fake, 3) == 3
    cuda.current = 2
    assert bench._device_index(fake, "cuda") == 2


def test_fp32_precision_uses_the_new_api_when_torch_has_it():
    """PyTorch 2.9+ has torch.backends.cuda.matmul.fp32_precision (the old setter is deprecated)."""
    before = torch.backends.cuda.matmul.fp32_precision
    restore = bench.fp32_precision_setter(torch)("tf32")
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    restore()
    assert torch.backends.cuda.matmul.fp32_precision == before


def test_fp32_precision_falls_back_on_old_torch():
    calls: list[str] = []
    old = types.SimpleNamespace(
        backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace())),
        get_float32_matmul_precision=lambda: "highest",
        set_float32_matmul_precision=calls.append,
    )
    restore = bench.fp32_precision_setter(old)("tf32")
    restore()
    assert calls == ["high", "highest"]


class ThreadCuda:
    """torch.cuda as far as the sustained load uses it: the current device is per thread (as
    PyTorch's is) and events carry the time they were recorded, so elapsed_time is the real time
    of the (CPU) work between them."""

    def __init__(self) -> None:
        self._local = threading.local()

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self, stream: object = None) -> None:
                self.at = time.perf_counter()

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: "Event") -> float:
                return (other.at - self.at) * 1000.0

        self.Event, self.device = Event, device_context(self)

    @property
    def current(self) -> int:
        return getattr(self._local, "current", 0)

    @current.setter
    def current(self, value: int) -> None:
        self._local.current = value

    def current_stream(self, device: int | None = None) -> str:
        return f"stream-of-{device}"

    def current_device(self) -> int:
        return self.current


def _fake_load_torch(
    cuda: ThreadCuda, slow: dict[int, float]
) -> tuple[types.SimpleNamespace, dict[int, int]]:
    launched: dict[int, int] = {}
    lock = threading.Lock()

    def mm(a, b, out):
        device = cuda.current
        with lock:
            launched[device] = launched.get(device, 0) + 1
        time.sleep(slow.get(device, 0.0))  # a slow GPU: each product takes longer there
        return torch.mm(a, b, out=out)

    fake = types.SimpleNamespace(
        cuda=cuda,
        device=torch.device,
        float32=torch.float32,
        bfloat16=torch.bfloat16,
        float16=torch.float16,
        randn=lambda n, m, device, dtype: torch.randn(n, m, dtype=torch.float32),
        empty_like=torch.empty_like,
        mm=mm,
    )
    return fake, launched


def test_sustained_load_measures_each_gpu_on_its_own_all_at_once():
    """Issue 17 item 8: with one slow GPU, the fast GPUs keep their own figures (before, one
    thread drove every GPU in turn, so all of them reported the slowest one's figure)."""
    cuda = ThreadCuda()
    fake, launched = _fake_load_torch(cuda, {3: 0.02})
    samples: list[float] = []
    tflops = bench.sustained_load(
        fake,
        {"cuda:0": "bf16", "cuda:1": "bf16", "cuda:3": "fp32"},
        0.6,
        lambda: samples.append(time.perf_counter()),
        every=0.05,
        n=64,
    )
    assert set(tflops) == {"cuda:0", "cuda:1", "cuda:3"} and all(v > 0 for v in tflops.values())
    assert set(launched) == {0, 1, 3}
    assert launched[0] > 3 * launched[3] and launched[1] > 3 * launched[3]  # not lockstep
    assert tflops["cuda:0"] > 3 * tflops["cuda:3"] and tflops["cuda:1"] > 3 * tflops["cuda:3"]
    assert len(samples) >= 5  # first, several during the load, last


def test_sustained_load_error_on_one_gpu_stops_the_others_and_is_raised():
    cuda = ThreadCuda()
    fake, _ = _fake_load_torch(cuda, {})
    real_randn = fake.randn

    def randn(n, m, device, dtype):
        if device == "cuda:2":
            raise RuntimeError("CUDA error: out of memory")
        return real_randn(n, m, device, dtype)

    fake.randn = randn
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="out of memory"):
        bench.sustained_load(fake, {"cuda:0": "bf16", "cuda:2": "bf16"}, 30.0, lambda: None, n=32)
    assert time.perf_counter() - started < HANG_BOUND_S  # not the whole 30 s


@pytest.mark.parametrize(
    ("capability", "precisions"),
    [
        ("9.0", ["fp32", "tf32", "bf16"]),
        ("8.9", ["fp32", "tf32", "bf16"]),
        ("7.5", ["fp32", "fp16"]),
        ("6.0", ["fp32"]),
        (None, ["fp32"]),
    ],
)
def test_precisions_follow_the_tensor_core_modes(capability, precisions):
    """Shared by PyTorch's and TensorFlow's matmul checks: T4 (7.5) has fp16 Tensor Cores, no
    bf16/tf32."""
    assert bench.precisions_for(capability) == precisions
