"""Fleet verdicts resist lies: impossible figures and reports of one machine under two names are set
aside ("implausible report", "duplicate report"), not ready, and feed no median.

Reports are written by the suite's own writer (suitecases.gpu_report) and read as the fleet reads
them.
"""

from __future__ import annotations

import json

import pytest
from suitecases import A100, H100, gpu, gpu_report

from gpuenv.fleet.outcome import DEGRADED, DUPLICATE, IMPLAUSIBLE, MALFORMED, READY, HostOutcome
from gpuenv.fleet.report.analysis import PEAK_MARGIN, analyse, figure_metric, impossible_figures
from gpuenv.fleet.suitereport import check_report
from validate.judge.peaks import load_peaks, peaks_for

PEAKS = load_peaks()


def screen(outcomes: list[HostOutcome], peaks) -> list[HostOutcome]:
    """The fleet analysis's verdict per host (the real analyse(), nothing else)."""
    return analyse(outcomes, peaks).outcomes


def _host(
    name: str, host: int, bf16: float, bandwidth: float = 3000.0, model: str = H100
) -> HostOutcome:
    report = check_report(
        gpu_report(
            [
                (gpu(0, model, host=host), bf16, bandwidth),
                (gpu(1, model, host=host), bf16, bandwidth),
            ]
        )
    )
    return HostOutcome(name, READY, report=report)


def test_every_published_healthy_measurement_is_plausible():
    # Figures healthy GPUs measured, from the public sources in gpu_peaks.yaml: none derives from
    # the margin.
    checked = 0
    for entry in PEAKS:
        for m in entry.measured:
            check = {
                "bf16_tflops": "matmul bf16 TFLOPS",
                "fp16_tflops": "matmul fp16 TFLOPS",
                "fp32_tflops": "matmul fp32 TFLOPS",
                "tf32_tflops": "matmul tf32 TFLOPS",
                "memory_bandwidth_gbs": "device memory GB/s",
            }[m.metric]
            report = {
                "G": {
                    "gpu": {"index": 0, "name": entry.nvml_names[0]},
                    "checks": [{"check": check, "value": m.value}],
                }
            }
            assert impossible_figures(report, PEAKS) == [], (entry.model, m)
            checked += 1
    assert checked >= 10


def test_the_issues_liars_are_implausible_and_the_honest_host_stays_ready():
    # Two reports claiming 1e17 TFLOPS beside one honest H100 host at 790 TFLOPS (the issue's case):
    # before, the liars read "ready" and the honest host "degraded" against their median.
    liars = [_host("liar-a", 1, 1e17), _host("liar-b", 2, 1e17)]
    honest = _host("honest", 3, 790.0)
    fleet = analyse(liars + [honest], PEAKS)
    out = {o.host: o for o in fleet.outcomes}
    assert out["honest"].status == READY != DEGRADED
    for name in ("liar-a", "liar-b"):
        assert out[name].status == IMPLAUSIBLE and out[name].report is None
        assert (
            "matmul bf16 TFLOPS 1e+17 is above" in out[name].reason
            and "datasheet peak" in out[name].reason
        )
    assert (
        fleet.medians[H100]["matmul bf16 TFLOPS"] == 790.0
    )  # the median holds the honest host's GPUs only
    assert not fleet.ready


def test_the_bound_is_the_models_datasheet_peak_with_its_margin():
    peak = peaks_for(H100, PEAKS).peak("bf16_tflops")
    assert (
        figure_metric("matmul bf16 TFLOPS")
        == figure_metric("tensorflow matmul bf16 TFLOPS")
        == "bf16_tflops"
    )
    assert screen([_host("at", 1, peak * PEAK_MARGIN * 0.99)], PEAKS)[0].status == READY
    assert screen([_host("above", 1, peak * PEAK_MARGIN * 1.01)], PEAKS)[0].status == IMPLAUSIBLE
    # An A100's datasheet peak is lower: the same H100-class figure is impossible on it.
    a100_peak = peaks_for(A100, PEAKS).peak("bf16_tflops")
    assert a100_peak * PEAK_MARGIN < 790.0
    assert screen([_host("a100", 1, 790.0, model=A100)], PEAKS)[0].status == IMPLAUSIBLE


def test_a_model_the_table_does_not_know_is_bounded_by_the_fastest_it_knows():
    assert screen([_host("new", 1, 5000.0, model="NVIDIA Future GPU")], PEAKS)[0].status == READY
    assert (
        screen([_host("forged", 1, 1e9, model="NVIDIA Future GPU")], PEAKS)[0].status == IMPLAUSIBLE
    )


@pytest.mark.parametrize("bandwidth", [-1.0, 1e12])
def test_negative_or_impossible_bandwidth_is_implausible(bandwidth):
    [outcome] = screen([_host("bw", 1, 700.0, bandwidth=bandwidth)], PEAKS)
    assert outcome.status == IMPLAUSIBLE and "device memory GB/s" in outcome.reason


def test_one_report_under_two_host_names_flags_both():
    original = _host("gpu01", 1, 700.0)
    copy = HostOutcome("gpu02", READY, report=original.report)
    other = _host("gpu03", 3, 700.0)
    out = {o.host: o for o in screen([original, copy, other], PEAKS)}
    assert out["gpu01"].status == out["gpu02"].status == DUPLICATE
    assert (
        "the same report as gpu02" in out["gpu01"].reason
        and "the same report as gpu01" in out["gpu02"].reason
    )
    assert out["gpu03"].status == READY


def test_two_hosts_claiming_one_gpu_are_flagged():
    first = _host("gpu01", 1, 700.0)
    second = check_report(
        gpu_report([(gpu(0, host=1), 702.0, 3001.0), (gpu(1, host=9), 702.0, 3001.0)])
    )
    out = {o.host: o for o in screen([first, HostOutcome("gpu02", READY, report=second)], PEAKS)}
    uuid = gpu(0, host=1)["uuid"]
    assert out["gpu01"].status == out["gpu02"].status == DUPLICATE
    assert f"GPU {uuid} is also in the report of gpu02" in out["gpu01"].reason


def test_an_unreadable_report_stays_malformed_and_is_no_duplicate():
    broken = {"format": "not a suite report"}
    out = screen(
        [
            HostOutcome("broken", READY, report=broken),
            HostOutcome("broken-too", READY, report=dict(broken)),
            _host("fine", 1, 700.0),
        ],
        PEAKS,
    )
    assert [o.status for o in out] == [MALFORMED, MALFORMED, READY]


def test_from_reports_end_to_end_sets_the_liars_and_the_copy_aside(tmp_path, invoke_cli):
    """`invoke validate --from-reports`: the issue's liars, a report copied under a second name, an
    honest host; the honest host alone is ready, the fleet is not (exit 1), the JSON says why."""
    folder, out = tmp_path / "reports", tmp_path / "fleet.json"
    folder.mkdir()
    for name, host, bf16 in (
        ("liar-a", 1, 1e17),
        ("liar-b", 2, 1e17),
        ("honest", 3, 790.0),
        ("copied", 4, 700.0),
    ):
        (folder / f"{name}.json").write_text(
            json.dumps(gpu_report([(gpu(0, host=host), bf16, 3000.0)]))
        )
    (folder / "copied-again.json").write_text((folder / "copied.json").read_text())
    run = invoke_cli("validate", "--from-reports", str(folder), "--json", str(out))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 of 5 host(s) ready" in run.stdout
    hosts = json.loads(out.read_text())["hosts"]
    statuses = {name: hosts[name]["status"] for name in hosts}
    assert statuses == {
        "liar-a": IMPLAUSIBLE,
        "liar-b": IMPLAUSIBLE,
        "honest": READY,
        "copied": DUPLICATE,
        "copied-again": DUPLICATE,
    }


def _shared_uuid_report(model: str = H100, case: str = "same") -> dict:
    """An 8-GPU report written by the suite's writer in which GPU 7 carries GPU 2's UUID (spelled
    as `case` says): the review's case, and held-out spellings of it."""
    gpus = [gpu(i, model, host=5) for i in range(8)]
    shared = gpus[2]["uuid"]
    gpus[7]["uuid"] = {"same": shared, "lower": shared.lower(), "spaced": f" {shared} "}[case]
    return gpu_report([(g, 700.0, 3000.0) for g in gpus])


@pytest.mark.parametrize("case", ["same", "lower", "spaced"])
def test_two_gpus_of_one_report_sharing_a_uuid_make_it_malformed(case):
    """Before: the report's GPU sections (keyed by UUID) merged, the fleet showed 7 GPUs and
    ready."""
    from gpuenv.fleet.suitereport import MalformedReport

    shared = gpu(2, host=5)["uuid"]
    with pytest.raises(MalformedReport) as caught:
        check_report(_shared_uuid_report(case=case))
    assert (
        "GPU 2 and GPU 7 share the UUID" in str(caught.value)
        and shared.lower() in str(caught.value).lower()
    ), str(caught.value)
    out = screen(
        [
            HostOutcome("gpu05", READY, report=_shared_uuid_report(A100, case)),
            _host("fine", 1, 700.0),
        ],
        PEAKS,
    )
    assert [o.status for o in out] == [MALFORMED, READY]


def test_from_reports_flags_a_shared_uuid_in_one_line(tmp_path, invoke_cli):
    folder, out = tmp_path / "reports", tmp_path / "fleet.json"
    folder.mkdir()
    (folder / "gpu05.json").write_text(json.dumps(_shared_uuid_report()))
    run = invoke_cli("validate", "--from-reports", str(folder), "--json", str(out))
    assert run.returncode == 1, run.stdout + run.stderr
    host = json.loads(out.read_text())["hosts"]["gpu05"]
    assert (
        host["status"] == MALFORMED and f"share the UUID {gpu(2, host=5)['uuid']}" in host["reason"]
    ), host
