"""Verdicts from measurements: pure functions, unit-tested on recorded observations.

A threshold here is the line between "this server is healthy" and "something is wrong with it"
(power capped, thermally throttled, a degraded PCIe link, a wrong driver), not a tuning target:
healthy servers land well above the floors.

The rules live by area in validate/judge/ (verdict, speed, pcie, memory, visibility, claims,
health); every name is imported here, so `from validate.judge.thresholds import ...` keeps working.
"""

from __future__ import annotations

from validate.judge.claims import (
    claims_verdict,
    cudnn_version_text,
    driver_runs_runtime_verdict,
    public_version,
    versions_agree,
)
from validate.judge.health import (
    BAD_CLOCK_EVENTS,
    HARMLESS_CLOCK_EVENTS,
    LOADED_UTILISATION,
    clock_event_causes,
    clock_events_verdict,
    clocks_verdict,
    compute_processes_verdict,
    ecc_verdict,
    fabric_text,
    fabric_verdict,
    graphics_processes_verdict,
    persistence_verdict,
    power_limit_verdict,
    reasons_text,
    retired_pages_verdict,
    row_remap_verdict,
    throttle_verdict,
)
from validate.judge.memory import (
    GROWTH_MAX_BYTES,
    GROWTH_MAX_FRACTION,
    MIN_SHM_BYTES,
    NO_GROWTH_MIN_FRACTION,
    cache_holds_verdict,
    cache_released_verdict,
    growth_off_verdict,
    growth_on_verdict,
    shm_verdict,
)
from validate.judge.pcie import (
    MIN_FRACTION_OF_PCIE,
    PCIE_LANE_GBS,
    host_to_device_verdict,
    pcie_gen_verdict,
    pcie_link_theoretical_gbs,
    pcie_width_verdict,
)
from validate.judge.speed import (
    BASELINE_TOLERANCE,
    MAX_BAD_SAMPLE_SHARE,
    MIN_LOSS_DROP,
    MIN_SHARE_OF_PEERS,
    REFERENCE_FRACTION,
    UNCONFIRMED_FAIL_FRACTION,
    ReferenceLike,
    clock_summary,
    judge_figure,
    loss_falls_verdict,
    mig_share,
    peer_verdict,
    sustained_clocks_verdict,
    throughput_verdict,
)
from validate.judge.verdict import FAIL, INFO, NOT_JUDGED, NOT_JUDGED_WORDS, NO_REFERENCE, PASS, SKIP, WARN, Verdict
from validate.judge.visibility import (
    BARE_HOST,
    GpuExpectation,
    expected_gpus,
    gpu_count_verdict,
    kernel_image_verdict,
    mig_verdict,
    probe_parallelism,
    ptx_only,
)

__all__ = [
    "BAD_CLOCK_EVENTS", "HARMLESS_CLOCK_EVENTS", "clock_event_causes", "clock_events_verdict", "fabric_text", "fabric_verdict", "reasons_text",
    "BARE_HOST", "BASELINE_TOLERANCE", "FAIL", "GROWTH_MAX_BYTES", "GROWTH_MAX_FRACTION", "GpuExpectation",
    "INFO", "LOADED_UTILISATION", "MAX_BAD_SAMPLE_SHARE", "MIN_FRACTION_OF_PCIE", "MIN_LOSS_DROP",
    "MIN_SHARE_OF_PEERS", "MIN_SHM_BYTES", "NOT_JUDGED", "NOT_JUDGED_WORDS", "NO_GROWTH_MIN_FRACTION",
    "NO_REFERENCE", "PASS", "PCIE_LANE_GBS", "REFERENCE_FRACTION", "ReferenceLike", "SKIP",
    "UNCONFIRMED_FAIL_FRACTION", "Verdict", "WARN", "cache_holds_verdict", "cache_released_verdict",
    "claims_verdict", "clock_summary", "clocks_verdict", "compute_processes_verdict", "cudnn_version_text",
    "driver_runs_runtime_verdict", "ecc_verdict", "expected_gpus", "gpu_count_verdict",
    "graphics_processes_verdict", "growth_off_verdict", "growth_on_verdict", "host_to_device_verdict",
    "judge_figure", "kernel_image_verdict", "loss_falls_verdict", "mig_share", "mig_verdict",
    "pcie_gen_verdict", "pcie_link_theoretical_gbs", "pcie_width_verdict", "peer_verdict",
    "persistence_verdict", "power_limit_verdict", "probe_parallelism", "ptx_only", "public_version",
    "retired_pages_verdict", "row_remap_verdict", "shm_verdict", "sustained_clocks_verdict",
    "throttle_verdict", "throughput_verdict", "versions_agree",
]
