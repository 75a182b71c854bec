"""Speed floors (issue: a GPU at half speed must fail): measured per-model references with DCGM's
75% rule, the datasheet fallback that still catches half speed, and NCCL floors per interconnect."""

from __future__ import annotations

import pytest

from validate.nvml import GpuInfo
from validate.peaks import PeakTableError, interconnect_of, load_interconnects, load_peaks, nccl_floor, parse_table, peaks_for
from validate.thresholds import DATASHEET_FRACTION, FAIL, PASS, REFERENCE_FRACTION, throughput_verdict

H100 = "NVIDIA H100 80GB HBM3"


def _judge(name: str, metric: str, measured: float):
    entry = peaks_for(name, load_peaks())
    assert entry is not None
    reference = entry.reference_for(metric)
    return throughput_verdict(
        metric, measured, entry.peak(metric), reference=reference[0] if reference else None,
        reference_note=reference[1] if reference else "",
    )


def test_h100_bf16_at_half_its_measured_speed_fails():
    """GPU-NOTES: an H100 reaches about 790 TFLOPS bf16; half of that (395) passed the old 0.35 x
    datasheet floor (346). The measured reference makes it fail; the healthy figure passes."""
    half = _judge(H100, "bf16_tflops", 395.0)
    assert half.verdict == FAIL
    assert half.threshold.startswith(f">= {REFERENCE_FRACTION:.2f} x measured reference 790")
    assert "lent H100" in half.threshold and "2026" in half.threshold
    assert _judge(H100, "bf16_tflops", 760.0).verdict == PASS
    assert _judge(H100, "memory_bandwidth_gbs", 1500.0).verdict == FAIL  # half of ~3000 GB/s
    assert _judge(H100, "memory_bandwidth_gbs", 2900.0).verdict == PASS


@pytest.mark.parametrize("metric", ["fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops", "memory_bandwidth_gbs"])
def test_half_speed_fails_on_every_model_in_the_table(metric):
    """Whichever rule applies, a GPU at half of its healthy figure fails. Healthy is the measured
    reference where there is one, else at most the datasheet figure itself."""
    for entry in load_peaks():
        peak = entry.peak(metric)
        if peak is None:
            continue
        reference = entry.reference_for(metric)
        healthy = reference[0] if reference else peak
        verdict = _judge(entry.nvml_names[0], metric, 0.5 * healthy)
        assert verdict.verdict == FAIL, (entry.model, metric, verdict)
        rule = "measured reference" if reference else "datasheet"
        assert rule in verdict.threshold


def test_datasheet_rule_passes_a_healthy_gpu_and_says_which_rule():
    # An A100 80GB (no measured reference here) at 280 of 312 bf16 TFLOPS.
    verdict = _judge("NVIDIA A100-SXM4-80GB", "bf16_tflops", 280.0)
    assert verdict.verdict == PASS and verdict.threshold == f">= {DATASHEET_FRACTION:.2f} x datasheet 312 (no measured reference)"


@pytest.mark.parametrize(
    ("nvml_name", "bf16", "memory"),
    [
        ("NVIDIA H200 NVL", 835.5, 4800),
        ("NVIDIA B200", 2250, 7700),
        ("NVIDIA GH200 480GB", 989.5, 4000),
        ("NVIDIA L40", 181.05, 864),
        ("NVIDIA L40S", 362.05, 864),
        ("NVIDIA A30", 165, 933),
        ("NVIDIA A40", 149.7, 696),
        ("NVIDIA RTX 6000 Ada Generation", 364.2, 960),
        ("NVIDIA GeForce RTX 5090", 209.5, 1792),
    ],
)
def test_models_the_review_found_missing_are_judged(nvml_name, bf16, memory):
    entry = peaks_for(nvml_name, load_peaks())
    assert entry is not None and entry.source.startswith("https://")
    assert entry.peak("bf16_tflops") == bf16 and entry.peak("memory_bandwidth_gbs") == memory
    assert _judge(nvml_name, "bf16_tflops", 0.4 * bf16).verdict == FAIL


def test_reference_blocks_are_validated():
    base = {"model": "X", "nvml_names": ["X"], "fp32_tflops": 1, "memory_bandwidth_gbs": 100, "source": "https://example.com/x"}
    with pytest.raises(PeakTableError, match="reference needs a 'date'"):
        parse_table({"gpus": [{**base, "reference": {"bf16_tflops": 5, "source": "s", "method": "m"}}]})
    with pytest.raises(PeakTableError, match="unknown keys"):
        parse_table({"gpus": [{**base, "reference": {"bf16": 5, "source": "s", "date": "2026", "method": "m"}}]})


def _gpu(name: str, nvlinks: int | None, gen: int = 5, width: int = 16) -> GpuInfo:
    return GpuInfo(0, name, "GPU-x", "00000000:18:00.0", "9.0", 1, 0, pcie_link_gen_max=gen, pcie_link_width_max=width, nvlink_active_links=nvlinks)


def test_nccl_floor_on_nvlink_h100s():
    kind, link = interconnect_of([_gpu(H100, 18)] * 8, load_peaks())
    assert (kind, link) == ("nvlink", 450.0)  # 900 GB/s both ways per the datasheet
    minimum, rule = nccl_floor(kind, link, load_interconnects())
    assert minimum == pytest.approx(0.45 * 450) and "NVLink" in rule
    # A healthy 8x H100 all-reduce busbw is ~360-480 GB/s; half of 360 fails.
    assert 180 < minimum < 360


def test_nccl_floor_on_pcie_and_unknown_links():
    kind, link = interconnect_of([_gpu("NVIDIA L40S", None, 4, 16), _gpu("NVIDIA L40S", 0, 4, 8)], load_peaks())
    assert kind == "pcie" and link == pytest.approx(1.969 * 8)  # the slowest GPU's link
    minimum, rule = nccl_floor(kind, link, load_interconnects())
    assert minimum == pytest.approx(0.25 * 1.969 * 8) and "PCIe" in rule
    # NVLink on a model without a datasheet NVLink figure: no floor, only --baseline judges.
    assert nccl_floor(*interconnect_of([_gpu("NVIDIA A40", 4)] * 2, load_peaks()), load_interconnects()) is None
