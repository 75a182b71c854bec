"""Speed floors from measured references (issue 17 item 2): DCGM's rule, 75% of what a healthy GPU
of the same model measured, on the published figures the issue names. The rule is checked on
figures it was not drawn from (a unit held out from the others, DCGM's own figure for a model):
those pass; a unit at half its reference fails; a model with no reference is "not judged" (never a
pass or a fail from a datasheet fraction). Every figure below is also in gpu_peaks.yaml with its
public source;
the tests read it from there and check the number, so a changed table shows here."""

from __future__ import annotations

import dataclasses

import pytest

from validate.host.nvml import GpuInfo
from validate.judge.peaks import (
    interconnect_of,
    load_interconnects,
    load_peaks,
    nccl_floor,
    parse_table,
    peaks_for,
)
from validate.judge.speed import judge_figure, mig_share
from validate.judge.verdict import FAIL, NOT_JUDGED, NOT_JUDGED_WORDS, PASS, WARN
from validate.simpleyaml import TableError

H100_SXM = "NVIDIA H100 80GB HBM3"
ZZC = "https://github.com/zzc0721/torch-performance-test-data/issues/"
DCGM = "https://github.com/NVIDIA/DCGM/blob/master/nvvs/diag-skus.yaml.in"


def _judge(name: str, metric: str, measured: float, **kwargs):
    entry = peaks_for(name, load_peaks())
    assert entry is not None, name
    return judge_figure(metric, measured, entry.reference_for(metric), **kwargs)


# (NVML name, metric, a healthy unit's published figure at n=8192, the source it is cited from)
HEALTHY = [
    ("NVIDIA L4", "fp32_tflops", 10.66, ZZC + "120"),
    ("NVIDIA L4", "tf32_tflops", 25.69, ZZC + "120"),
    ("NVIDIA L4", "bf16_tflops", 59.40, ZZC + "120"),
    ("NVIDIA H100 80GB HBM3", "bf16_tflops", 797.51, ZZC + "79"),
    ("NVIDIA H100 80GB HBM3", "fp32_tflops", 51.81, ZZC + "79"),
    ("NVIDIA H100 PCIe", "bf16_tflops", 492.84, ZZC + "95"),
    ("NVIDIA H100 PCIe", "tf32_tflops", 240.43, ZZC + "95"),
    ("NVIDIA A100-PCIE-40GB", "bf16_tflops", 215.26, ZZC + "108"),
    ("NVIDIA GeForce RTX 5090", "fp32_tflops", 65.92, ZZC + "96"),
    (
        "NVIDIA GeForce RTX 5090",
        "fp32_tflops",
        56.06,
        ZZC + "200",
    ),  # the slow unit that failed 0.55 x datasheet
    ("NVIDIA GeForce RTX 5090", "bf16_tflops", 174.68, ZZC + "200"),
]


@pytest.mark.parametrize(("name", "metric", "figure", "source"), HEALTHY)
def test_each_published_unit_is_cited_confirms_its_floor_and_half_of_it_fails(
    name, metric, figure, source
):
    # Not "the unit passes": the floor is drawn from these very figures, so that would hold by
    # construction. The rule is checked against figures it was not drawn from in the tests below.
    entry = peaks_for(name, load_peaks())
    reference = entry.reference_for(metric)
    assert reference is not None and reference.confirmed
    assert any(m.value == figure and m.source == source for m in reference.measurements), (
        "the figure is cited in the data"
    )
    assert "measured reference" in _judge(name, metric, reference.value).threshold
    half = _judge(name, metric, 0.5 * reference.value)
    assert half.verdict == FAIL and "is below" in half.reason


def _held_out_units():
    """(model, metric, held-out figure, the other units) for every model with several published
    units."""
    cases = []
    for entry in load_peaks():
        for metric in {m.metric for m in entry.measured}:
            units = [m for m in entry.measured if m.metric == metric and m.matches_suite]
            for held in units if len(units) > 1 else ():
                cases.append(
                    (
                        entry.nvml_names[0],
                        metric,
                        held.value,
                        tuple(m for m in units if m is not held),
                    )
                )
    return sorted(cases, key=lambda c: (c[0], c[1], c[2]))


HELD_OUT = _held_out_units()
#: Held-out units the other units' floor fails: the slow RTX 5090 of
#: zzc0721/torch-performance-test-data #200 is 74.4% (bf16) and 74.8% (tf32) of the slower of the
#: two fast units, just under DCGM's 75%. The rule stays right only because that slow unit is
#: published and sets the floor itself: a finding, kept visible here (strict: the day the table or
#: the rule changes this, the test says so).
BELOW_THE_OTHERS = {
    ("NVIDIA GeForce RTX 5090", "bf16_tflops", 174.68),
    ("NVIDIA GeForce RTX 5090", "tf32_tflops", 85.43),
}


@pytest.mark.parametrize(
    ("name", "metric", "figure", "others"),
    [
        pytest.param(
            *c, marks=pytest.mark.xfail(strict=True, reason="slow unit below 75% of the fast ones")
        )
        if c[:3] in BELOW_THE_OTHERS
        else c
        for c in HELD_OUT
    ],
    ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in HELD_OUT],
)
def test_a_held_out_healthy_unit_passes_the_floor_drawn_from_the_other_units(
    name, metric, figure, others
):
    entry = peaks_for(name, load_peaks())
    without = dataclasses.replace(
        entry, measured=tuple(m for m in entry.measured if m.metric != metric or m in others)
    )
    reference = without.reference_for(metric)
    assert reference.confirmed and figure not in [m.value for m in reference.measurements]
    assert judge_figure(metric, figure, reference).verdict == PASS


def test_there_are_held_out_units_to_check_the_rule_with():
    assert len(HELD_OUT) >= 6


#: DCGM's own figure for a healthy unit (nvvs/diag-skus.yaml.in, another tool: cuBLAS SGEMM), for
#: models whose floor comes from torch.matmul figures only: a healthy figure the floor was not drawn
#: from.
OTHER_TOOL = [
    (e.nvml_names[0], m.metric, m.value)
    for e in load_peaks()
    for m in e.measured
    if not m.matches_suite
    and m.method.startswith("DCGM")
    and e.reference_for(m.metric)
    and e.reference_for(m.metric).confirmed
]


@pytest.mark.parametrize(
    ("name", "metric", "figure"), OTHER_TOOL, ids=[f"{n}-{m}" for n, m, _ in OTHER_TOOL]
)
def test_a_healthy_figure_from_another_tool_passes_the_torch_floor(name, metric, figure):
    reference = peaks_for(name, load_peaks()).reference_for(metric)
    assert figure not in [m.value for m in reference.measurements]
    assert judge_figure(metric, figure, reference).verdict == PASS


def test_there_are_other_tool_figures_to_check_the_rule_with():
    assert len(OTHER_TOOL) >= 3


def test_the_old_datasheet_floor_would_have_failed_these_healthy_units():
    """The reason for the change: 0.55 x datasheet is above what healthy power-capped parts
    measure."""
    for name, metric, figure, _ in HEALTHY:
        if name == "NVIDIA L4" or figure == 56.06:
            assert figure < 0.55 * peaks_for(name, load_peaks()).peak(metric)


@pytest.mark.parametrize(
    ("name", "metric"),
    [
        ("Tesla T4", "fp32_tflops"),
        ("NVIDIA L40S", "fp32_tflops"),
        (H100_SXM, "memory_bandwidth_gbs"),
    ],
)
def test_unconfirmed_reference_warns_below_75_percent_and_fails_half_speed(name, metric):
    reference = peaks_for(name, load_peaks()).reference_for(metric)
    slow = _judge(name, metric, 0.65 * reference.value)  # as far below as a healthy L4 can be
    assert slow.verdict == WARN and not slow.failed
    assert "unconfirmed reference" in slow.threshold and "--baseline" in slow.reason
    half = _judge(name, metric, 0.5 * reference.value)
    assert half.verdict == FAIL and "half speed" in half.reason


def test_the_unconfirmed_fail_line_is_below_the_widest_published_gap():
    """L4 fp32: n=8192 10.66 against its best of sizes 15.38
    (zzc0721/torch-performance-test-data #120): 0.69, above 0.55."""
    from validate.judge.speed import UNCONFIRMED_FAIL_FRACTION

    assert 10.66 / 15.38 > UNCONFIRMED_FAIL_FRACTION > 0.5


def test_a_confirmed_figure_wins_over_an_unconfirmed_one():
    # L4 fp32: torch.matmul n=8192 10.66 (confirmed) and DCGM's SGEMM 11.6 (other tool).
    reference = peaks_for("NVIDIA L4", load_peaks()).reference_for("fp32_tflops")
    assert reference.confirmed and reference.value == 10.66 and len(reference.measurements) == 1
    # RTX 5090: three published units at n=8192; the lowest sets the floor.
    reference = peaks_for("NVIDIA GeForce RTX 5090", load_peaks()).reference_for("fp32_tflops")
    assert (
        reference.value == 56.06
        and len(reference.measurements) == 3
        and "lowest of 3 units" in reference.describe()
    )


@pytest.mark.parametrize(
    ("name", "metric"),
    [
        ("NVIDIA A100 80GB PCIe", "bf16_tflops"),
        ("NVIDIA H100 NVL", "bf16_tflops"),
        ("Tesla T4", "fp16_tflops"),
        ("NVIDIA GeForce GTX 1080", "fp32_tflops"),
    ],
)
def test_no_reference_is_not_judged_never_a_datasheet_pass_or_fail(name, metric):
    entry = peaks_for(name, load_peaks())
    reference = entry.reference_for(metric) if entry else None
    assert reference is None
    for figure in (1.0, 10_000.0):  # whether absurdly slow or fast
        verdict = judge_figure(metric, figure, reference)
        assert verdict.verdict == NOT_JUDGED == "not judged" and not verdict.failed
    assert (
        judge_figure(metric, 1.0, None, baseline=100.0).verdict == FAIL
    )  # a saved baseline judges it
    assert "no reference" in NOT_JUDGED_WORDS


def test_every_measurement_cites_an_https_source_and_says_how_it_was_taken():
    """A public page, or this project's own run kept in the repository (test_peaks_own_runs.py)."""
    count = 0
    for entry in load_peaks():
        for m in entry.measured:
            count += 1
            assert m.source.startswith(("https://github.com/", "gpuenv:tests/")), (entry.model, m)
            assert m.method and m.date and m.dtype
            assert "GPU-NOTES" not in m.source + m.note
            if m.source == DCGM:
                assert not m.matches_suite and "SKU" in m.note
    assert count >= 30


def test_h100_reference_is_public_not_the_shared_note():
    entry = peaks_for(H100_SXM, load_peaks())
    bf16 = entry.reference_for("bf16_tflops")
    assert bf16.confirmed and bf16.value == 797.51 and bf16.measurements[0].source == ZZC + "79"


class TestMig:
    """A MIG instance against its parent's reference scaled by its share of SMs."""

    def test_share_of_sms(self):
        assert mig_share(66, 132) == 0.5
        assert (
            mig_share(None, 132) is None
            and mig_share(16, None) is None
            and mig_share(200, 132) is None
        )

    def test_instance_passes_at_its_share_and_fails_at_half_of_it(self):
        # An H100 SXM (132 SMs) 3g.40gb instance has 60 SMs.
        share = mig_share(60, 132)
        healthy = 797.51 * share * 0.95
        verdict = _judge(H100_SXM, "bf16_tflops", healthy, mig=True, share=share)
        assert verdict.verdict == PASS and "of the GPU's SMs" in verdict.threshold
        assert (
            _judge(H100_SXM, "bf16_tflops", 0.5 * 797.51 * share, mig=True, share=share).verdict
            == FAIL
        )
        # Against the whole GPU's reference the healthy instance would have failed.
        assert _judge(H100_SXM, "bf16_tflops", healthy).verdict == FAIL

    def test_memory_bandwidth_of_an_instance_is_not_scaled_by_sms(self):
        verdict = _judge(
            H100_SXM, "memory_bandwidth_gbs", 900.0, mig=True, share=mig_share(60, 132)
        )
        assert verdict.verdict == NOT_JUDGED and "memory slices" in verdict.reason

    def test_unknown_share_is_not_judged_and_a_whole_gpu_baseline_is_not_used(self):
        verdict = _judge(H100_SXM, "bf16_tflops", 300.0, mig=True, share=None, baseline=800.0)
        assert verdict.verdict == NOT_JUDGED and "multiprocessor count" in verdict.reason


def test_measurements_are_validated():
    base = {
        "model": "X",
        "nvml_names": ["X"],
        "fp32_tflops": 1,
        "memory_bandwidth_gbs": 100,
        "source": "https://example.com/x",
    }
    good = {
        "value": 5,
        "method": "torch.matmul",
        "n": 8192,
        "dtype": "bf16",
        "source": "https://example.com/m",
        "date": "2026",
    }
    entry = parse_table({"gpus": [{**base, "measured_bf16_tflops": [good]}]})[0]
    assert entry.reference_for("bf16_tflops").confirmed
    cases = [
        ({"measured_bf16": [good]}, "unknown metric"),
        ({"measured_bf16_tflops": []}, "non-empty list"),
        ({"measured_bf16_tflops": [{**good, "source": "GPU-NOTES.md"}]}, "https:// URL"),
        ({"measured_bf16_tflops": [{**good, "date": ""}]}, "needs a 'date'"),
        ({"measured_bf16_tflops": [{**good, "n": "big"}]}, "'n' must be"),
        ({"measured_bf16_tflops": [{**good, "dtype": "int8"}]}, "'dtype' must be"),
        ({"measured_bf16_tflops": [{**good, "value": 0}]}, "positive number"),
        ({"measured_bf16_tflops": [{**good, "where": "x"}]}, "unknown keys"),
    ]
    for extra, message in cases:
        with pytest.raises(TableError, match=message):
            parse_table({"gpus": [{**base, **extra}]})


def test_a_measurement_at_another_size_or_dtype_does_not_confirm():
    base = {
        "model": "X",
        "nvml_names": ["X"],
        "fp32_tflops": 1,
        "memory_bandwidth_gbs": 100,
        "source": "https://example.com/x",
    }
    m = {
        "value": 5,
        "method": "torch.matmul",
        "n": 4096,
        "dtype": "bf16",
        "source": "https://example.com/m",
        "date": "2026",
    }
    entry = parse_table(
        {
            "gpus": [
                {**base, "measured_bf16_tflops": [m], "measured_fp16_tflops": [{**m, "n": 8192}]}
            ]
        }
    )[0]
    assert not entry.reference_for("bf16_tflops").confirmed  # n = 4096
    assert not entry.reference_for("fp16_tflops").confirmed  # a bf16 figure filed under fp16


def _gpu(name: str, nvlinks: int | None, gen: int = 5, width: int = 16) -> GpuInfo:
    return GpuInfo(
        0,
        name,
        "GPU-x",
        "00000000:18:00.0",
        "9.0",
        1,
        0,
        pcie_link_gen_max=gen,
        pcie_link_width_max=width,
        nvlink_active_links=nvlinks,
    )


def test_nccl_floor_on_nvlink_h100s():
    kind, link = interconnect_of([_gpu(H100_SXM, 18)] * 8, load_peaks())
    assert (kind, link) == ("nvlink", 450.0)  # 900 GB/s both ways per the datasheet
    minimum, rule = nccl_floor(kind, link, load_interconnects())
    assert minimum == pytest.approx(0.45 * 450) and "NVLink" in rule
    # A healthy 8x H100 all-reduce busbw is ~360-480 GB/s; half of 360 fails.
    assert 180 < minimum < 360


def test_nccl_floor_on_pcie_and_unknown_links():
    kind, link = interconnect_of(
        [_gpu("NVIDIA L40S", None, 4, 16), _gpu("NVIDIA L40S", 0, 4, 8)], load_peaks()
    )
    assert kind == "pcie" and link == pytest.approx(1.969 * 8)  # the slowest GPU's link
    minimum, rule = nccl_floor(kind, link, load_interconnects())
    assert minimum == pytest.approx(0.25 * 1.969 * 8) and "PCIe" in rule
    # NVLink on a model without a datasheet NVLink figure: no floor, only --baseline judges.
    assert (
        nccl_floor(
            *interconnect_of([_gpu("NVIDIA A40", 4)] * 2, load_peaks()), load_interconnects()
        )
        is None
    )


def test_readme_table_lists_every_reference_with_its_floor():
    """docs/suite.md ("What the suite checks and how it judges") stays true to gpu_peaks.yaml: its
    table is what scripts/reference_table.py prints (run it and paste when a reference changes)."""
    import importlib.util
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location(
        "reference_table", repo / "scripts" / "reference_table.py"
    )
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    rows = table.rows()
    readme = (repo / "docs" / "suite.md").read_text(encoding="utf-8")
    assert "\n".join(rows) in readme, (
        "docs/suite.md's reference table is stale: python scripts/reference_table.py"
    )
    expected = 0
    for entry in load_peaks():
        for metric, label in table.LABELS.items():
            reference = entry.reference_for(metric)
            if reference is None:
                continue
            expected += 1
            row = next(
                r
                for r in rows
                if r.startswith(f"| {entry.model} | {label} | {reference.value:g} (")
            )
            assert f"| {0.75 * reference.value:.4g}" in row and (
                ("(warns; fails below" in row) != reference.confirmed
            )
            assert all(m.source in row for m in reference.measurements)
    assert len(rows) == expected + 2  # header, rule, one row per reference
    unjudged = table.unjudged_rows()
    assert "\n".join(unjudged) in readme, (
        "docs/suite.md's not-judged table is stale: python scripts/reference_table.py"
    )
    listed = [(e, metric) for e in load_peaks() for metric, _ in e.no_reference]
    assert len(unjudged) == len(listed) + 2 and all(
        e.reference_for(metric) is None for e, metric in listed
    )


@pytest.mark.parametrize(
    ("name", "metrics"),
    [
        ("NVIDIA A100-SXM4-40GB", ("fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops")),
        (
            "NVIDIA RTX 6000 Ada Generation",
            ("tf32_tflops", "bf16_tflops", "fp16_tflops", "memory_bandwidth_gbs"),
        ),
        ("NVIDIA GB200", ("tf32_tflops", "bf16_tflops", "fp16_tflops")),
    ],
)
def test_models_without_a_public_figure_say_why_and_are_not_judged(name, metrics):
    """Issue 26 item 4: where no public figure exists the data says so (what was searched), and the
    figure is not judged rather than guessed from a neighbouring SKU."""
    entry = peaks_for(name, load_peaks())
    why = dict(entry.no_reference)
    assert set(metrics) <= set(why) and all("no public figure" in why[m] for m in metrics)
    for metric in metrics:
        assert _judge(name, metric, 1.0).verdict == NOT_JUDGED


def test_the_a10g_is_judged_like_for_like_and_its_dcgm_figures_only_warn():
    """A10G: torch.matmul at n=8192 (zzc0721 #126) confirms fp32/tf32/bf16/fp16; memory bandwidth
    has only DCGM's figure, so below 75% of it warns and only below 0.55 of it fails."""
    entry = peaks_for("NVIDIA A10G", load_peaks())
    for metric, figure in (
        ("fp32_tflops", 23.23),
        ("tf32_tflops", 34.13),
        ("bf16_tflops", 66.59),
        ("fp16_tflops", 65.67),
    ):
        reference = entry.reference_for(metric)
        assert (
            reference.confirmed
            and reference.value == figure
            and reference.measurements[0].source == ZZC + "126"
        )
        assert _judge("NVIDIA A10G", metric, 0.5 * figure).verdict == FAIL
    memory = entry.reference_for("memory_bandwidth_gbs")
    assert not memory.confirmed and memory.value == 483.6
    assert _judge("NVIDIA A10G", "memory_bandwidth_gbs", 0.7 * 483.6).verdict == WARN
    assert _judge("NVIDIA A10G", "memory_bandwidth_gbs", 0.5 * 483.6).verdict == FAIL


def test_the_gb200_has_only_dcgms_figures_and_they_only_warn():
    """GB200: DCGM's entry for its device and subsystem (2941/2046) is the only public figure, taken
    another way: unconfirmed, a figure below 75% of it warns; the data records that DCGM names it
    B200."""
    entry = peaks_for("NVIDIA GB200", load_peaks())
    fp32 = entry.reference_for("fp32_tflops")
    assert (
        not fp32.confirmed
        and fp32.value == 20.3
        and "SOURCES DISAGREE" in fp32.measurements[0].note
    )
    assert _judge("NVIDIA GB200", "fp32_tflops", 0.7 * 20.3).verdict == WARN
    assert _judge("NVIDIA GB200", "fp32_tflops", 60.0).verdict == PASS


# --- the expected interconnect comes from the product, not from the links that are up (D14) ------


def _gpu_at(index: int, name: str, nvlinks: int | None) -> GpuInfo:
    return GpuInfo(
        index,
        name,
        f"GPU-{index}",
        f"00000000:{0x18 + index:02X}:00.0",
        "9.0",
        1,
        0,
        pcie_link_gen_max=5,
        pcie_link_width_max=16,
        nvlink_active_links=nvlinks,
    )


def test_a_gpu_with_every_nvlink_down_keeps_its_host_on_the_nvlink_floor():
    """The review's reproduction: seven H100s with 18 links and one with 0 read as a PCIe host with
    a 15.75 GB/s floor; the product says NVLink, so the floor stays NVLink's 202.5 GB/s."""
    gpus = [_gpu_at(i, H100_SXM, 18) for i in range(7)] + [_gpu_at(7, H100_SXM, 0)]
    kind, link = interconnect_of(gpus, load_peaks())
    assert (kind, link) == ("nvlink", 450.0)
    assert nccl_floor(kind, link, load_interconnects())[0] == pytest.approx(202.5)


@pytest.mark.parametrize(
    "active, words", [(0, "0 of 18 NVLinks active"), (17, "17 of 18 NVLinks active")]
)
def test_a_gpu_with_nvlinks_down_fails_naming_it(active, words):
    from validate.judge.peaks import nvlink_links_verdict

    measured, verdict = nvlink_links_verdict(
        _gpu_at(7, H100_SXM, active), load_peaks(), whole_gpus=8
    )
    assert verdict.verdict == "fail" and verdict.reason.startswith(
        f"GPU 7: {words} (the {H100_SXM} has 18)"
    )
    assert measured == f"{active} of 18 active" and "DCGM_FR_NVLINK_DOWN" in verdict.reason


def test_every_nvlink_up_passes_and_what_is_not_known_is_not_judged():
    from validate.judge.peaks import nvlink_links_verdict

    table = load_peaks()
    assert nvlink_links_verdict(_gpu_at(0, H100_SXM, 18), table, 8)[1].verdict == "pass"
    assert (
        nvlink_links_verdict(_gpu_at(0, H100_SXM, None), table, 8)[1].verdict == "skip"
    )  # a VM: NotSupported
    assert (
        nvlink_links_verdict(_gpu_at(0, H100_SXM, 0), table, 1)[1].verdict == "info"
    )  # one GPU: no peer
    assert nvlink_links_verdict(_gpu_at(0, "NVIDIA L40S", None), table, 2)[1].verdict == "skip"


def test_nvlink_counts_need_their_own_source():
    base = {
        "model": "X",
        "nvml_names": ["X"],
        "fp32_tflops": 1,
        "memory_bandwidth_gbs": 100,
        "source": "https://example.com/x",
    }
    with pytest.raises(TableError, match="nvlink_links_source"):
        parse_table({"gpus": [{**base, "nvlink_links": 18}]})
    counted = [e for e in load_peaks() if e.nvlink_links]
    assert {e.model for e in counted} >= {
        "NVIDIA H100 SXM5",
        "NVIDIA A100 SXM4 80GB",
        "NVIDIA B200 (HGX, 1000 W)",
    }
