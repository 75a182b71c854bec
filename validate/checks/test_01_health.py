"""Check 1, health: each GPU's health, read through NVML, in three tests named for the rules that
judge the readings: `test_gpu_health_nvml` what NVML reports (identity, work on the GPU, ECC, PCIe,
power limit, clock events, fabric, compute mode), `test_gpu_health_dcgm` the checks DCGM runs
before a job, `test_gpu_health_dcgm_watches` what DCGM's health watches judge. NVML-driven, so a
replay (--replay FILE) judges them on a captured server. They were in test_01_environment.py
(style review item 9): reports saved before keep the old node ids, which
validate/report/record.py's MOVED_TESTS maps to these."""

from __future__ import annotations

from validate.host import nvml
from validate.host.archs import identity_text
from validate.judge import health_watches as watches
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
from validate.judge.pcie import pcie_gen_verdict, pcie_width_verdict
from validate.judge.peaks import nvlink_links_verdict
from validate.judge.verdict import FAIL, INFO, SKIP, Verdict
from validate.judge.virtualization import virtualization_text, virtualization_verdict


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


def test_gpu_health_nvml(gpu: nvml.GpuInfo, suite, record):
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


def test_gpu_health_dcgm_watches(gpu: nvml.GpuInfo, suite, record):
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
