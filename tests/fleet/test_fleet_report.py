"""The fleet report's renderers, fed recorded suite reports (pure: no servers)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from gpuenv.fleet.outcome import FAILED, NOT_READY, READY, UNREACHABLE, HostOutcome, fleet_ready, status_from_report
from gpuenv.fleet.report import (
    analyse, build_json, check_area, load_suite_report, render_html, render_junit, render_table, summarise_verdicts,
)
from suitecases import A100, cpu_report, gpu, gpu_report
from validate.peaks import load_peaks

PEAKS = load_peaks()


def rack() -> list[HostOutcome]:
    """Three H100 hosts (one slow GPU), one A100 host with a failed check, one unreachable host."""
    a = gpu_report([(gpu(0, host=1), 700.0, 3000.0), (gpu(1, host=1), 690.0, 2950.0)])
    b = gpu_report([(gpu(0, host=2), 710.0, 3010.0), (gpu(1, host=2), 400.0, 2980.0)])  # GPU 1: bf16 far below
    c = gpu_report([(gpu(0, host=3), 705.0, 2990.0)])
    d = gpu_report([(gpu(0, A100, host=4), 250.0, 1800.0)], failed=["tensorflow memory growth [growth-env]"])
    outs = []
    for name, report in (("ssh://ops@gpu1", a), ("ssh://ops@gpu2", b), ("ssh://ops@gpu3", c), ("ssh://ops@gpu4", d)):
        status, reason = status_from_report(report, report["summary"]["pytest_exit_status"])
        outs.append(HostOutcome(name, status, reason, report=report, seconds=12.5, exit_code=report["summary"]["pytest_exit_status"]))
    outs.append(HostOutcome("ssh://ops@gpu5", UNREACHABLE, "cannot reach gpu5 over SSH (NoValidConnectionsError: refused)"))
    return outs


def test_status_from_report_needs_ok_and_exit_zero():
    assert status_from_report(cpu_report(), 0) == (READY, "")
    assert status_from_report(None, 1)[0] == FAILED
    failing = gpu_report([(gpu(0), 700.0, 3000.0)], failed=["device memory GB/s"])
    status, reason = status_from_report(failing, 1)
    assert status == NOT_READY and "device memory GB/s" in reason
    assert status_from_report(cpu_report(), 2)[0] == NOT_READY  # report says ok, but the suite was interrupted


def test_fleet_ready_only_when_every_host_is():
    assert not fleet_ready([])
    assert fleet_ready([HostOutcome("a", READY)])
    assert not fleet_ready([HostOutcome("a", READY), HostOutcome("b", UNREACHABLE, "x")])


def test_analyse_medians_are_per_gpu_model_and_flag_outliers():
    fleet = analyse(rack(), PEAKS)
    h100 = fleet.medians["NVIDIA H100 80GB HBM3"]
    assert h100["matmul bf16 TFLOPS"] == 700.0  # median of 700, 690, 710, 400, 705
    assert fleet.medians[A100]["matmul bf16 TFLOPS"] == 250.0  # the A100 is not judged against H100s
    outliers = [(row.host, row.index, check) for row, check, _ in fleet.outliers()]
    assert outliers == [("ssh://ops@gpu2", 1, "matmul bf16 TFLOPS")]
    slow = next(r for r in fleet.rows if r.host == "ssh://ops@gpu2" and r.index == 1)
    fig = slow.figures["matmul bf16 TFLOPS"]
    assert fig.peak == 989.5 and fig.outlier and fig.reference() == ("peak", 989.5)
    assert slow.worst_figure()[0] == "matmul bf16 TFLOPS"


def test_baseline_applies_per_gpu_model():
    baseline = {"NVIDIA H100 80GB HBM3": {"matmul bf16 TFLOPS": 720.0}, A100: {"device memory GB/s": 1900.0}}
    fleet = analyse(rack(), PEAKS, baseline)
    h100 = next(r for r in fleet.rows if r.host == "ssh://ops@gpu1" and r.index == 0)
    a100 = next(r for r in fleet.rows if r.host == "ssh://ops@gpu4")
    assert h100.figures["matmul bf16 TFLOPS"].reference() == ("baseline", 720.0)
    assert h100.figures["device memory GB/s"].reference() == ("peak", 3350.0)  # no baseline for that check
    assert a100.figures["device memory GB/s"].reference() == ("baseline", 1900.0)
    assert a100.figures["matmul bf16 TFLOPS"].baseline is None  # the H100 figure does not leak to the A100
    assert "baseline applied per GPU model" in render_table(fleet)


def test_unknown_model_without_peak_is_judged_against_the_fleet():
    report = gpu_report([(gpu(0, "NVIDIA Future GPU", host=9), 100.0, 500.0), (gpu(1, "NVIDIA Future GPU", host=9), 80.0, 500.0)])
    fleet = analyse([HostOutcome("n1", READY, report=report)], PEAKS)
    fig = fleet.rows[1].figures["matmul bf16 TFLOPS"]
    assert fig.peak is None and fig.reference() == ("fleet median", 90.0)
    assert fig.outlier  # 80 < 0.9 * 90


def test_text_table_has_host_gpu_area_verdicts_and_worst_figure():
    text = render_table(analyse(rack(), PEAKS))
    lines = text.splitlines()
    assert lines[0].split() == ["host", "GPU", "status", "environment", "visibility", "memory", "masking", "speed", "worst", "figure"]
    gpu2 = next(line for line in lines if line.startswith("ssh://ops@gpu2") and " 1 NVIDIA" in line)
    assert "matmul bf16 TFLOPS 400.0 (40% of peak) OUTLIER" in gpu2
    gpu4 = next(line for line in lines if line.startswith("ssh://ops@gpu4"))
    assert "not ready" in gpu4 and "FAIL 1" in gpu4
    gpu5 = next(line for line in lines if line.startswith("ssh://ops@gpu5"))
    assert "unreachable" in gpu5
    assert "3 of 5 host(s) ready" in text
    assert "unreachable: ssh://ops@gpu5: cannot reach gpu5" in text
    assert "  fail: tensorflow memory growth [growth-env] [GPU 0]: tensorflow memory growth [growth-env] below threshold" in text
    assert "outlier: ssh://ops@gpu2 GPU 1" in text


def test_text_table_of_cpu_hosts_uses_the_real_suite_report():
    one = analyse([HostOutcome("ssh://root@127.0.0.1:2222", READY, report=cpu_report())], PEAKS)
    line = render_table(one).splitlines()[2]
    assert line.split()[:3] == ["ssh://root@127.0.0.1:2222", "-", "ready"]
    assert line.split()[-1] == "-"  # one host: no peak, no baseline, and a median of one is no reference
    slower = cpu_report()
    for check in slower["host"]["checks"]:
        if check["value"] is not None:
            check["value"] *= 0.5
    two = analyse([HostOutcome("a", READY, report=cpu_report()), HostOutcome("b", READY, report=slower)], PEAKS)
    rows = render_table(two).splitlines()
    assert "(133% of fleet median)" in rows[2] and "(67% of fleet median) OUTLIER" in rows[3]


def test_json_is_keyed_by_host_then_gpu_uuid():
    outs = rack()
    data = json.loads(json.dumps(build_json(analyse(outs, PEAKS))))
    assert data["format"] == "gpuenv-fleet-report/1" and data["ready"] is False
    assert list(data["hosts"]) == [o.host for o in outs]
    slow_uuid = gpu(1, host=2)["uuid"]
    entry = data["hosts"]["ssh://ops@gpu2"]["gpus"][slow_uuid]
    assert entry["gpu"]["index"] == 1 and entry["model"] == "NVIDIA H100 80GB HBM3"
    assert entry["figures"]["matmul bf16 TFLOPS"]["outlier"] is True
    assert entry["figures"]["matmul bf16 TFLOPS"]["fraction_of_median"] == pytest.approx(400 / 700, abs=1e-4)
    assert any(c["check"] == "matmul bf16 TFLOPS" for c in entry["checks"])
    assert data["hosts"]["ssh://ops@gpu5"]["status"] == "unreachable" and data["hosts"]["ssh://ops@gpu5"]["gpus"] == {}


def test_junit_has_one_testsuite_per_host():
    root = ET.fromstring(render_junit(analyse(rack(), PEAKS)))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [f"ssh://ops@gpu{i}" for i in range(1, 6)]
    gpu4 = suites[3]
    assert gpu4.get("failures") == "1" and gpu4.find("testcase/failure") is not None
    gpu5 = suites[4]
    assert gpu5.get("errors") == "1" and "unreachable" in gpu5.find("testcase/error").get("message")
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites)
    assert root.get("failures") == "1" and root.get("errors") == "1"


def test_html_is_self_contained_with_svg_plots_and_outliers():
    page = render_html(analyse(rack(), PEAKS), generated="2026-01-01 00:00 UTC")
    assert page.startswith("<!DOCTYPE html>")
    for marker in ('id="fleet-table"', 'id="plot-matmul-bf16-tflops"', 'id="plot-device-memory-gb-s"', 'id="fleet-outliers"'):
        assert marker in page
    assert page.count("<svg") == 2
    assert 'data-hosts="5" data-ready="3" data-outliers="1"' in page
    # no network assets: nothing fetched from http(s), no scripts, no external stylesheets or images
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert "http://www.w3.org" in page  # the SVG namespace, which is an identifier, not a fetch
    assert not [u for u in __import__("re").findall(r'(?:src|href)="(https?:[^"]+)"', page)]


def test_html_without_gpus_says_there_is_nothing_to_plot():
    page = render_html(analyse([HostOutcome("h", READY, report=cpu_report())], PEAKS))
    assert "<svg" not in page and "No GPU in this fleet reported matmul bf16 TFLOPS" in page


def test_small_helpers():
    assert summarise_verdicts([]) == "-"
    assert summarise_verdicts(["pass", "skip", "info"]) == "pass, 1 skip"
    assert summarise_verdicts(["skip", "skip"]) == "skip"
    assert summarise_verdicts(["pass", "fail", "fail"]) == "FAIL 2"
    assert check_area({"test": "checks/test_05_speed.py::test_x[gpu0]"}) == "speed"
    assert check_area({"test": "checks/test_99_custom_site.py::test_y"}) == "other"
    assert load_suite_report("not json") is None and load_suite_report('{"format": "other"}') is None
    assert load_suite_report(json.dumps(cpu_report()))["summary"]["ok"] is True
