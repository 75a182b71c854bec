"""The visibility rules: how many GPUs the run must see and does, kernels for each GPU's compute
capability (or PTX only), MIG instances, and how many masking probes run at once."""

from __future__ import annotations

import re
from dataclasses import dataclass

from validate.host.bounds import repeated_uuid
from validate.judge.verdict import FAIL, PASS, SKIP, Verdict

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
        kind, a_major, a_minor, suffix = (
            match.group(1),
            int(match.group(2)),
            int(match.group(3)),
            match.group(4),
        )
        if kind == "sm" and suffix and (major, minor) == (a_major, a_minor):
            return Verdict(PASS, threshold)
        if kind == "sm" and not suffix and major == a_major and minor >= a_minor:
            return Verdict(PASS, threshold)
        if kind == "compute" and (major, minor) >= (a_major, a_minor):
            return Verdict(PASS, threshold)
    return Verdict(
        FAIL,
        threshold,
        f"no kernel image for sm_{major}{minor}: this build ships "
        f"{', '.join(arch_list) or 'no CUDA kernels'}",
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
        if (suffix and (major, minor) == (a_major, a_minor)) or (
            not suffix and major == a_major and minor >= a_minor
        ):
            cubin = True
    return not cubin and kernel_image_verdict(compute_capability, arch_list).verdict == PASS


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
        return (
            GpuExpectation(option, exact=True, source=f"--expect-gpus {option}")
            if option > 0
            else None
        )
    if cpu_stack:
        return None
    value = (nvidia_visible_devices or "").strip()
    if value.lower() in ("", "void", "none"):
        return (
            None if in_image or cpu_only_host else GpuExpectation(1, exact=False, source=BARE_HOST)
        )
    source = f"NVIDIA_VISIBLE_DEVICES={value}"
    if value.lower() == "all":
        return GpuExpectation(1, exact=False, source=source)
    if value.startswith("/"):
        # Kubernetes' volume-mounts strategy: the devices are the files mounted in that folder
        # (`mounted`, read by the caller with validate.host.masking.device_list), not one GPU.
        if mounted is None:
            return GpuExpectation(
                1, exact=False, source=f"{source} (its device list could not be read)"
            )
        if any(name.lower() == "all" for name in mounted):
            return GpuExpectation(1, exact=False, source=f"{source} (mounts 'all')")
        if not mounted:
            return None
        return GpuExpectation(
            len(mounted), exact=True, source=f"{source} ({len(mounted)} device(s) mounted there)"
        )
    return GpuExpectation(
        len([v for v in value.split(",") if v.strip()]), exact=True, source=source
    )


def gpu_count_verdict(seen: int, expectation: GpuExpectation | None, who: str) -> Verdict:
    if expectation is None:
        return Verdict(
            PASS if seen else SKIP, "no expectation", "" if seen else f"{who} sees no GPU"
        )
    ok = seen == expectation.count if expectation.exact else seen >= expectation.count
    if ok:
        return Verdict(PASS, expectation.describe())
    return Verdict(
        FAIL, expectation.describe(), f"{who} sees {seen} GPU(s), expected {expectation.describe()}"
    )


def unique_gpus_verdict(count: Verdict, uuids: list[str]) -> Verdict:
    """The NVML count's verdict, failed when two GPUs share one UUID: NVML listing one GPU twice
    makes the count wrong, and the report's GPU sections (keyed by UUID) would merge into one.
    The rule is bounds.repeated_uuid, the one replayed captures and fleet reports are held to."""
    repeated = repeated_uuid(uuids)
    if repeated is None:
        return count
    uuid, first, second = repeated
    return Verdict(
        FAIL,
        count.threshold,
        f"GPU {first} and GPU {second} share the UUID {uuid}, but each GPU has its own: "
        "NVML lists one GPU twice (reset the GPU or reboot), or the capture was edited",
    )


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
        return Verdict(
            FAIL,
            threshold,
            f"GPU {gpu_index} is in MIG mode with no instance: create instances (nvidia-smi mig "
            f"-cgi ... -C) or disable MIG (nvidia-smi -i {gpu_index} -mig 0)",
        )
    if selected:
        return Verdict(PASS, threshold, f"validating MIG instance {selected}")
    return Verdict(
        PASS,
        threshold,
        f"{len(mig_uuids)} instance(s); the framework checks run one instance per run, "
        f"e.g. CUDA_VISIBLE_DEVICES={mig_uuids[0]} python -m validate",
    )
