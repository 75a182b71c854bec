"""The fleet report's renderers, fed recorded suite reports (pure: no servers)."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

import pytest
from suitecases import A100, PEAKS, cpu_report, gpu, gpu_report, rack

from gpuenv.fleet.outcome import (
    DEGRADED,
    FAILED,
    NOT_READY,
    READY,
    UNREACHABLE,
    HostOutcome,
    fleet_ready,
    status_from_report,
)
from gpuenv.fleet.report.analysis import AREAS, analyse, check_area, summarise_verdicts
from gpuenv.fleet.report.htmlreport import render_html
from gpuenv.fleet.report.jsonreport import build_json, render_json
from gpuenv.fleet.report.junitreport import render_junit
from gpuenv.fleet.report.terminal import render_live, render_table
from gpuenv.fleet.suitereport import MAX_TEXT, load_suite_report, safe_text
from validate.report.record import MOVED_TESTS, current_test


def test_status_from_report_needs_ok_and_exit_zero():
    assert status_from_report(cpu_report(), 0) == (READY, "")
    assert status_from_report(None, 1)[0] == FAILED
    failing = gpu_report([(gpu(0), 700.0, 3000.0)], failed=["device memory GB/s"])
    status, reason = status_from_report(failing, 1)
    assert status == NOT_READY and "device memory GB/s" in reason
    assert (
        status_from_report(cpu_report(), 2)[0] == NOT_READY
    )  # report says ok, but the suite was interrupted


def test_fleet_ready_only_when_every_host_is():
    assert not fleet_ready([])
    assert fleet_ready([HostOutcome("a", READY)])
    assert not fleet_ready([HostOutcome("a", READY), HostOutcome("b", UNREACHABLE, "x")])


def test_analyse_medians_are_per_gpu_model_and_flag_outliers():
    fleet = analyse(rack(), PEAKS)
    h100 = fleet.medians["NVIDIA H100 80GB HBM3"]
    assert h100["matmul bf16 TFLOPS"] == 700.0  # median of 700, 690, 710, 400, 705
    assert (
        fleet.medians[A100]["matmul bf16 TFLOPS"] == 250.0
    )  # the A100 is not judged against H100s
    outliers = [(row.host, row.index, check) for row, check, _ in fleet.outliers]
    assert outliers == [("ssh://ops@gpu2", 1, "matmul bf16 TFLOPS")]
    slow = next(r for r in fleet.rows if r.host == "ssh://ops@gpu2" and r.index == 1)
    fig = slow.figures["matmul bf16 TFLOPS"]
    # the datasheet is shown, never the reference: a healthy unit's measured figure is
    assert fig.peak == 989.5 and fig.outlier and fig.reference() == ("reference", 797.51)
    assert slow.worst_figure()[0] == "matmul bf16 TFLOPS"


def test_baseline_applies_per_gpu_model():
    baseline = {
        "NVIDIA H100 80GB HBM3": {"matmul bf16 TFLOPS": 720.0},
        A100: {"device memory GB/s": 1900.0},
    }
    fleet = analyse(rack(), PEAKS, baseline)
    h100 = next(r for r in fleet.rows if r.host == "ssh://ops@gpu1" and r.index == 0)
    a100 = next(r for r in fleet.rows if r.host == "ssh://ops@gpu4")
    assert h100.figures["matmul bf16 TFLOPS"].reference() == ("baseline", 720.0)
    # no baseline for that check, and no reference measured like the suite's copy: the fleet judges
    assert h100.figures["device memory GB/s"].reference()[0] == "fleet median"
    assert a100.figures["device memory GB/s"].reference() == ("baseline", 1900.0)
    assert (
        a100.figures["matmul bf16 TFLOPS"].baseline is None
    )  # the H100 figure does not leak to the A100
    assert "baseline applied per GPU model" in render_table(fleet)


def test_unknown_model_without_peak_is_judged_against_the_fleet():
    report = gpu_report(
        [
            (gpu(0, "NVIDIA Future GPU", host=9), 100.0, 500.0),
            (gpu(1, "NVIDIA Future GPU", host=9), 80.0, 500.0),
        ]
    )
    fleet = analyse([HostOutcome("n1", READY, report=report)], PEAKS)
    fig = fleet.rows[1].figures["matmul bf16 TFLOPS"]
    assert fig.peak is None and fig.reference() == ("fleet median", 90.0)
    assert fig.outlier  # 80 < 0.9 * 90


def test_text_table_puts_the_summary_and_the_worst_hosts_first():
    text = render_table(analyse(rack(), PEAKS))
    lines = text.splitlines()
    assert lines[0] == (
        "2 of 5 host(s) ready (2 ready, 1 not ready, 1 degraded, 1 unreachable); "
        "outlier floor 90% of the fleet median"
    )
    assert lines[1] == "  NVIDIA H100 80GB HBM3: 3 host(s), 5 GPU(s): 1 degraded, 2 ready"
    assert lines[2] == "  NVIDIA A100-SXM4-80GB: 1 host(s), 1 GPU(s): 1 not ready"
    assert lines[5] == "not ready, worst first (3):"
    hosts = [
        line.split(": ")[1]
        for line in lines[6:]
        if line and not line.startswith(" ") and ": " in line
    ][:3]
    assert hosts == [
        "ssh://ops@gpu4",
        "ssh://ops@gpu5",
        "ssh://ops@gpu2",
    ]  # failed, then unreachable, then slow
    assert (
        "  fail: tensorflow memory growth [growth-env] [GPU 0]: tensorflow memory growth "
        "[growth-env] below threshold" in lines
    )
    assert (
        "degraded: ssh://ops@gpu2: 1 figure(s) below 90% of the fleet median; lowest: GPU 1 "
        "matmul bf16 TFLOPS 400.0 is 57% of the fleet median 700.0 of NVIDIA H100 80GB HBM3"
    ) in lines
    header = next(n for n, line in enumerate(lines) if line.startswith("host "))
    assert lines[header].split() == ["host", "GPU", "status", *AREAS, "worst", "figure"]
    gpu2 = next(
        line for line in lines[header:] if line.startswith("ssh://ops@gpu2") and " 1 NVIDIA" in line
    )
    assert "matmul bf16 TFLOPS 400.0 (50% of reference) OUTLIER" in gpu2 and "degraded" in gpu2
    gpu4 = next(line for line in lines[header:] if line.startswith("ssh://ops@gpu4"))
    assert "not ready" in gpu4 and "FAIL 1" in gpu4
    assert not any(
        line.startswith(("ssh://ops@gpu1", "ssh://ops@gpu3")) for line in lines
    )  # ready: collapsed
    assert lines[-1].startswith("2 ready host(s) not listed (--verbose lists them")


def test_text_table_lists_ready_hosts_with_verbose():
    lines = render_table(analyse(rack(), PEAKS), verbose=True).splitlines()
    start = lines.index("ready (2):")
    assert lines[start + 1].split()[:3] == ["host", "GPUs", "status"]
    assert [line.split()[:3] for line in lines[start + 3 :]] == [
        ["ssh://ops@gpu1", "2", "ready"],
        ["ssh://ops@gpu3", "1", "ready"],
    ]


def test_an_outlier_makes_its_host_degraded_and_the_floor_is_a_setting():
    fleet = analyse(rack(), PEAKS)
    gpu2 = next(o for o in fleet.outcomes if o.host == "ssh://ops@gpu2")
    assert gpu2.status == DEGRADED and not gpu2.ready and not fleet.ready
    assert "400.0 is 57% of the fleet median 700.0" in gpu2.reason
    assert fleet.counts == {READY: 2, NOT_READY: 1, DEGRADED: 1, UNREACHABLE: 1, "malformed": 0}
    lenient = analyse(rack(), PEAKS, outlier_floor=0.5)  # 57% is above a 50% floor
    assert next(o for o in lenient.outcomes if o.host == "ssh://ops@gpu2").status == READY
    assert lenient.outliers == []
    assert [o.status for o in rack()][1] == READY  # the caller's outcomes are not changed


def test_every_area_has_a_column_and_unknown_checks_go_to_other():
    assert AREAS == (
        "environment",
        "visibility",
        "memory",
        "masking",
        "speed",
        "sustained",
        "multigpu",
        "other",
    )
    assert (
        check_area(
            {
                "test": "checks/test_07_multigpu.py::test_ddp_training",
                "check": "ddp scaling efficiency (8 ranks, nccl)",
            }
        )
        == "multigpu"
    )
    assert (
        check_area(
            {"test": "multinode", "check": "multi-node slowest link (16 ranks on 2 nodes, nccl)"}
        )
        == "multigpu"
    )
    assert (
        check_area(
            {"test": "checks/test_06_sustained.py::test_sustained_load", "check": "sustained load"}
        )
        == "sustained"
    )
    assert check_area({"test": "", "check": "clock events under load"}) == "sustained"
    assert (
        check_area({"test": "checks/test_07_nvlink.py::test_x", "check": "nvlink GB/s"}) == "other"
    )
    report = gpu_report([(gpu(0, host=1), 700.0, 3000.0)])
    uuid = gpu(0, host=1)["uuid"]
    report[uuid]["checks"] += [
        {
            "check": "clock events under load",
            "gpu": uuid,
            "measured": "HW_SLOWDOWN",
            "threshold": "none",
            "verdict": "fail",
            "seconds": 0.0,
            "reason": "throttled",
            "value": None,
            "test": "checks/test_06_sustained.py::test_sustained_load",
        },
        {
            "check": "nvlink GB/s",
            "gpu": uuid,
            "measured": "400",
            "threshold": "-",
            "verdict": "not judged",
            "seconds": 1.0,
            "reason": "",
            "value": 400.0,
            "test": "checks/test_07_nvlink.py::test_nvlink",
        },
    ]
    status, reason = status_from_report(report, 1)
    fleet = analyse([HostOutcome("hot", status, reason, report=report)], PEAKS)
    verdicts = fleet.rows[0].area_verdicts()
    assert (
        verdicts["sustained"] == "FAIL 1"
        and verdicts["other"] == "not judged"
        and verdicts["speed"] == "pass"
    )


def test_neutral_verdicts_are_neither_pass_nor_fail():
    assert summarise_verdicts(["info"]) == "info"
    assert summarise_verdicts(["not judged", "no reference"]) == "not judged"
    assert summarise_verdicts(["pass", "warn", "not judged"]) == "pass, 1 warn"
    report = gpu_report(
        [(gpu(0, host=1), 700.0, 3000.0)],
        verdicts={"matmul bf16 TFLOPS": "not judged", "device memory GB/s": "not judged"},
    )
    assert report["summary"]["verdicts"]["not judged"] == 2
    assert status_from_report(report, 0) == (READY, "")


def test_live_view_counts_done_and_shows_the_hosts_still_running():
    from rich.console import Console

    state = {f"h{n:03d}": ("done", READY, 0.0, 5.0) for n in range(40)}
    state["h040"] = ("done", "unreachable", 0.0, 20.0)
    state.update({f"r{n}": ("running", "suite", float(n), None) for n in range(25)})
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(render_live(state, total=100, now=30.0, limit=20))
    text = console.export_text()
    assert "fleet validation: 41/100 done (1 unreachable, 40 ready)" in text
    assert "25 running, 34 waiting" in text
    assert "r0 " in text and "30s" in text  # the longest-running host first, with its time
    assert "h000" not in text  # finished ready hosts are not shown
    assert "... 5 more running" in text


def test_text_table_of_cpu_hosts_uses_the_real_suite_report():
    one = analyse([HostOutcome("ssh://root@127.0.0.1:2222", READY, report=cpu_report())], PEAKS)
    line = render_table(one, verbose=True).splitlines()[-1]
    assert line.split()[:3] == ["ssh://root@127.0.0.1:2222", "0", "ready"]
    assert (
        line.split()[-1] == "-"
    )  # one host: no peak, no baseline, and a median of one is no reference
    slower = cpu_report()
    for check in slower["host"]["checks"]:
        if check["value"] is not None:
            check["value"] *= 0.5
    two = analyse(
        [HostOutcome("a", READY, report=cpu_report()), HostOutcome("b", READY, report=slower)],
        PEAKS,
    )
    lines = render_table(two, verbose=True).splitlines()
    assert "(67% of fleet median) OUTLIER" in next(
        line for line in lines if line.startswith("b  ") and "degraded" in line
    )
    assert "(133% of fleet median)" in next(line for line in lines if line.startswith("a  "))


def test_json_is_keyed_by_host_then_gpu_uuid():
    outs = rack()
    fleet = analyse(outs, PEAKS)
    data = json.loads(render_json(fleet), parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert data == json.loads(json.dumps(build_json(fleet)))
    assert data["format"] == "gpuenv-fleet-report/1" and data["ready"] is False
    assert list(data["hosts"]) == [o.host for o in outs]
    assert data["not_ready"] == ["ssh://ops@gpu4", "ssh://ops@gpu5", "ssh://ops@gpu2"]
    assert data["counts"] == {
        "ready": 2,
        "not ready": 1,
        "degraded": 1,
        "unreachable": 1,
        "malformed": 0,
    }
    slow_uuid = gpu(1, host=2)["uuid"]
    entry = data["hosts"]["ssh://ops@gpu2"]["gpus"][slow_uuid]
    assert data["hosts"]["ssh://ops@gpu2"]["status"] == "degraded"
    assert entry["gpu"]["index"] == 1 and entry["model"] == "NVIDIA H100 80GB HBM3"
    assert entry["figures"]["matmul bf16 TFLOPS"]["outlier"] is True
    assert entry["figures"]["matmul bf16 TFLOPS"]["fraction_of_median"] == pytest.approx(
        400 / 700, abs=1e-4
    )
    assert any(c["check"] == "matmul bf16 TFLOPS" for c in entry["checks"])
    assert (
        data["hosts"]["ssh://ops@gpu5"]["status"] == "unreachable"
        and data["hosts"]["ssh://ops@gpu5"]["gpus"] == {}
    )


def test_json_maps_non_finite_numbers_from_backends_to_null():
    outs = rack()
    outs[4].details = {"connect_seconds": float("inf"), "ratio": float("nan")}
    data = json.loads(
        render_json(analyse(outs, PEAKS)), parse_constant=lambda name: pytest.fail(f"bare {name}")
    )
    assert data["hosts"]["ssh://ops@gpu5"]["details"] == {"connect_seconds": None, "ratio": None}


def test_junit_has_one_testsuite_per_host():
    root = ET.fromstring(render_junit(analyse(rack(), PEAKS)))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [f"ssh://ops@gpu{i}" for i in range(1, 6)]
    gpu2 = suites[1]
    outlier = gpu2.find("testcase[@classname='ssh://ops@gpu2.fleet']/failure")
    assert gpu2.get("failures") == "1" and "400.0 is 57% of the fleet median 700.0" in outlier.get(
        "message"
    )
    gpu4 = suites[3]
    assert gpu4.get("failures") == "1" and gpu4.find("testcase/failure") is not None
    gpu5 = suites[4]
    assert gpu5.get("errors") == "1" and "unreachable" in gpu5.find("testcase/error").get("message")
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites)
    assert root.get("failures") == "2" and root.get("errors") == "1"


def test_junit_writes_each_check_as_escaping_field_by_field_would():
    """A passing check is written in one quick step when nothing in it needs escaping; whatever
    does (XML's special characters, a control character, text past MAX_TEXT) must come out as
    safe_text and XML escaping of the whole field give it, and the XML must read back."""
    report = gpu_report([(gpu(i, host=1), 700.0, 3000.0) for i in range(3)])
    tricky = [
        ("plain check", "ok", "-"),
        ("threshold with <", "0.5 GiB", "<= 25%"),
        ("measured with &", "1 & 2", ">= 60% of peak"),
        ('name with "quotes" & <tags>', "ok", "-"),
        ("control in measured", "\x1b[31mred", "-"),
        ("control in threshold", "ok", "\x1b[31m>= 1"),
        ("long measured", "x" * (MAX_TEXT - 5), ">= 1"),
        ("empty threshold", "ok", ""),
    ]
    passing = [
        (uuid, c)
        for uuid, section in report.items()
        if uuid.startswith("GPU-")
        for c in section["checks"]
        if c["verdict"] == "pass"
    ]
    assert len(passing) >= len(tricky)
    for (name, measured, threshold), (_, check) in zip(tricky, passing):
        check.update(check=name, measured=measured, threshold=threshold)
    outcome = HostOutcome("gpu1", READY, "", report=report, seconds=1.0, exit_code=0)
    text = render_junit(analyse([outcome], PEAKS))
    cases = {c.get("name"): c for c in ET.fromstring(text).iter("testcase")}
    for (name, measured, threshold), (uuid, _) in zip(tricky, passing):
        label = safe_text(f"{name} [{uuid}]", newlines=True)
        out = safe_text(f"{measured} | {threshold} | pass", newlines=True)
        assert f"name={quoteattr(label)} " in text, name
        assert f"<system-out>{xml_escape(out)}</system-out>" in text, name
        assert cases[label].find("system-out").text == out, name


def test_html_puts_summary_and_worst_hosts_first_and_is_self_contained():
    page = render_html(analyse(rack(), PEAKS), generated="2026-01-01 00:00 UTC")
    assert page.startswith("<!DOCTYPE html>")
    order = [
        'id="fleet-summary"',
        'id="fleet-counts"',
        'id="fleet-models"',
        'id="fleet-not-ready"',
        'id="fleet-distributions"',
        'id="fleet-heatmap"',
        'id="fleet-not-ready-details"',
        'id="fleet-ready"',
    ]
    assert [page.index(marker) for marker in order] == sorted(
        page.index(marker) for marker in order
    )
    worst = re.findall(r'<tr class="bad" data-status="([^"]+)"><td>\d+</td><td>([^<]+)</td>', page)
    assert worst == [
        ("not ready", "ssh://ops@gpu4"),
        ("unreachable", "ssh://ops@gpu5"),
        ("degraded", "ssh://ops@gpu2"),
    ]
    assert 'data-hosts="5" data-ready="2" data-not-ready="3" data-outliers="1"' in page
    assert (
        page.count("<svg") == 3
    )  # distributions of both models, the H100 heatmap (one A100 GPU has no median)
    assert (
        "1 outlier(s) below 90% of the fleet median: ssh://ops@gpu2 GPU 1 matmul bf16 TFLOPS "
        "400.0 (57%)" in page
    )
    ready = page[page.index('id="fleet-ready"') :]
    assert "<details><summary>2 ready host(s)" in ready and ready.count('<tr class="ready">') == 2
    # no network assets: nothing fetched from http(s), no scripts, no external stylesheets or images
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert "http://www.w3.org" in page  # the SVG namespace, which is an identifier, not a fetch
    assert not [u for u in re.findall(r'(?:src|href)="(https?:[^"]+)"', page)]


def test_html_plot_size_does_not_grow_with_the_fleet():
    def fleet_of(hosts: int) -> list[HostOutcome]:
        outs = []
        for h in range(hosts):
            report = gpu_report(
                [
                    (gpu(i, host=h), 700.0 + (h * 7 + i) % 13, 3000.0 + (h * 3 + i) % 17)
                    for i in range(8)
                ]
            )
            outs.append(HostOutcome(f"n{h:04d}", READY, report=report))
        return outs

    small = analyse(fleet_of(60), PEAKS)  # past the heatmap's labelled worst hosts, sizes are fixed
    large = analyse(fleet_of(400), PEAKS)
    from gpuenv.fleet.report.plots import plot_distributions, plot_heatmap

    for plot in (plot_distributions, plot_heatmap):
        a, b = plot(small, "NVIDIA H100 80GB HBM3"), plot(large, "NVIDIA H100 80GB HBM3")
        size = re.compile(r'<svg[^>]* width="([\d.]+)pt" height="([\d.]+)pt"')
        assert size.search(a).groups() == size.search(b).groups()
        assert len(b) < 3 * len(a)


def test_html_grows_by_a_short_row_per_ready_host_and_opens_only_the_worst_hosts(monkeypatch):
    """At 100,000 GPUs the page must stay small and a browser must open it at once: a ready host
    adds one short row (its checks in one cell; was ten cells, ~300 bytes), and only the worst
    hosts that are not ready are laid out open (855 open hosts took Chromium 7 s)."""
    from gpuenv.fleet.report import htmlreport

    def fleet_of(ready: int, slow: int) -> list[HostOutcome]:
        outs = []
        for h in range(ready + slow):
            figures = [
                (gpu(i, host=h), (350.0 if h >= ready and i == 0 else 700.0) + (h + i) % 7, 3000.0)
                for i in range(8)
            ]
            outs.append(HostOutcome(f"n{h:05d}", READY, report=gpu_report(figures)))
        return outs[::-1]  # not in name order

    small, large = (
        render_html(analyse(fleet_of(100, 30), PEAKS)),
        render_html(analyse(fleet_of(300, 30), PEAKS)),
    )
    ready = large[large.index('id="fleet-ready"') :]
    assert ready.count('<tr class="ready">') == 300 and (len(large) - len(small)) / 200 < 160
    names = re.findall(r'<tr class="ready"><td>([^<]+)</td>', ready)
    assert names == sorted(names)  # by name, so that one host is found
    details = large[large.index('id="fleet-not-ready-details"') : large.index('id="fleet-ready"')]
    assert details.count('<details class="host" open>') == htmlreport.OPEN_DETAILS == 20
    assert details.count('<details class="host">') == 10
    assert (
        details.count("<td") < 30 * 30
    )  # three cells a GPU (was one per area: 80 a host), so the page is light to build
    assert (
        "<td>0 NVIDIA H100 80GB HBM3" in details
        and '<span class="outlier">matmul bf16 TFLOPS 3' in details
    )

    monkeypatch.setattr(htmlreport, "MAX_DETAILS", 25)
    capped = render_html(analyse(fleet_of(10, 30), PEAKS))
    assert capped.count('<details class="host"') == 25 and capped.count('<tr class="bad"') == 30
    assert (
        "5 more host(s) that are not ready: each is named with its reason in the table above"
        in capped
    )


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


@pytest.mark.parametrize("old, new", sorted(MOVED_TESTS.items()))
def test_a_moved_check_stays_in_its_column_in_old_and_new_reports(old, new):
    """A fleet mixes reports saved before a check moved (its old node id) with new ones: both land
    in the column the check had, never in "other" or a new one."""
    before = check_area({"test": f"checks/{old}[gpu0]", "check": "x"})
    assert before != "other"
    assert check_area({"test": f"checks/{new}[gpu0]", "check": "x"}) == before
    assert current_test(f"checks/{old}[gpu0]") == f"checks/{new}[gpu0]"
    assert load_suite_report("not json") is None
    assert status_from_report(load_suite_report('{"format": "other"}'), 0) == (
        "malformed",
        "malformed report: format 'other' is not gpuenv-validate-report/N",
    )
    assert load_suite_report(json.dumps(cpu_report()))["summary"]["ok"] is True


def test_plain_progress_lines_count_done_of_total_and_escape_node_text():
    from gpuenv.cli.fleet import HostProgress

    out = io.StringIO()
    with HostProgress(stream=out, total=3) as progress:  # not a terminal: plain lines, no live view
        progress("ssh://a", "running", "suite")
        progress("ssh://a", "done", "ready")
        progress("ssh://b", "done", "failed: \x1b[2Jboom")
    lines = out.getvalue().splitlines()
    assert [re.search(r"\d+/3\]", line).group(0) for line in lines] == ["0/3]", "1/3]", "2/3]"]
    assert "\x1b" not in out.getvalue() and "failed: \\x1b[2Jboom" in lines[-1]


def test_every_backend_status_has_a_place_in_the_worst_first_order():
    from gpuenv.fleet.outcome import STATUSES
    from gpuenv.fleet.report.analysis import STATUS_ORDER

    assert sorted(STATUS_ORDER) == sorted(STATUSES)


def test_the_fleet_is_computed_once_by_analyse():
    """Every part a renderer reads is there after analyse(): counts, GPU models, hosts not ready
    (worst first), ready hosts and outliers, each from the same rows."""
    fleet = analyse(rack(), PEAKS)
    assert fleet.models == {
        "NVIDIA H100 80GB HBM3": {"hosts": 3, "gpus": 5, "status": {READY: 2, DEGRADED: 1}},
        A100: {"hosts": 1, "gpus": 1, "status": {NOT_READY: 1}},
        "no GPU shown": {"hosts": 1, "gpus": 0, "status": {UNREACHABLE: 1}},
    }
    assert [o.host for o, _ in fleet.not_ready] == [
        "ssh://ops@gpu4",
        "ssh://ops@gpu5",
        "ssh://ops@gpu2",
    ]
    assert [o.host for o, _ in fleet.ready_hosts] == ["ssh://ops@gpu1", "ssh://ops@gpu3"]
    assert (
        [o.host for o, _ in fleet.hosts]
        == [o.host for o in fleet.outcomes]
        == [f"ssh://ops@gpu{i}" for i in range(1, 6)]
    )
    ((row, check, fig),) = fleet.outliers
    assert (row.host, row.index, check, fig.value) == (
        "ssh://ops@gpu2",
        1,
        "matmul bf16 TFLOPS",
        400.0,
    )
    assert (
        row in fleet.rows
        and next(rows for o, rows in fleet.hosts if o.host == "ssh://ops@gpu2")[1] is row
    )


def test_write_reports_writes_each_asked_format_and_nothing_else(tmp_path):
    from gpuenv.fleet.report import write_reports

    fleet = analyse(rack(), PEAKS)
    json_path, junit_path = tmp_path / "fleet.json", tmp_path / "fleet.xml"
    assert write_reports(fleet, json_path=str(json_path), junit_path=str(junit_path)) == [
        str(json_path),
        str(junit_path),
    ]
    assert json_path.read_text() == render_json(fleet) and junit_path.read_text() == render_junit(
        fleet
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fleet.json",
        "fleet.xml",
    ]  # no HTML, no temporary file left
    assert write_reports(fleet) == []
