"""Verdicts from measurements: pure functions, unit-tested on recorded observations.

A threshold here is the line between "this server is healthy" and "something is wrong with it"
(power capped, thermally throttled, a degraded PCIe link, a wrong driver), not a tuning target:
good servers land far above the fractions of peak below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PASS = "pass"
FAIL = "fail"
SKIP = "skip"
INFO = "info"  # reported figure without a pass/fail line (e.g. pageable copies)
NO_REFERENCE = "no reference"  # unknown GPU model and no baseline: measured, not judged

#: Lowest healthy fraction of the datasheet peak per metric. Matmul at the sizes we time reaches
#: 0.8-0.95 of fp32 peak and 0.6-0.8 of Tensor Core peaks on healthy data-centre GPUs; a copy
#: kernel reaches 0.8-0.9 of the memory bandwidth. Half of that means a sick server.
MIN_FRACTION_OF_PEAK = {
    "fp32_tflops": 0.5,
    "tf32_tflops": 0.35,
    "bf16_tflops": 0.35,
    "fp16_tflops": 0.35,
    "memory_bandwidth_gbs": 0.5,
}
#: A server of the same model may be this much slower than the saved known-good baseline.
BASELINE_TOLERANCE = 0.15
#: Usable bytes/s per PCIe lane after line encoding, by generation (GB/s).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
#: Pinned host-to-device copies reach 0.8-0.9 of the link; below half the link is degraded.
MIN_FRACTION_OF_PCIE = 0.5
#: With memory growth on, a small computation should hold at most this share of the GPU.
GROWTH_MAX_FRACTION = 0.25
#: With growth off, TensorFlow maps most of the free memory (about 90% by default).
NO_GROWTH_MIN_FRACTION = 0.5
#: A training loop "learns" when its loss falls by at least this share.
MIN_LOSS_DROP = 0.3


@dataclass(frozen=True)
class Verdict:
    """The outcome of one comparison: verdict word, the threshold in words, and why."""

    verdict: str
    threshold: str
    reason: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict == FAIL


def _at_least(measured: float, minimum: float, threshold: str, what: str) -> Verdict:
    if measured >= minimum:
        return Verdict(PASS, threshold)
    return Verdict(FAIL, threshold, f"{what} {measured:.4g} is below {minimum:.4g}")


def throughput_verdict(
    metric: str,
    measured: float,
    peak: float | None,
    baseline: float | None = None,
    tolerance: float = BASELINE_TOLERANCE,
) -> Verdict:
    """Judge a higher-is-better figure against a baseline (preferred) or the datasheet peak."""
    if baseline is not None:
        minimum = baseline * (1 - tolerance)
        return _at_least(
            measured, minimum, f">= {1 - tolerance:.2f} x baseline {baseline:.4g}", metric
        )
    if peak is not None and metric in MIN_FRACTION_OF_PEAK:
        fraction = MIN_FRACTION_OF_PEAK[metric]
        return _at_least(
            measured, fraction * peak, f">= {fraction:.2f} x peak {peak:.4g}", metric
        )
    return Verdict(NO_REFERENCE, "no datasheet peak, no --baseline")


def pcie_link_theoretical_gbs(generation: int | None, width: int | None) -> float | None:
    """Usable one-direction bandwidth of a PCIe link (GB/s), or None when unknown."""
    if not generation or not width or generation not in PCIE_LANE_GBS:
        return None
    return PCIE_LANE_GBS[generation] * width


def host_to_device_verdict(measured_gbs: float, generation: int | None, width: int | None) -> Verdict:
    """Pinned host-to-device copies against the link NVML says the GPU can run at."""
    link = pcie_link_theoretical_gbs(generation, width)
    if link is None:
        return Verdict(NO_REFERENCE, "PCIe link generation/width unknown")
    return _at_least(
        measured_gbs,
        MIN_FRACTION_OF_PCIE * link,
        f">= {MIN_FRACTION_OF_PCIE:.2f} x PCIe gen{generation} x{width} ({link:.1f} GB/s)",
        "pinned host-to-device GB/s",
    )


def pcie_width_verdict(current: int | None, maximum: int | None) -> Verdict:
    """A link trained narrower than the GPU and slot allow (x8 of x16) halves every copy."""
    if current is None or maximum is None:
        return Verdict(SKIP, "link width not reported", "NVML does not report the PCIe link width")
    if current >= maximum:
        return Verdict(PASS, f"x{maximum}")
    return Verdict(FAIL, f"x{maximum}", f"PCIe link runs at x{current}, the GPU and slot allow x{maximum}")


def ecc_verdict(uncorrected: int | None) -> Verdict:
    if uncorrected is None:
        return Verdict(SKIP, "0 uncorrected", "ECC is off or not reported on this GPU")
    if uncorrected == 0:
        return Verdict(PASS, "0 uncorrected")
    return Verdict(FAIL, "0 uncorrected", f"{uncorrected} uncorrected ECC errors since the driver loaded")


def throttle_verdict(reasons: list[str] | None, bad: frozenset[str]) -> Verdict:
    if reasons is None:
        return Verdict(SKIP, "no thermal/power-brake slowdown", "NVML does not report clock-event reasons")
    found = sorted(set(reasons) & bad)
    if not found:
        return Verdict(PASS, "no thermal/power-brake slowdown")
    return Verdict(FAIL, "no thermal/power-brake slowdown", "clocks held down by " + ", ".join(found))


def growth_on_verdict(used_bytes: int, total_bytes: int) -> Verdict:
    """Memory growth on: a small computation keeps a small share of the GPU."""
    limit = GROWTH_MAX_FRACTION * total_bytes
    threshold = f"<= {GROWTH_MAX_FRACTION:.2f} x {total_bytes / 2**30:.1f} GiB"
    if used_bytes <= limit:
        return Verdict(PASS, threshold)
    return Verdict(FAIL, threshold, f"holds {used_bytes / 2**30:.2f} GiB: memory growth is not in effect")


def growth_off_verdict(used_bytes: int, free_before_bytes: int) -> Verdict:
    """Memory growth off: TensorFlow maps most of the free memory (shows the check can fail)."""
    minimum = NO_GROWTH_MIN_FRACTION * free_before_bytes
    threshold = f">= {NO_GROWTH_MIN_FRACTION:.2f} x {free_before_bytes / 2**30:.1f} GiB free"
    if used_bytes >= minimum:
        return Verdict(PASS, threshold)
    return Verdict(
        FAIL, threshold, f"holds only {used_bytes / 2**30:.2f} GiB with growth off: the measurement is not seeing it"
    )


def cache_holds_verdict(used_after_free: int, allocated: int) -> Verdict:
    """PyTorch's caching allocator keeps freed blocks: NVML still counts them until empty_cache()."""
    minimum = int(0.9 * allocated)
    return _at_least(used_after_free, minimum, f">= 0.9 x {allocated / 2**30:.2f} GiB freed", "bytes held")


def cache_released_verdict(used_after_empty: int, used_before_alloc: int, allocated: int) -> Verdict:
    """After empty_cache() (or with caching off) the freed block goes back to the driver."""
    limit = used_before_alloc + allocated // 4
    threshold = f"<= {limit / 2**30:.2f} GiB"
    if used_after_empty <= limit:
        return Verdict(PASS, threshold)
    return Verdict(FAIL, threshold, f"still holds {used_after_empty / 2**30:.2f} GiB after release")


def loss_falls_verdict(first_loss: float, last_loss: float) -> Verdict:
    threshold = f"last <= {1 - MIN_LOSS_DROP:.2f} x first"
    if last_loss <= (1 - MIN_LOSS_DROP) * first_loss:
        return Verdict(PASS, threshold)
    return Verdict(FAIL, threshold, f"loss went from {first_loss:.4g} to {last_loss:.4g}: the model does not learn")


_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([a-z]?)$")


def kernel_image_verdict(compute_capability: str, arch_list: list[str]) -> Verdict:
    """Can a framework built for `arch_list` run kernels on a GPU of this compute capability?

    A cubin for sm_XY runs on the same major X with minor >= Y (an "a" variant only on X.Y itself);
    PTX for compute_XY is JIT-compiled for any GPU of capability >= X.Y.
    """
    major, minor = (int(part) for part in compute_capability.split("."))
    threshold = "compute capability covered by " + (",".join(arch_list) or "nothing")
    for arch in arch_list:
        match = _ARCH.match(arch.strip())
        if not match:
            continue
        kind, a_major, a_minor, suffix = match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)
        if kind == "sm" and suffix and (major, minor) == (a_major, a_minor):
            return Verdict(PASS, threshold)
        if kind == "sm" and not suffix and major == a_major and minor >= a_minor:
            return Verdict(PASS, threshold)
        if kind == "compute" and (major, minor) >= (a_major, a_minor):
            return Verdict(PASS, threshold)
    return Verdict(
        FAIL,
        threshold,
        f"no kernel image for sm_{major}{minor}: this build ships {', '.join(arch_list) or 'no CUDA kernels'}",
    )


def _major_minor(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    match = re.match(r"^(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def driver_runs_runtime_verdict(driver_cuda: str | None, runtime_cuda: str | None) -> Verdict:
    """The driver must support the CUDA major the framework was built with (minor: forward compat)."""
    driver, runtime = _major_minor(driver_cuda), _major_minor(runtime_cuda)
    threshold = f"driver CUDA >= {runtime_cuda}"
    if driver is None or runtime is None:
        return Verdict(SKIP, threshold, "driver or framework CUDA version unknown")
    if driver >= runtime:
        return Verdict(PASS, threshold)
    if driver[0] == runtime[0]:
        return Verdict(PASS, threshold, "older driver minor: runs through CUDA minor-version compatibility (no PTX JIT)")
    return Verdict(FAIL, threshold, f"the driver supports CUDA {driver_cuda}, the framework needs {runtime_cuda}: update the driver")


def public_version(version: str) -> str:
    """'2.5.1+cu121' -> '2.5.1' (the local build tag is compared separately through the CUDA field)."""
    return version.split("+", 1)[0]


def cudnn_version_text(version: int | None) -> str | None:
    """torch.backends.cudnn.version() is an int: 8902 is cuDNN 8.9.2, 90100 is cuDNN 9.1.0."""
    if not version:
        return None
    if version >= 10000:
        return f"{version // 10000}.{(version % 10000) // 100}.{version % 100}"
    return f"{version // 1000}.{(version % 1000) // 100}.{version % 100}"


def claims_verdict(claimed: dict[str, str | None], installed: dict[str, str | None]) -> Verdict:
    """Compare what the image's labels claim (framework version, CUDA, cuDNN) with what is installed.

    CUDA and cuDNN compare on major.minor; a claim of None or "cpu" for CUDA means no CUDA build.
    """
    problems: list[str] = []
    want_version = claimed.get("framework_version")
    have_version = installed.get("framework_version")
    if want_version and (have_version is None or public_version(have_version) != want_version):
        problems.append(f"framework {have_version} installed, image claims {want_version}")
    want_cuda = claimed.get("cuda")
    have_cuda = installed.get("cuda")
    if want_cuda == "cpu":
        if have_cuda:
            problems.append(f"CUDA {have_cuda} build installed, image claims a CPU build")
    elif want_cuda and _major_minor(want_cuda) != _major_minor(have_cuda):
        problems.append(f"built for CUDA {have_cuda}, image claims {want_cuda}")
    want_cudnn = claimed.get("cudnn")
    have_cudnn = installed.get("cudnn")
    if want_cudnn and _major_minor(want_cudnn) != _major_minor(have_cudnn):
        problems.append(f"cuDNN {have_cudnn} loaded, image claims {want_cudnn}")
    threshold = ", ".join(f"{k}={v}" for k, v in claimed.items() if v) or "nothing claimed"
    if problems:
        return Verdict(FAIL, threshold, "; ".join(problems))
    return Verdict(PASS, threshold)


@dataclass(frozen=True)
class GpuExpectation:
    """How many GPUs the run must see, and who asked (`--expect-gpus` or NVIDIA_VISIBLE_DEVICES)."""

    count: int
    exact: bool
    source: str

    def describe(self) -> str:
        return f"{'exactly' if self.exact else 'at least'} {self.count} GPU(s) ({self.source})"


def expected_gpus(
    option: int | None, nvidia_visible_devices: str | None, cpu_stack: bool = False
) -> GpuExpectation | None:
    """`--expect-gpus N` wins; else NVIDIA_VISIBLE_DEVICES (set by the NVIDIA container runtime
    and by CUDA base images) asking for "all" or a list means GPUs must be there, except in an
    image whose stack is a CPU build (gpuenv images set the variable for every stack)."""
    if option is not None:
        return GpuExpectation(option, exact=True, source=f"--expect-gpus {option}") if option > 0 else None
    if cpu_stack:
        return None
    value = (nvidia_visible_devices or "").strip()
    if value.lower() in ("", "void", "none"):
        return None
    source = f"NVIDIA_VISIBLE_DEVICES={value}"
    if value.lower() == "all":
        return GpuExpectation(1, exact=False, source=source)
    return GpuExpectation(len([v for v in value.split(",") if v.strip()]), exact=True, source=source)


def gpu_count_verdict(seen: int, expectation: GpuExpectation | None, who: str) -> Verdict:
    if expectation is None:
        return Verdict(PASS if seen else SKIP, "no expectation", "" if seen else f"{who} sees no GPU")
    ok = seen == expectation.count if expectation.exact else seen >= expectation.count
    if ok:
        return Verdict(PASS, expectation.describe())
    return Verdict(FAIL, expectation.describe(), f"{who} sees {seen} GPU(s), expected {expectation.describe()}")
