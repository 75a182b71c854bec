"""Timing on the right GPU (issue 11 item 1) and the float32-precision API (item 10), on real
PyTorch where it can run here (CPU build) and on a recording stand-in for torch.cuda where only
a GPU could run it: the stand-in records which device is current at every CUDA call."""

from __future__ import annotations

import types

import torch

from validate import bench


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

        class Device:
            def __init__(self, index: int) -> None:
                self.index, self.previous = index, 0

            def __enter__(self) -> None:
                self.previous, outer.current = outer.current, self.index

            def __exit__(self, *exc: object) -> None:
                outer.current = self.previous

        self.Event, self.device = Event, Device

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
    seconds = bench._time_cuda(_fake_torch(cuda), "cuda:5", lambda: launches.append(cuda.current), repeats=3, inner=2)
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


def test_sustained_load_keeps_every_gpu_busy_and_samples_meanwhile():
    """The load loop with real CPU matmuls standing in for GPU kernels: every device gets work in
    every round, launched with that device current, and NVML is sampled during the load."""
    cuda = RecordingCuda()
    launched: dict[int, int] = {}

    def mm(a, b, out):
        launched[cuda.current] = launched.get(cuda.current, 0) + 1
        return torch.mm(a, b, out=out)

    fake = types.SimpleNamespace(
        cuda=cuda, device=torch.device, float32=torch.float32, bfloat16=torch.bfloat16, float16=torch.float16,
        randn=lambda n, m, device, dtype: torch.randn(n, m, dtype=torch.float32),
        empty_like=torch.empty_like, mm=mm,
    )
    cuda.Event.__init__ = lambda self, enable_timing=False: setattr(self, "device", None)  # type: ignore[method-assign]
    samples: list[float] = []
    tflops = bench.sustained_load(fake, {"cuda:0": "bf16", "cuda:3": "fp32"}, 0.3, lambda: samples.append(0.0), every=0.05, n=64)
    assert set(tflops) == {"cuda:0", "cuda:3"} and all(v > 0 for v in tflops.values())
    assert set(launched) == {0, 3} and launched[0] == launched[3] >= 4
    assert len(samples) >= 4  # first, a few during, last
    assert cuda.current == 0
