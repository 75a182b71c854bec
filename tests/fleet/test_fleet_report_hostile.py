"""A node's report is untrusted input: each hostile report in fixtures/hostile/ (plus a few made
here because they are big or special files) sits in a folder beside two good hosts, is read through
the --from-reports path, and every format is rendered. The bad node must come out "malformed
report: <why>" and the good ones unharmed in the table, JSON, JUnit and HTML; the readable-*
reports must be read, with their text made safe for the terminal, XML and JSON."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from suitecases import FIXTURES, gpu, gpu_report

from gpuenv.fleet.collected import read_report_folder
from gpuenv.fleet.outcome import MALFORMED, READY, HostOutcome, status_from_report
from gpuenv.fleet.report.analysis import analyse
from gpuenv.fleet.report.htmlreport import render_html
from gpuenv.fleet.report.jsonreport import render_json
from gpuenv.fleet.report.junitreport import render_junit
from gpuenv.fleet.report.terminal import render_table
from gpuenv.fleet.suitereport import MAX_REPORT_BYTES, load_suite_report, safe_text
from validate.judge.peaks import load_peaks

HOSTILE = FIXTURES / "hostile"
ROOT = Path(__file__).resolve().parents[2]
PEAKS = load_peaks()
GOOD = ("good-a", "good-b")

#: fixture (or made case) -> what "malformed report: ..." must say
MALFORMED_CASES = {
    "gpu-index-x.json": "index 'x' is not a GPU index",
    "host-is-a-string.json": "'host' is a str, not an object",
    "checks-are-strings.json": "host check 0 is a str, not an object",
    "gpu-checks-a-string.json": "'checks' is a str, not a list",
    "seconds-fast.json": "'seconds' is 'fast', not a number",
    "check-without-name.json": "has no name ('check')",
    "value-10-pow-400.json": "a 401-digit number",
    "value-nan.json": "NaN is not a JSON number",
    "value-infinity.json": "Infinity is not a JSON number",
    "not-json.json": "not JSON",
    "not-utf8.json": "not UTF-8 text (byte 0xff",
    "top-level-list.json": "the report is a JSON list, not an object",
    "wrong-format.json": "format 'someone-elses-report/1' is not gpuenv-validate-report/N",
    "made:deep.json": "JSON nested more than 64 levels deep",
    "made:oversize.json": f"over the {MAX_REPORT_BYTES // 2**20} MiB limit",
    "made:dev-zero.json": "not a regular file",
    "made:fifo.json": "not a regular file",
}


def _place(case: str, folder: Path, host: str = "bad") -> str:
    """Put the hostile report of `case` in `folder` as `host`; returns that host's name."""
    target = folder / f"{host}.json"
    if not case.startswith("made:"):
        shutil.copy(HOSTILE / case, target)
    elif case == "made:deep.json":
        target.write_text("[" * 100_000 + "]" * 100_000)
    elif case == "made:oversize.json":
        with open(target, "wb") as handle:  # sparse: costs no disk
            handle.truncate(MAX_REPORT_BYTES + 1)
    elif case == "made:dev-zero.json":
        target.symlink_to("/dev/zero")
    elif case == "made:fifo.json":
        os.mkfifo(target)  # a reader that blocked on it would hang the test: it must not
    return host


def _good(folder: Path) -> None:
    for n, host in enumerate(GOOD):
        report = gpu_report(
            [(gpu(0, host=n + 1), 700.0 + n, 3000.0), (gpu(1, host=n + 1), 701.0, 3002.0)]
        )
        (folder / f"{host}.json").write_text(json.dumps(report))


def _folder(tmp_path: Path, case: str) -> Path:
    folder = tmp_path / "reports"
    folder.mkdir()
    _good(folder)
    _place(case, folder)
    return folder


def _strict_json(text: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"bare {name} in fleet.json")

    return json.loads(text, parse_constant=refuse)


def _render_all(outcomes: list[HostOutcome]) -> tuple[str, dict, ET.Element, str]:
    fleet = analyse(outcomes, PEAKS)
    return (
        render_table(fleet, verbose=True),
        _strict_json(render_json(fleet)),
        ET.fromstring(render_junit(fleet)),
        render_html(fleet),
    )


def _assert_good_hosts_survive(table: str, data: dict, junit: ET.Element, page: str) -> None:
    for host in GOOD:
        assert data["hosts"][host]["status"] == READY and len(data["hosts"][host]["gpus"]) == 2
        assert re.search(rf"^{host}\s+2\s+ready\s", table, re.M), table
        suite = junit.find(f"testsuite[@name='{host}']")
        assert suite is not None and suite.get("failures") == "0" and int(suite.get("tests")) > 5
        assert f"<td>{host}</td><td>2</td>" in page


@pytest.fixture(scope="module")
def hostile_rack(tmp_path_factory):
    """Every malformed case as its own host ("bad-<n>") beside the good hosts, read and rendered
    once in every format (rendering is the slow part; each case is then checked on its own)."""
    folder = tmp_path_factory.mktemp("hostile") / "reports"
    folder.mkdir()
    _good(folder)
    hosts = {
        case: _place(case, folder, f"bad-{n:02d}") for n, case in enumerate(sorted(MALFORMED_CASES))
    }
    outcomes = read_report_folder(folder)
    return hosts, outcomes, _render_all(outcomes)


def test_good_hosts_survive_every_malformed_neighbour(hostile_rack):
    hosts, outcomes, rendered = hostile_rack
    assert sorted(o.host for o in outcomes) == sorted([*hosts.values(), *GOOD])
    _assert_good_hosts_survive(*rendered)


@pytest.mark.parametrize("case", sorted(MALFORMED_CASES))
def test_a_malformed_report_sinks_only_its_node(hostile_rack, case):
    hosts, outcomes, (table, data, junit, page) = hostile_rack
    host = hosts[case]
    why = MALFORMED_CASES[case]
    outcome = next(o for o in outcomes if o.host == host)
    assert outcome.status == MALFORMED and outcome.reason.startswith("malformed report: "), (
        outcome.reason
    )
    assert why in outcome.reason
    assert data["hosts"][host]["status"] == MALFORMED and why in data["hosts"][host]["reason"]
    assert host in data["not_ready"]
    line = next(line for line in table.splitlines() if line.startswith(f"malformed: {host}: "))
    assert line.startswith(f"malformed: {host}: malformed report: ") and why in line
    error = junit.find(f"testsuite[@name='{host}']/testcase/error")
    assert error is not None and why in error.get("message")
    row = re.search(
        rf'<tr class="bad" data-status="malformed"><td>\d+</td><td>{host}</td>.*?</tr>', page
    )
    assert row and "malformed report: " in row.group(0)


def test_one_malformed_report_alone_beside_good_ones(tmp_path):
    outcomes = read_report_folder(_folder(tmp_path, "gpu-index-x.json"))
    assert [o.status for o in outcomes] == [MALFORMED, READY, READY]
    _assert_good_hosts_survive(*_render_all(outcomes))


def test_a_readable_report_with_tex_in_the_gpu_name_is_plotted_as_written(tmp_path):
    outcomes = read_report_folder(_folder(tmp_path, "readable-tex-gpu-name.json"))
    assert outcomes[0].status == READY
    table, data, junit, page = _render_all(outcomes)
    _assert_good_hosts_survive(table, data, junit, page)
    name = "NVIDIA $\\frac{a}{b}$ H100 $unbalanced"
    assert data["hosts"]["bad"]["gpus"][gpu(0, host=66)["uuid"]]["model"] == name
    assert html_text(name) in page  # in the model table and the plot titles, not typeset
    assert page.count("<svg") >= 3  # both models' distributions and at least one heatmap were drawn
    svg_text = [t for t in re.findall(r"<text[^>]*>([^<]*)</text>", page) if "frac" in t]
    assert svg_text and all(
        html_text(name) in t for t in svg_text
    )  # drawn as written, not typeset by mathtext


def html_text(text: str) -> str:
    import html

    return html.escape(text)


def test_escape_sequences_from_a_node_never_reach_the_terminal_or_the_xml(tmp_path):
    outcomes = read_report_folder(_folder(tmp_path, "readable-escape-sequences.json"))
    table, data, junit, page = _render_all(outcomes)
    _assert_good_hosts_survive(table, data, junit, page)
    raw = render_table(analyse(outcomes, PEAKS), verbose=True)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", raw), (
        "a control character reached the terminal"
    )
    assert "\\x1b[1;1H\\x1b[Jcleared" in raw  # shown, escaped, so the operator sees what was sent
    assert data["hosts"]["bad"]["status"] == "not ready"
    assert (
        data["hosts"]["bad"]["host"]["checks"][0]["measured"]
        == "550\\x1b[31m red \\x00\\x0b\\x1f\\x7f\\x9b"
    )
    failure = junit.find("testsuite[@name='bad']/testcase/failure")
    assert failure is not None and "\\x1b[1;1H" in failure.get("message")  # fleet.xml parsed above
    assert "\x1b" not in page and "\x00" not in page


def test_a_later_report_format_with_unknown_keys_is_read(tmp_path):
    outcomes = read_report_folder(_folder(tmp_path, "readable-future-format.json"))
    assert outcomes[0].status == READY, outcomes[0].reason
    table, data, junit, page = _render_all(outcomes)
    _assert_good_hosts_survive(table, data, junit, page)
    assert len(data["hosts"]["bad"]["gpus"]) == 2
    row = re.search(r"^bad\s+2\s+ready\s.*$", table, re.M).group(0)
    assert "pass, 1 warn" in row  # warn and not judged are neither pass nor fail


def test_gpu_indexes_far_apart_keep_the_heatmap_small(tmp_path):
    report = gpu_report([(gpu(0, host=7), 700.0, 3000.0), (gpu(4000, host=7), 400.0, 3000.0)])
    other = gpu_report([(gpu(0, host=8), 702.0, 3001.0), (gpu(1, host=8), 701.0, 2999.0)])
    fleet = analyse(
        [HostOutcome("far", READY, report=report), HostOutcome("near", READY, report=other)], PEAKS
    )
    page = render_html(fleet)
    assert fleet.outcomes[0].status == "degraded" and len(page) < 400_000
    assert gpu_report([(gpu(5000, host=9), 1.0, 1.0)]) and status_from_report(
        gpu_report([(gpu(5000, host=9), 1.0, 1.0)]), 0
    ) == (
        MALFORMED,
        f"malformed report: GPU {gpu(5000, host=9)['uuid']}: index 5000 is not a GPU index",
    )


def test_backends_reports_are_checked_too():
    """sshhosts and slurm hand reports to status_from_report and analyse: the same checks apply."""
    hostile = (HOSTILE / "checks-are-strings.json").read_text()
    assert status_from_report(load_suite_report(hostile), 0) == (
        MALFORMED,
        "malformed report: host check 0 is a str, not an object",
    )
    deep = load_suite_report("[" * 100_000 + "]" * 100_000)
    assert deep is None or status_from_report(deep, 0)[0] == MALFORMED
    big = load_suite_report(
        '{"format": "gpuenv-validate-report/1", "host": {"checks": [{"value": ' + "9" * 400 + "}]}}"
    )
    assert status_from_report(big, 0) == (
        MALFORMED,
        "malformed report: a 400-digit number; at most 30 digits are read",
    )
    good = gpu_report([(gpu(0, host=1), 700.0, 3000.0)])
    raw = [
        HostOutcome("raw", READY, report=json.loads((HOSTILE / "seconds-fast.json").read_text())),
        HostOutcome("good", READY, report=good),
    ]
    fleet = analyse(raw, PEAKS)
    assert [o.status for o in fleet.outcomes] == [MALFORMED, READY]
    assert (
        "malformed report: " in fleet.outcomes[0].reason
        and "'seconds' is 'fast'" in fleet.outcomes[0].reason
    )


def test_safe_text_escapes_controls_and_keeps_the_rest():
    assert safe_text("a\x1b[2Jb\tc\nd") == "a\\x1b[2Jb\\x09c\\x0ad"
    assert safe_text("a\nb", newlines=True) == "a\nb"
    assert safe_text("NVIDIA H100 — ü") == "NVIDIA H100 — ü"
    assert safe_text("\ud800x") == "\\ud800x"
    assert (
        safe_text("evil\u202egnp.exe") == "evil\\u202egnp.exe"
    )  # a bidi override would make the line lie


def test_validate_from_reports_writes_every_format(tmp_path):
    """The task end to end: a folder with a malformed node renders every format; exit 1 (not
    ready)."""
    folder = _folder(tmp_path, "host-is-a-string.json")
    out = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "validate",
            "--from-reports",
            str(folder),
            "--report",
            str(out / "fleet.html"),
            "--json",
            str(out / "fleet.json"),
            "--junit",
            str(out / "fleet.xml"),
            "--outlier-floor",
            "0.8",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stdout.splitlines()[2].startswith(
        "2 of 3 host(s) ready"
    )  # after "read 3 host report(s)" and a blank line
    assert "malformed: bad: malformed report: 'host' is a str, not an object" in run.stdout
    assert "2 ready host(s) not listed (--verbose lists them" in run.stdout
    data = _strict_json((out / "fleet.json").read_text())
    assert data["outlier_fraction"] == 0.8 and data["counts"]["malformed"] == 1
    ET.parse(out / "fleet.xml")
    assert (out / "fleet.html").read_text().startswith("<!DOCTYPE html>")


def test_from_reports_refuses_a_folder_without_reports(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "invoke", "validate", "--from-reports", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (
        run.returncode == 2
        and run.stderr.count("\n") == 1
        and "holds no *.json report" in run.stderr
    )
    assert "Traceback" not in run.stderr


def test_edge_values_are_refused_or_read_without_harm():
    report = gpu_report([(gpu(0, host=3), 700.0, 3000.0)])
    report[gpu(0, host=3)["uuid"]]["checks"][2]["value"] = (
        1e300  # finite, but would overflow a median
    )
    assert status_from_report(report, 0)[1].endswith("'value' 1e+300 is out of range")
    assert status_from_report({"format": "gpuenv-validate-report/1"}, 0) == (
        MALFORMED,
        "malformed report: no 'host' section",
    )
    from gpuenv.fleet.suitereport import parse_report

    bom = b"\xef\xbb\xbf" + json.dumps(gpu_report([(gpu(0, host=3), 700.0, 3000.0)])).encode()
    assert parse_report(bom)["summary"]["ok"] is True  # a byte-order mark is not a reason to refuse


def test_a_plot_that_cannot_be_drawn_is_said_on_the_page(monkeypatch):
    from gpuenv.fleet.report import plots

    def broken(fleet, model):
        raise ValueError("bins must increase")

    monkeypatch.setattr(plots, "plot_heatmap", broken)
    good = [
        HostOutcome(h, READY, report=gpu_report([(gpu(0, host=n), 700.0 + n, 3000.0)]))
        for n, h in enumerate(GOOD)
    ]
    page = render_html(analyse(good, PEAKS))
    assert (
        "broken of NVIDIA H100 80GB HBM3 could not be drawn: ValueError: bins must increase" in page
    )
    assert 'id="fleet-ready"' in page


def test_a_slurm_run_folder_and_loose_files_are_read_by_host_name(tmp_path):
    """HOST.json at the top, NODE/report.json below (a Slurm run folder's nodes/NODE/report.json);
    a host name given twice keeps both, by path."""
    folder = tmp_path / "collected"
    (folder / "nodes" / "gpu07").mkdir(parents=True)
    (folder / "nodes" / "gpu01").mkdir(parents=True)
    (folder / "nodes" / "scripts.txt").write_text("not a report\n")
    report = json.dumps(gpu_report([(gpu(0, host=1), 700.0, 3000.0)]))
    (folder / "nodes" / "gpu07" / "report.json").write_text(report)
    (folder / "nodes" / "gpu01" / "report.json").write_text(report)
    (folder / "gpu01.json").write_text(report)
    (folder / "login1.json").write_text(report)
    hosts = [o.host for o in read_report_folder(folder)]
    assert hosts == ["gpu01.json", "gpu07", "login1", "nodes/gpu01/report.json"]


def test_a_report_with_many_models_and_figures_keeps_the_page_bounded(monkeypatch):
    """One report with 12 GPUs of 12 made-up models, each with 30 made-up figures: the page plots
    at most MAX_MODELS models x MAX_FIGURES figures (made small here, to keep the test fast) and
    says what it left out."""
    from gpuenv.fleet.report import htmlreport, plots

    monkeypatch.setattr(htmlreport, "MAX_MODELS", 2)
    monkeypatch.setattr(plots, "MAX_FIGURES", 3)

    def host_report(host: int) -> dict:
        infos = [gpu(i, f"Made-up GPU {i:02d}", host=host) for i in range(12)]
        report = gpu_report([(info, 100.0, 1000.0) for info in infos])
        for info in infos:
            extra = [
                {
                    "check": f"figure {k}",
                    "gpu": info["uuid"],
                    "measured": "1",
                    "threshold": "-",
                    "verdict": "info",
                    "seconds": 0.0,
                    "reason": "",
                    "value": float(k + 1),
                    "test": "checks/test_09_new.py::test_new",
                }
                for k in range(30)
            ]
            report[info["uuid"]]["checks"] += extra
            report["summary"]["verdicts"]["info"] += len(extra)
        return report

    # Two hosts of the same models (a copy of one report would be a "duplicate report", set aside).
    report, twin = host_report(5), host_report(6)
    fleet = analyse(
        [HostOutcome("many", READY, report=report), HostOutcome("twin", READY, report=twin)], PEAKS
    )
    assert len(plots._model_figures(fleet, "Made-up GPU 00")) == 3
    page = render_html(fleet)
    assert page.count('<figure id="dist-') == 2 and page.count('<figure id="heat-') == 2
    assert (
        "2 of 12 GPU model(s) plotted; not plotted: 10 beyond the 2 with the most hosts: "
        "Made-up GPU 02" in page
    )
