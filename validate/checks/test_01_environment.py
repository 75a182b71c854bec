"""Check 1, environment: the driver gate (is the driver new enough for this image?), the driver and
every GPU from NVML, the framework builds, and whether the installed builds are the ones the
image's labels claim."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from validate import intact
from validate.host import nvml
from validate.host.archs import identity_text
from validate.host.masking import DEVICE_ORDER
from validate.host.stackfile import read_stack_file
from validate.judge import health_watches as watches
from validate.judge.capture import capture_text, capture_verdict
from validate.judge.claims import claims_verdict, cudnn_version_text, driver_runs_runtime_verdict
from validate.judge.driver_floor import load_floors, too_old_for_frameworks
from validate.judge.driver_gate import driver_too_old
from validate.judge.gpu_use import gpu_in_use_verdict, in_use_text
from validate.judge.health import (
    LOADED_UTILISATION,
    clock_events_verdict,
    clocks_verdict,
    compute_processes_verdict,
    ecc_verdict,
    fabric_text,
    fabric_verdict,
    graphics_processes_verdict,
    only_bare_hw_slowdown,
    persistence_verdict,
    power_limit_verdict,
    reasons_text,
    retired_pages_verdict,
    row_remap_verdict,
)
from validate.judge.memory import shm_verdict
from validate.judge.pcie import pcie_gen_verdict, pcie_width_verdict
from validate.judge.peaks import nvlink_links_verdict
from validate.judge.verdict import FAIL, INFO, PASS, SKIP, Verdict
from validate.judge.virtualization import virtualization_text, virtualization_verdict
from validate.judge.visibility import mig_verdict


def test_driver_gate(suite, record):
    """First check: the host's driver is at least the image's min_driver (stack.json). The NVIDIA
    container toolkit skips its own NVIDIA_REQUIRE_CUDA gate when GPUs come through CDI."""
    stack = read_stack_file()
    if stack is None:
        pytest.skip(
            "GPUENV_STACK_FILE is not set or unreadable: not inside a gpuenv image, no "
            "min_driver to compare"
        )
    min_driver = stack.get("min_driver")
    if not min_driver:
        pytest.skip(
            f"the image's stack ({stack.get('stack_id', 'unknown')}) names no min_driver (CPU "
            "stack)"
        )
    if suite.host.driver_version is None:
        suite.require_gpus()
        pytest.skip(f"NVML does not report the driver version: {suite.no_gpu_reason()}")
    problem = driver_too_old(
        suite.host.driver_version, str(min_driver), suite.host.cuda_driver_version
    )
    threshold = f">= {min_driver}"
    record.add(
        "driver gate",
        suite.host.driver_version,
        Verdict(FAIL, threshold, problem) if problem else Verdict(PASS, threshold),
    )
    record.finish()


def test_device_order(suite, record):
    """The suite runs with CUDA_DEVICE_ORDER=PCI_BUS_ID (NVML's order), whatever the caller set:
    otherwise CUDA numbers a mixed-GPU machine fastest first and ordinals in CUDA_VISIBLE_DEVICES
    name other GPUs than NVML's."""
    value = os.environ.get("CUDA_DEVICE_ORDER")
    was = suite.device_order_was
    measured = f"{value}" + (f" (was {was})" if was and was != value else "")
    ok = value == DEVICE_ORDER
    record.add(
        "cuda device order",
        measured,
        Verdict(
            PASS if ok else FAIL,
            DEVICE_ORDER,
            "" if ok else "CUDA_DEVICE_ORDER was not set by the suite",
        ),
    )
    record.finish()


def test_driver(suite, record):
    """NVIDIA driver and the CUDA version it supports; a driver older than every framework build
    gpuenv supports (418 runs CUDA 10.1) fails here, live and replayed, named as the blocker."""
    if suite.host.error:
        suite.require_gpus()  # skips with NVML's reason, or fails when GPUs are expected
    too_old = too_old_for_frameworks(suite.host.driver_version) if suite.host.gpus else None
    floor = f">= {load_floors().framework_driver} (the oldest any supported framework build runs)"
    verdict = Verdict(FAIL, floor, too_old) if too_old else INFO
    record.add("driver version", suite.host.driver_version or "unknown", verdict)
    record.add("CUDA driver version", suite.host.cuda_driver_version or "unknown")
    record.finish()


def test_every_gpu_readable(suite, record):
    """Every GPU NVML counts can be read; a lost GPU fails here while the others are still
    checked."""
    if suite.host.error:
        suite.require_gpus()
        pytest.skip(suite.no_gpu_reason())
    for lost in suite.host.unreadable:
        record.add(
            f"GPU {lost.index} readable", "no", Verdict(FAIL, "readable through NVML", lost.error)
        )
    scope = (suite.replay or {}).get("capture")
    whole = None
    if isinstance(
        scope, dict
    ):  # an nvidia-smi capture: whole (said in the row below), cut short, or an excerpt
        whole = capture_verdict(scope)
        if whole.verdict != PASS:
            record.add("capture holds every GPU", capture_text(scope), whole)
    if not suite.host.unreadable:
        measured = f"{len(suite.host.gpus)} GPU(s)"
        if whole is not None and whole.verdict == PASS:
            measured = f"{len(suite.host.gpus)} of {scope['attached_gpus']} attached GPU(s)"  # type: ignore[index]
        record.add("every GPU readable", measured, Verdict(PASS, "readable through NVML"))
    record.finish()


def _gpu_in_use(gpu: nvml.GpuInfo) -> tuple[str, Verdict]:
    """Utilisation and memory in use against what the listed processes hold: foreign work
    (another container's, VM's or MIG tenant's) and a GPU too full for a job fail."""
    reserve_apart = gpu.memory_allocated_bytes is not None
    used = gpu.memory_allocated_bytes if reserve_apart else gpu.memory_used_bytes
    lists = [p for p in (gpu.compute_processes, gpu.graphics_processes) if p is not None]
    listed = [p for group in lists for p in group]
    count = len(listed) if lists else None
    held = (
        None
        if any(p.used_bytes is None for p in listed)
        else sum(p.used_bytes or 0 for p in listed)
    )
    verdict = gpu_in_use_verdict(
        gpu.index, gpu.utilization_percent, used, gpu.memory_total_bytes, reserve_apart, held, count
    )
    return in_use_text(
        gpu.utilization_percent, used, gpu.memory_total_bytes, reserve_apart
    ), verdict


def test_gpu_health(gpu: nvml.GpuInfo, suite, record):
    """One GPU's identity and health: ECC errors, the PCIe link against the platform, power limit
    against its default, clock event reasons as read (a hardware or thermal slowdown fails here;
    the sustained load judges them again under load), the NVSwitch fabric, compute mode. The link
    is judged only when read under load (else the sustained load judges it)."""
    identity = identity_text(gpu.name, gpu.compute_capability, pci_device_id=gpu.pci_device_id)
    record.add("gpu identity", f"{gpu.name} ({identity}) {gpu.pci_bus_id}", gpu=gpu.uuid)
    measured, verdict = _gpu_in_use(gpu)
    record.add("gpu in use", measured, verdict, gpu=gpu.uuid)
    record.add(
        "virtualization",
        virtualization_text(gpu.virtualization_mode, gpu.host_vgpu_mode, gpu.vgpu_license),
        virtualization_verdict(
            gpu.index,
            gpu.virtualization_mode,
            gpu.host_vgpu_mode,
            gpu.vgpu_licensed,
            gpu.vgpu_license,
            suite.host.cuda_driver_version,
        ),
        gpu=gpu.uuid,
    )
    ecc = (
        "not reported"
        if gpu.ecc_uncorrected_volatile is None
        else str(gpu.ecc_uncorrected_volatile)
    )
    record.add(
        "ecc uncorrected errors",
        ecc,
        ecc_verdict(gpu.ecc_uncorrected_volatile, gpu.index),
        gpu=gpu.uuid,
    )
    _pcie(gpu, suite, record)
    record.add(
        "power limit",
        f"{gpu.power_limit_watts:.0f} W" if gpu.power_limit_watts else "unknown",
        power_limit_verdict(gpu.power_limit_watts, gpu.power_default_limit_watts, gpu.index),
        gpu=gpu.uuid,
    )
    loaded = gpu.utilization_percent is not None and gpu.utilization_percent >= LOADED_UTILISATION
    when = f"at {gpu.utilization_percent}% load" if loaded else "at idle"
    # A bare hw_slowdown is read again over about a second before it fails (P-state changes set it).
    pause = 0.0 if suite.host.replayed_from else 0.3  # a capture answers the same every time
    rereads = (
        nvml.reread_clock_events(gpu.uuid, suite.nvml, interval_s=pause)
        if only_bare_hw_slowdown(gpu.throttle_reasons)
        else None
    )
    verdict = clock_events_verdict(gpu.index, gpu.throttle_reasons, when, rereads)
    record.add(
        f"clock events {'under load' if loaded else 'at idle'}",
        reasons_text(gpu.throttle_reasons),
        verdict,
        gpu=gpu.uuid,
    )
    record.add(
        "nvswitch fabric",
        fabric_text(gpu.fabric_state, gpu.fabric_status),
        fabric_verdict(gpu.index, gpu.fabric_state, gpu.fabric_status),
        gpu=gpu.uuid,
    )
    mode = gpu.compute_mode or "unknown"
    note = (
        "masking probes run one at a time, child-process checks first"
        if mode == "Exclusive_Process"
        else ""
    )
    record.add("compute mode", mode, Verdict(INFO, "", note), gpu=gpu.uuid)
    if mode == "Prohibited":
        record.add(
            "compute mode allows work",
            mode,
            Verdict(
                FAIL,
                "Default or Exclusive_Process",
                "compute mode Prohibited: no process may use this GPU (nvidia-smi -c DEFAULT)",
            ),
            gpu=gpu.uuid,
        )
    record.finish()


def _link(unit: str, value: int | None) -> str:
    """'gen5', 'x16', or 'not reported' (a vGPU guest and old captures print N/A): never genNone."""
    return "not reported" if value is None else f"{unit}{value}"


def _pcie(gpu: nvml.GpuInfo, suite, record) -> None:
    """PCIe against the platform: generation and width as the slot allows, judged only when the
    link was read under load (an idle link narrows and drops to Gen1). A host read while busy (a
    capture of a loaded GPU) counts as under load; the sustained check reads it under our load."""
    loaded = gpu.utilization_percent is not None and gpu.utilization_percent >= LOADED_UTILISATION
    when = f"at {gpu.utilization_percent}% load" if loaded else "at idle"
    width = pcie_width_verdict(gpu.pcie_link_width, gpu.pcie_link_width_max, under_load=loaded)
    record.add(
        "pcie link width",
        f"{_link('x', gpu.pcie_link_width)} {when} (with slot "
        f"{_link('x', gpu.pcie_link_width_max)})",
        width,
        gpu=gpu.uuid,
        value=float(gpu.pcie_link_width) if loaded and gpu.pcie_link_width else None,
    )
    if loaded:
        baseline = suite.baseline_for(gpu.name, "pcie generation")
        gen = pcie_gen_verdict(
            gpu.pcie_link_gen, gpu.pcie_link_gen_gpu_max, gpu.pcie_link_gen_max, baseline
        )
    elif gpu.pcie_link_gen_max is None:
        gen = Verdict(
            SKIP, "the platform's PCIe generation", "NVML does not report the PCIe generation"
        )
    else:  # at idle only what the platform allows is told (a slot slower than the GPU is as built)
        expected = pcie_gen_verdict(
            gpu.pcie_link_gen_max, gpu.pcie_link_gen_gpu_max, gpu.pcie_link_gen_max
        )
        note = expected.reason + "; " if expected.verdict == INFO else ""
        gen = Verdict(INFO, expected.threshold, note + "read at idle: judged under load")
    record.add(
        "pcie generation",
        f"{_link('gen', gpu.pcie_link_gen)} {when} (GPU max "
        f"{_link('gen', gpu.pcie_link_gen_gpu_max)}, with slot "
        f"{_link('gen', gpu.pcie_link_gen_max)})",
        gen,
        gpu=gpu.uuid,
        value=float(gpu.pcie_link_gen) if loaded and gpu.pcie_link_gen else None,
    )


def _processes(processes: list[nvml.GpuProcess] | None) -> list[dict] | None:
    return None if processes is None else [p.__dict__ for p in processes]


def _count(processes: list[dict] | None) -> str:
    return "not reported" if processes is None else str(len(processes))


def test_gpu_health_dcgm(gpu: nvml.GpuInfo, record):
    """The health checks DCGM runs before a job: other processes on the GPU, memory repairs
    waiting for a reset (row remaps, retired pages) or failed, clocks a user set, persistence."""
    compute, graphics = _processes(gpu.compute_processes), _processes(gpu.graphics_processes)
    record.add(
        "other compute processes",
        _count(compute),
        compute_processes_verdict(gpu.index, compute),
        gpu=gpu.uuid,
    )
    record.add(
        "graphics processes",
        _count(graphics),
        graphics_processes_verdict(gpu.index, graphics),
        gpu=gpu.uuid,
    )
    rows = (
        "not reported"
        if gpu.remapped_rows_pending is None
        else f"pending {'yes' if gpu.remapped_rows_pending else 'no'}, failure "
        f"{'yes' if gpu.remapped_rows_failure else 'no'}"
    )
    record.add(
        "row remapping",
        rows,
        row_remap_verdict(
            gpu.index,
            gpu.remapped_rows_pending,
            gpu.remapped_rows_failure,
            gpu.remapped_rows_uncorrectable,
        ),
        gpu=gpu.uuid,
    )
    pages = (
        "not reported"
        if gpu.retired_pages_pending is None
        else ("pending" if gpu.retired_pages_pending else "none pending")
    )
    record.add(
        "retired pages",
        pages,
        retired_pages_verdict(gpu.index, gpu.retired_pages_pending),
        gpu=gpu.uuid,
    )
    clocks = "applications clocks " + (
        "/".join(str(c) for c in gpu.applications_clocks_mhz) + " MHz"
        if gpu.applications_clocks_mhz
        else "not reported"
    )
    record.add(
        "user-set clocks",
        clocks,
        clocks_verdict(
            gpu.index,
            gpu.applications_clocks_mhz,
            gpu.default_applications_clocks_mhz,
            gpu.throttle_reasons,
        ),
        gpu=gpu.uuid,
    )
    mode = "unknown" if gpu.persistence_mode is None else ("on" if gpu.persistence_mode else "off")
    record.add(
        "persistence mode", mode, persistence_verdict(gpu.index, gpu.persistence_mode), gpu=gpu.uuid
    )
    record.finish()


def test_gpu_health_watches(gpu: nvml.GpuInfo, suite, record):
    """What DCGM's health watches and diagnostic judge besides: PCIe replays, the infoROM, the
    temperature against the GPU's own thresholds, NVLink errors, the NVSwitch fabric's health and
    how long clock events held the clocks. Counters read once only warn (no rate from one reading).
    A healthy GPU's cells read the same on every GPU; the JSON keeps each reading ("health")."""
    h, limits = gpu.health, watches.load_limits()
    # The rate limit is named for the link as it runs under load (its maximum): an idle link drops
    # to Gen1.
    gen, width = (
        gpu.pcie_link_gen_max or gpu.pcie_link_gen,
        gpu.pcie_link_width_max or gpu.pcie_link_width,
    )
    record.add(
        "pcie replays",
        watches.pcie_replays_text(h.pcie_replays, limits),
        watches.pcie_replays_verdict(gpu.index, h.pcie_replays, gen, width, limits),
        gpu=gpu.uuid,
    )
    inforom = (
        "not reported" if h.inforom_valid is None else ("valid" if h.inforom_valid else "corrupted")
    )
    record.add(
        "inforom", inforom, watches.inforom_verdict(gpu.index, h.inforom_valid), gpu=gpu.uuid
    )
    record.add(
        "temperature",
        watches.temperature_text(h),
        watches.temperature_verdict(gpu.index, h),
        gpu=gpu.uuid,
    )
    record.add(
        "nvlink errors",
        watches.nvlink_errors_text(h.nvlink_errors),
        watches.nvlink_errors_verdict(gpu.index, h.nvlink_errors, limits),
        gpu=gpu.uuid,
    )
    record.add(
        "nvswitch fabric health",
        watches.fabric_health_text(h.fabric_health),
        watches.fabric_health_verdict(gpu.index, h.fabric_health),
        gpu=gpu.uuid,
    )
    whole = len([g for g in suite.host.gpus if not g.mig_enabled])
    measured, verdict = nvlink_links_verdict(gpu, suite.peaks, whole)
    record.add("nvlink links", measured, verdict, gpu=gpu.uuid)
    record.add(
        "clock event time",
        watches.clock_event_counters_text(h.clock_event_us),
        watches.clock_event_counters_verdict(gpu.index, h.clock_event_us, h.clock_event_note),
        gpu=gpu.uuid,
    )
    record.finish()


def test_recorded_measurements(suite, record):
    """On a replayed gpuenv recording: the figures and verdicts of the checks that ran PyTorch or
    TensorFlow on the recorded host (they cannot run here), shown as recorded."""
    if not suite.replayed_from:
        pytest.skip("not a replay (--replay FILE)")
    kept = suite.recorded_records()
    if not kept:
        pytest.skip(
            "the replayed file holds no measurements (an nvidia-smi capture, or a --record run "
            "without frameworks)"
        )
    for r in kept:
        record.add(
            f"recorded: {r.get('check')}",
            str(r.get("measured", "")),
            Verdict(
                str(r.get("verdict", INFO)), str(r.get("threshold", "")), str(r.get("reason", ""))
            ),
            gpu=r.get("gpu"),
            value=r.get("value"),
            seconds=0,
        )
    record.finish()


def test_mig_mode(gpu: nvml.GpuInfo, suite, record):
    """A GPU in MIG mode: each instance is a device of its own; the GPU fails only with none."""
    if not gpu.mig_enabled:
        pytest.skip(f"GPU {gpu.index} is not in MIG mode")
    uuids = [m.uuid for m in gpu.mig_devices]
    selected = suite.selected_mig if suite.selected_mig in uuids else None
    record.add(
        "mig mode",
        f"{len(uuids)} instance(s)",
        mig_verdict(gpu.index, uuids, selected),
        gpu=gpu.uuid,
    )
    record.finish()


def _shm_bytes() -> int | None:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stat.f_frsize * stat.f_blocks


def test_shared_memory(suite, record):
    """/dev/shm is large enough for NCCL between GPUs and DataLoader workers (containers get 64
    MB)."""
    size = _shm_bytes()
    verdict = shm_verdict(size, len(suite.host.gpus))
    record.add(
        "/dev/shm size", "not mounted" if size is None else f"{size / 2**20:.0f} MiB", verdict
    )
    record.finish()


def test_torch_build(torch, suite, record):
    """PyTorch's version, CUDA, cuDNN, NCCL and compiled architectures; the driver must run its
    CUDA."""
    info: dict[str, Any] = suite.frameworks["torch"]
    record.add("torch version", info["version"])
    record.add(
        "torch CUDA / cuDNN / NCCL",
        f"{info['cuda'] or 'CPU build'} / {info['cudnn'] or '-'} / {info['nccl'] or '-'}",
    )
    record.add("torch architectures", ",".join(info["arch_list"]) or "none (CPU build)")
    if info["cuda"] and not suite.host.error:
        record.add(
            "driver runs torch CUDA",
            f"driver CUDA {suite.host.cuda_driver_version or 'not reported'}",
            driver_runs_runtime_verdict(suite.host.cuda_driver_version, info["cuda"]),
        )
    record.finish()


def test_tensorflow_build(tf_info, suite, record):
    """TensorFlow's version and build info (CUDA, cuDNN, compute capabilities)."""
    record.add("tensorflow version", tf_info["version"])
    record.add(
        "tensorflow CUDA / cuDNN",
        f"{tf_info['cuda_version'] or 'CPU build'} / {tf_info['cudnn_version'] or '-'}"
        if tf_info["is_cuda_build"]
        else "CPU build",
    )
    if tf_info["is_cuda_build"] and not suite.host.error:
        record.add(
            "driver runs tensorflow CUDA",
            f"driver CUDA {suite.host.cuda_driver_version or 'not reported'}",
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
    # the build's CUDA (framework_cuda) can differ from the image's (`cuda`): older by the CUDA
    # rule, or newer within the major by minor-version compatibility; stack.json files without it
    # predate that
    build_cuda = stack.get("framework_cuda") or stack.get("cuda")
    claimed = {
        "framework_version": stack.get("framework_version"),
        "cuda": build_cuda,
        "cudnn": stack.get("cudnn"),
    }
    if framework == "torch":
        info = request.getfixturevalue("torch") and suite.frameworks["torch"]
        installed = {
            "framework_version": info["version"],
            "cuda": info["cuda"],
            "cudnn": cudnn_version_text(info["cudnn"]),
        }
    elif framework == "tensorflow":
        tf = request.getfixturevalue("tf_info")
        installed = {
            "framework_version": tf["version"],
            "cuda": tf["cuda_version"],
            "cudnn": tf["cudnn_version"],
        }
    else:
        pytest.fail(
            f"stack file names framework {framework!r}, expected torch or tensorflow", pytrace=False
        )
    measured = ", ".join(f"{k}={v}" for k, v in installed.items() if v)
    verdict: Verdict = claims_verdict(claimed, installed)
    record.add(f"{framework} build vs {stack.get('stack_id', 'image labels')}", measured, verdict)
    record.finish()


#: With --quick, files larger than this are checked by size only (the .so files of a framework,
#: most of its bytes); every smaller file (all Python code, scripts, metadata) is hashed.
QUICK_HASH_LIMIT = 1024 * 1024
#: At most this many problems are named in the row; `invoke verify` names every one.
SHOWN_PROBLEMS = 3


def gpuenv_environment(prefix: str, environ: dict[str, str]) -> bool:
    """Whether `prefix` is an environment gpuenv made: an image's /opt/gpuenv/env, or a prefix
    `invoke install` made (its gpuenv-prefix.json). Any other Python is not judged."""
    if os.path.isfile(os.path.join(prefix, intact.GPUENV_RECORD)):
        return True
    return bool(environ.get("GPUENV_STACK_FILE")) and os.path.realpath(prefix) == "/opt/gpuenv/env"


def test_environment_intact(suite, record):
    """The running environment is exactly what its packages installed: every file against its
    conda-meta record or RECORD (validate/intact.py, the judge of `invoke verify`); an edited,
    removed or added file fails. With --quick, files over 1 MiB are checked by size only."""
    prefix = sys.prefix
    if not gpuenv_environment(prefix, dict(os.environ)):
        pytest.skip(
            f"{prefix} is not an environment gpuenv made (an image's /opt/gpuenv/env or an "
            "installed prefix)"
        )
    limit = QUICK_HASH_LIMIT if suite.quick else None
    try:
        verdict = intact.check(intact.FolderTree(prefix), prefix, hash_limit=limit)
    except (OSError, intact.TreeError) as err:
        pytest.fail(f"{prefix} cannot be read: {err}", pytrace=False)
    measured = f"{verdict.files_checked} files of {len(verdict.packages)} packages" + (
        f" ({verdict.sampled})" if verdict.sampled else ""
    )
    threshold = "every file as its package declares"
    if verdict.ok:
        record.add("environment intact", measured, Verdict(PASS, threshold))
    else:
        named = "; ".join(p.line() for p in verdict.problems[:SHOWN_PROBLEMS])
        more = len(verdict.problems) - SHOWN_PROBLEMS
        reason = (
            named + (f"; and {more} more" if more > 0 else "") + " (invoke verify names every one)"
        )
        record.add("environment intact", measured, Verdict(FAIL, threshold, reason))
    record.finish()
