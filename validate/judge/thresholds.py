"""Verdicts from measurements: pure functions, unit-tested on recorded observations.

A threshold here is the line between "this server is healthy" and "something is wrong with it"
(power capped, thermally throttled, a degraded PCIe link, a wrong driver), not a tuning target:
healthy servers land well above the floors below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol


class ReferenceLike(Protocol):
    """What a verdict needs of a reference (validate.judge.peaks.ReferenceFigure; no import cycle)."""

    value: float
    confirmed: bool

    def describe(self) -> str: ...

PASS = "pass"
FAIL = "fail"
SKIP = "skip"
INFO = "info"  # reported figure without a pass/fail line (e.g. pageable copies)
WARN = "warn"  # works, but a user will notice (PTX JIT at first use): never fails the run
#: Measured, and shown, but no rule says whether it is good: no like-for-like reference for the
#: model (nor --baseline). Never a pass, never a fail; a saved baseline or the fleet median judges it.
NOT_JUDGED = "not judged"
NO_REFERENCE = NOT_JUDGED  # the old name, kept for code that imports it
#: Every word a report may carry for "measured, not judged" (reports before NOT_JUDGED say "no reference").
NOT_JUDGED_WORDS = (NOT_JUDGED, "no reference")

#: DCGM's rule: a GPU passes at 75% of what a healthy GPU of the same model measured with the same
#: method (NVIDIA/DCGM nvvs/diag-skus.yaml.in: every limit's comment gives the measured figure it
#: is 75% of). The measurements live in gpu_peaks.yaml, each with its public source. No floor is a
#: fraction of the datasheet: healthy power-capped parts (L4, T4) measure a third to a half of it.
REFERENCE_FRACTION = 0.75
#: Against an UNCONFIRMED reference (measured another way: DCGM's own SGEMM, a best-of-sizes table)
#: a figure below 75% only warns, but half speed still fails: below 0.55 of it. The widest gap
#: published between a healthy unit measured like the suite and such a figure is an L4's fp32 at
#: n=8192, 10.66 TFLOPS, against its best-of-sizes 15.38 (0.69; zzc0721/torch-performance-test-data#120).
UNCONFIRMED_FAIL_FRACTION = 0.55
#: A server of the same model may be this much slower than the saved known-good baseline.
BASELINE_TOLERANCE = 0.15
#: Usable bytes/s per PCIe lane after line encoding, by generation (GB/s).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
#: Pinned host-to-device copies reach 0.8-0.9 of the link; below half the link is degraded.
MIN_FRACTION_OF_PCIE = 0.5
#: With memory growth on, a small computation holds the CUDA context (0.3-1.2 GiB, depending on
#: the GPU, the framework's kernels and CUDA_MODULE_LOADING) and a few MiB of tensors: 2 GiB is a
#: generous ceiling; growth silently off maps about 90% of the GPU, far above it.
GROWTH_MAX_BYTES = 2 * 2**30
#: ... and on a small GPU, never more than half of it.
GROWTH_MAX_FRACTION = 0.5
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
    baseline: float | None = None,
    tolerance: float = BASELINE_TOLERANCE,
    reference: float | None = None,
    reference_note: str = "",
    confirmed: bool = True,
) -> Verdict:
    """Judge a higher-is-better figure, saying which rule set the floor:

    1. `--baseline` (this team's known-good server of the same model): within `tolerance`;
    2. a measured reference for the model (gpu_peaks.yaml): DCGM's 75%. A reference measured
       like the suite's own figure (`confirmed`) fails a GPU below it; below an unconfirmed one
       (another tool, another size) the GPU is warned about, and fails only below
       UNCONFIRMED_FAIL_FRACTION of it (half speed), so a healthy GPU is not failed on a figure
       that was not taken the same way;
    3. nothing: NOT_JUDGED, the figure is only recorded.
    """
    if baseline is not None:
        minimum = baseline * (1 - tolerance)
        return _at_least(measured, minimum, f">= {1 - tolerance:.2f} x baseline {baseline:.4g}", metric)
    if reference is not None:
        note = f" ({reference_note})" if reference_note else ""
        kind = "measured reference" if confirmed else "unconfirmed reference"
        threshold = f">= {REFERENCE_FRACTION:.2f} x {kind} {reference:.4g}{note}"
        verdict = _at_least(measured, REFERENCE_FRACTION * reference, threshold, metric)
        if verdict.failed and not confirmed:
            if measured < UNCONFIRMED_FAIL_FRACTION * reference:
                return Verdict(
                    FAIL, threshold,
                    f"{metric} {measured:.4g} is below {UNCONFIRMED_FAIL_FRACTION:.2f} x {reference:.4g}: about half speed or worse",
                )
            return Verdict(
                WARN, threshold,
                f"{verdict.reason}, but the reference was not measured like the suite's figure: "
                "confirm with --baseline from a known-good unit or the fleet median",
            )
        return verdict
    return Verdict(NOT_JUDGED, "no measured reference, no --baseline")


def mig_share(instance_sms: int | None, parent_sms: int | None) -> float | None:
    """A MIG instance's share of its GPU, by streaming multiprocessors (NVML's multiprocessor
    count of each); None when either is unknown, and then the instance's speed is not judged."""
    if not instance_sms or not parent_sms or instance_sms > parent_sms:
        return None
    return instance_sms / parent_sms


def judge_figure(
    metric: str,
    measured: float,
    reference: "ReferenceLike | None",
    baseline: float | None = None,
    mig: bool = False,
    share: float | None = None,
) -> Verdict:
    """A speed figure against the model's measured reference (gpu_peaks.yaml) or --baseline.

    For a MIG instance (`mig`) a TFLOPS reference is the parent GPU's scaled by the instance's share
    of SMs (`share`, see mig_share); with the share unknown, or for memory bandwidth (which follows
    memory slices, not SMs), the figure is not judged. A whole-GPU baseline says nothing about one
    instance, so it is not used there."""
    if mig:
        if not metric.endswith("_tflops"):
            return Verdict(
                NOT_JUDGED, "MIG instance: no share for this figure",
                "a MIG instance's memory bandwidth follows its memory slices, not its share of SMs",
            )
        if share is None:
            return Verdict(NOT_JUDGED, "MIG instance's share of SMs unknown", "NVML did not give the instance's or the GPU's multiprocessor count")
        if reference is None:
            return throughput_verdict(metric, measured)
        note = f"{share:.3f} of the GPU's SMs x {reference.value:.4g}; {reference.describe()}"
        return throughput_verdict(metric, measured, reference=share * reference.value, reference_note=note, confirmed=reference.confirmed)
    if reference is None:
        return throughput_verdict(metric, measured, baseline)
    return throughput_verdict(
        metric, measured, baseline, reference=reference.value, reference_note=reference.describe(), confirmed=reference.confirmed
    )


#: Under the same load at the same time, GPUs of one model in one server run within a few percent
#: of each other; one below this share of their median is the odd one out (cooling, power, clocks).
MIN_SHARE_OF_PEERS = 0.85


def peer_verdict(measured: float, peers: list[float]) -> Verdict:
    """This GPU's sustained figure against the median of the same-model GPUs loaded with it (its
    own figure included). Judges GPUs no reference covers too; needs at least two GPUs."""
    if len(peers) < 2:
        return Verdict(NOT_JUDGED, "no other GPU of this model under the same load")
    ordered = sorted(peers)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    threshold = f">= {MIN_SHARE_OF_PEERS:.2f} x median {median:.4g} of {len(peers)} same-model GPUs under the same load"
    return _at_least(measured, MIN_SHARE_OF_PEERS * median, threshold, "sustained TFLOPS")


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


def pcie_width_verdict(current: int | None, maximum: int | None, under_load: bool = False) -> Verdict:
    """The link width against what the GPU and slot allow together (NVML's maximum is already the
    lower of the two, so an as-built x8 slot reads x8 of x8). Judged only under load: an idle link
    may train down to save power, so a narrow idle reading is information, not a fault."""
    if current is None or maximum is None:
        return Verdict(SKIP, "link width not reported", "NVML does not report the PCIe link width")
    threshold = f"x{maximum} under load"
    if not under_load:
        note = "" if current >= maximum else f"x{current} of x{maximum} at idle: links narrow at idle, the width is judged under load"
        return Verdict(INFO, threshold, note)
    if current >= maximum:
        return Verdict(PASS, threshold, "" if maximum >= 16 else f"as built: the slot gives x{maximum} (not a GPU fault)")
    return Verdict(FAIL, threshold, f"PCIe link runs at x{current} under load, the GPU and slot allow x{maximum}: reseat the GPU or check the riser/slot")


def ecc_verdict(uncorrected: int | None, gpu_index: int | None = None) -> Verdict:
    if uncorrected is None:
        return Verdict(SKIP, "0 uncorrected", "ECC is off or not reported on this GPU")
    if uncorrected == 0:
        return Verdict(PASS, "0 uncorrected")
    who = f"GPU {gpu_index}: " if gpu_index is not None else ""
    return Verdict(FAIL, "0 uncorrected", f"{who}{uncorrected} uncorrected ECC errors since the driver loaded: drain it, check dmesg for "
                   "Xid 48/94/95, and reset the GPU so the bad memory is remapped or retired")


def throttle_verdict(reasons: list[str] | None, bad: frozenset[str]) -> Verdict:
    if reasons is None:
        return Verdict(SKIP, "no thermal/power-brake slowdown", "NVML does not report clock-event reasons")
    found = sorted(set(reasons) & bad)
    if not found:
        return Verdict(PASS, "no thermal/power-brake slowdown")
    return Verdict(FAIL, "no thermal/power-brake slowdown", "clocks held down by " + ", ".join(found))


def growth_on_verdict(used_bytes: int, total_bytes: int | None) -> Verdict:
    """Memory growth on: a small computation keeps little (the context and a few MiB)."""
    limit = GROWTH_MAX_BYTES if not total_bytes else min(GROWTH_MAX_BYTES, GROWTH_MAX_FRACTION * total_bytes)
    threshold = f"<= {limit / 2**30:.1f} GiB"
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


def _parts(version: str | None) -> tuple[int, ...] | None:
    """'9.3.0' -> (9, 3, 0); '9' -> (9,); None when it does not start with a number."""
    match = re.match(r"^(\d+(?:\.\d+)*)", (version or "").strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def versions_agree(claimed: str | None, installed: str | None, depth: int = 2) -> bool:
    """Compare only what both sides state, up to `depth` parts: TensorFlow's build info gives
    cuDNN as "9" while the image's label says "9.3" -- they agree; "8" and "9.3" do not."""
    want, have = _parts(claimed), _parts(installed)
    if want is None or have is None:
        return False
    common = min(len(want), len(have), depth)
    return want[:common] == have[:common]


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

    CUDA and cuDNN compare on major.minor, or on what both state when one side says less
    (TensorFlow reports cuDNN "9"); a claim of "cpu" for CUDA means no CUDA build.
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
    elif want_cuda and not versions_agree(want_cuda, have_cuda):
        problems.append(f"built for CUDA {have_cuda}, image claims {want_cuda}")
    want_cudnn = claimed.get("cudnn")
    have_cudnn = installed.get("cudnn")
    if want_cudnn and not versions_agree(want_cudnn, have_cudnn):
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


#: Where the default expectation of a bare host comes from (and how to lift it).
BARE_HOST = "a GPU server outside any image; --expect-gpus 0 for a CPU-only host"


def expected_gpus(
    option: int | None,
    nvidia_visible_devices: str | None,
    cpu_stack: bool = False,
    in_image: bool = True,
    mounted: list[str] | None = None,
    cpu_only_host: bool = False,
) -> GpuExpectation | None:
    """`--expect-gpus N` wins; else NVIDIA_VISIBLE_DEVICES (set by the NVIDIA container runtime
    and by CUDA base images) asking for "all" or a list means GPUs must be there, except in an
    image whose stack is a CPU build (gpuenv images set the variable for every stack). On a bare
    host (`in_image` False) at least one GPU is expected: a broken driver must not read READY;
    a host with no NVIDIA driver and no NVIDIA device (`cpu_only_host`) is validated as CPU-only.
    A path (Kubernetes' volume-mounts strategy) counts the device files `mounted` under it."""
    if option is not None:
        return GpuExpectation(option, exact=True, source=f"--expect-gpus {option}") if option > 0 else None
    if cpu_stack:
        return None
    value = (nvidia_visible_devices or "").strip()
    if value.lower() in ("", "void", "none"):
        return None if in_image or cpu_only_host else GpuExpectation(1, exact=False, source=BARE_HOST)
    source = f"NVIDIA_VISIBLE_DEVICES={value}"
    if value.lower() == "all":
        return GpuExpectation(1, exact=False, source=source)
    if value.startswith("/"):
        # Kubernetes' volume-mounts strategy: the devices are the files mounted in that folder
        # (`mounted`, read by the caller with validate.host.masking.device_list), not one GPU.
        if mounted is None:
            return GpuExpectation(1, exact=False, source=f"{source} (its device list could not be read)")
        if any(name.lower() == "all" for name in mounted):
            return GpuExpectation(1, exact=False, source=f"{source} (mounts 'all')")
        if not mounted:
            return None
        return GpuExpectation(len(mounted), exact=True, source=f"{source} ({len(mounted)} device(s) mounted there)")
    return GpuExpectation(len([v for v in value.split(",") if v.strip()]), exact=True, source=source)


def gpu_count_verdict(seen: int, expectation: GpuExpectation | None, who: str) -> Verdict:
    if expectation is None:
        return Verdict(PASS if seen else SKIP, "no expectation", "" if seen else f"{who} sees no GPU")
    ok = seen == expectation.count if expectation.exact else seen >= expectation.count
    if ok:
        return Verdict(PASS, expectation.describe())
    return Verdict(FAIL, expectation.describe(), f"{who} sees {seen} GPU(s), expected {expectation.describe()}")


def power_limit_verdict(enforced_watts: float | None, default_watts: float | None, gpu_index: int | None = None) -> Verdict:
    """The enforced power limit against the GPU's default: a cap set below it (nvidia-smi -pl,
    a BMC policy) slows every kernel that reaches the cap."""
    if enforced_watts is None or default_watts is None:
        return Verdict(SKIP, "enforced >= 0.95 x default", "NVML does not report the power limits")
    threshold = f">= 0.95 x default {default_watts:.0f} W"
    if enforced_watts >= 0.95 * default_watts:
        return Verdict(PASS, threshold)
    return Verdict(
        FAIL, threshold,
        (f"GPU {gpu_index}: " if gpu_index is not None else "") + f"power limit {enforced_watts:.0f} W is below the default {default_watts:.0f} W: "
        f"restore it (nvidia-smi{f' -i {gpu_index}' if gpu_index is not None else ''} -pl {default_watts:.0f}) or ask who capped it",
    )


def pcie_gen_verdict(under_load: int | None, gpu_max: int | None, slot_max: int | None = None, baseline: int | None = None) -> Verdict:
    """The PCIe generation reached under load against the platform: the lower of the GPU's own
    maximum and what GPU and slot allow together (NVML's maximum). Judged under load because an
    idle link drops to Gen1. A slot slower than the GPU (a Gen4 card in a Gen3 host, GB200's gen5
    of device max 6) is how the server is built: information, not a GPU fault. Below the
    platform's maximum, or below what the same model reached before (`baseline`), fails."""
    expected = min(x for x in (gpu_max, slot_max) if x) if (gpu_max or slot_max) else None
    if under_load is None or expected is None:
        return Verdict(SKIP, "the platform's PCIe generation", "NVML does not report the PCIe generation under load")
    threshold = f"gen{expected} (lower of GPU gen{gpu_max or '?'} and slot gen{slot_max or '?'})"
    if under_load < expected:
        return Verdict(FAIL, threshold, f"PCIe link runs at gen{under_load} under load, GPU and slot allow gen{expected}: reseat the GPU, check the riser and the BIOS PCIe setting")
    if baseline is not None and under_load < baseline:
        return Verdict(FAIL, f"{threshold}, baseline gen{baseline:.0f}", f"PCIe link runs at gen{under_load}, below the gen{baseline:.0f} this model reached on the baseline server")
    if gpu_max and slot_max and slot_max < gpu_max:
        return Verdict(INFO, threshold, f"as built: the host allows gen{slot_max}, the GPU gen{gpu_max}; not a GPU fault")
    return Verdict(PASS, threshold)


#: Share of the loaded samples that may show a bad clock-event reason before the GPU fails.
MAX_BAD_SAMPLE_SHARE = 0.1


def sustained_clocks_verdict(samples: list[dict]) -> Verdict:
    """Clock-event reasons sampled under the sustained load (dicts as nvml.Sample.to_dict()).

    Thermal, hardware and power-brake slowdowns in more than MAX_BAD_SAMPLE_SHARE of the samples
    fail; sw_power_cap is what a GPU at its default limit shows under full load and passes.
    """
    from validate.host.nvml import BAD_THROTTLE_REASONS

    read = [s for s in samples if s.get("reasons") is not None]
    threshold = f"thermal/hardware slowdown in <= {MAX_BAD_SAMPLE_SHARE:.0%} of samples"
    if not read:
        return Verdict(SKIP, threshold, "NVML reported no clock-event reasons during the load")
    bad: dict[str, int] = {}
    for s in read:
        for reason in set(s["reasons"]) & BAD_THROTTLE_REASONS:
            bad[reason] = bad.get(reason, 0) + 1
    worst = max(bad.values(), default=0)
    if worst <= MAX_BAD_SAMPLE_SHARE * len(read):
        return Verdict(PASS, threshold)
    listed = ", ".join(f"{name} in {count}/{len(read)} samples" for name, count in sorted(bad.items()))
    return Verdict(FAIL, threshold, f"clocks held down under load: {listed}")


def clock_summary(samples: list[dict]) -> str:
    """'1980/1980 MHz median, 690 W, 71 C' over the samples that have the figures."""
    def median(key: str) -> float | None:
        values = sorted(s[key] for s in samples if s.get(key) is not None)
        return values[len(values) // 2] if values else None

    sm, top, watts, temp = median("sm_clock_mhz"), median("max_sm_clock_mhz"), median("power_watts"), median("temperature_c")
    parts = [f"SM {sm:.0f}/{top:.0f} MHz" if sm is not None and top else "SM clock unknown"]
    if watts is not None:
        parts.append(f"{watts:.0f} W")
    if temp is not None:
        parts.append(f"{temp:.0f} C")
    return ", ".join(parts) + f" (median of {len(samples)} samples)"


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
        verdict, threshold,
        f"/dev/shm holds only {shm_bytes / 2**20:.0f} MiB: NCCL across GPUs and DataLoader workers need more; "
        "run the container with --shm-size=1g or --ipc=host",
    )


def ptx_only(compute_capability: str, arch_list: list[str]) -> bool:
    """True when the build has no cubin for this GPU and only PTX would run (JIT-compiled at
    first use, which for TensorFlow can take many minutes)."""
    major, minor = (int(part) for part in compute_capability.split("."))
    cubin = False
    for arch in arch_list:
        match = _ARCH.match(arch.strip())
        if not match or match.group(1) != "sm":
            continue
        a_major, a_minor, suffix = int(match.group(2)), int(match.group(3)), match.group(4)
        if (suffix and (major, minor) == (a_major, a_minor)) or (not suffix and major == a_major and minor >= a_minor):
            cubin = True
    return not cubin and kernel_image_verdict(compute_capability, arch_list).verdict == PASS


def probe_parallelism(compute_modes: list[str | None], cpus: int) -> int:
    """How many masking probes may run at once. In Exclusive_Process mode a GPU takes one process
    at a time, so parallel probes would all get "device busy": one at a time then."""
    if any(mode in ("Exclusive_Process", "Exclusive_Thread") for mode in compute_modes):
        return 1
    return max(1, min(8, cpus))


def mig_verdict(gpu_index: int, mig_uuids: list[str], selected: str | None) -> Verdict:
    """A GPU in MIG mode is a normal way to run: each instance is a device of its own (CUDA
    sees instances, not the parent). It fails only with no instance, when nothing can use it."""
    threshold = "at least one MIG instance"
    if not mig_uuids:
        return Verdict(FAIL, threshold, f"GPU {gpu_index} is in MIG mode with no instance: create instances (nvidia-smi mig -cgi ... -C) or disable MIG (nvidia-smi -i {gpu_index} -mig 0)")
    if selected:
        return Verdict(PASS, threshold, f"validating MIG instance {selected}")
    return Verdict(PASS, threshold, f"{len(mig_uuids)} instance(s); the framework checks run one instance per run, "
                   f"e.g. CUDA_VISIBLE_DEVICES={mig_uuids[0]} python -m validate")


# --- health as DCGM reads it: each fault names the GPU and the fix ---------------------------


def _gib_text(n: int | None) -> str:
    return "memory unknown" if n is None else f"{n / 2**30:.2f} GiB"


def _listed(processes: list[dict]) -> str:
    return ", ".join(f"PID {p['pid']}{' (' + p['name'] + ')' if p.get('name') else ''} holding {_gib_text(p.get('used_bytes'))}" for p in processes)


def compute_processes_verdict(gpu_index: int, processes: list[dict]) -> Verdict:
    """Other compute processes on the GPU (dicts of nvml.GpuProcess) take its memory and time:
    every figure measured meanwhile is wrong, and the job they belong to is disturbed."""
    threshold = "no other compute process"
    if not processes:
        return Verdict(PASS, threshold)
    return Verdict(FAIL, threshold, f"GPU {gpu_index} is in use by {_listed(processes)}: stop them or drain the GPU before validating "
                   "(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv)")


def graphics_processes_verdict(gpu_index: int, processes: list[dict]) -> Verdict:
    """A display server or desktop on the GPU: it works, but holds memory and time (a warning)."""
    threshold = "no graphics process"
    if not processes:
        return Verdict(PASS, threshold)
    return Verdict(WARN, threshold, f"GPU {gpu_index} drives graphics: {_listed(processes)}; "
                   "for training run the server headless (systemctl set-default multi-user.target) or use another GPU for display")


def row_remap_verdict(gpu_index: int, pending: bool | None, failure: bool | None, uncorrectable: int | None = None) -> Verdict:
    """Row remapping (A100 and newer): a pending remap waits for a GPU reset; a failure means the
    GPU has no spare rows left for a failing memory row."""
    threshold = "no pending remap, no remap failure"
    if pending is None and failure is None:
        return Verdict(SKIP, threshold, "this GPU does not report row remapping (older than Ampere, or a MIG/consumer part)")
    if failure:
        return Verdict(FAIL, threshold, f"GPU {gpu_index} failed to remap a memory row ({uncorrectable or 0} uncorrectable remaps): "
                       "drain the node and replace the GPU (RMA), as NVIDIA's memory error guide says")
    if pending:
        return Verdict(FAIL, threshold, f"GPU {gpu_index} has a row remap pending: drain it, then reset the GPU (nvidia-smi -r -i {gpu_index}) or reboot to apply it")
    return Verdict(PASS, threshold)


def retired_pages_verdict(gpu_index: int, pending: bool | None) -> Verdict:
    """Page retirement (before Ampere): retired pages wait for a reload of the driver."""
    threshold = "no page retirement pending"
    if pending is None:
        return Verdict(SKIP, threshold, "this GPU does not report page retirement (Ampere and newer remap rows instead)")
    if pending:
        return Verdict(FAIL, threshold, f"GPU {gpu_index} has retired pages pending: reset the GPU (nvidia-smi -r -i {gpu_index}) or reboot so they take effect")
    return Verdict(PASS, threshold)


def clocks_verdict(gpu_index: int, applications: tuple | None, default: tuple | None, reasons: list[str] | None) -> Verdict:
    """Clocks a user set: applications clocks away from their default, or the clock event
    "applications clocks setting" (which NVML also reports for clocks locked with -lgc/-lmc)."""
    threshold = "default clocks"
    changed = applications is not None and default is not None and any(
        a is not None and d is not None and a != d for a, d in zip(applications, default)
    )
    held = reasons is not None and "applications_clocks_setting" in reasons
    if not changed and not held:
        if applications is None and reasons is None:
            return Verdict(SKIP, threshold, "NVML reports neither applications clocks nor clock event reasons")
        return Verdict(PASS, threshold)
    what = f"applications clocks set to {applications[0]}/{applications[1]} MHz, default {default[0]}/{default[1]} MHz" if changed else "clocks held by an applications/locked clocks setting"  # type: ignore[index]
    return Verdict(FAIL, threshold, f"GPU {gpu_index}: {what}: reset them (nvidia-smi -i {gpu_index} -rac; -rgc and -rmc for locked clocks) or ask who set them")


def persistence_verdict(gpu_index: int, enabled: bool | None) -> Verdict:
    """Persistence mode: information only (it slows the first use of an idle GPU, no more)."""
    if enabled is None:
        return Verdict(INFO, "", "persistence mode not reported")
    if enabled:
        return Verdict(INFO, "")
    return Verdict(INFO, "", f"GPU {gpu_index}: persistence mode is off: the driver sets the GPU up again for each first process "
                   "(seconds per start); run nvidia-persistenced (or nvidia-smi -pm 1)")


#: GPU utilisation at or above which a reading counts as "under load" (a capture of a busy GPU).
LOADED_UTILISATION = 50
