"""A node's report reads "ready" only with proof: its summary agrees with its rows, its exit status
with its verdicts, every verdict is a known word, each GPU it declares (its sections and
host.nvml.gpus) computed, and no row hides behind another key.

Reports are written by the suite's own writer (suitecases.gpu_report), then altered as a lying or
broken node would, and read back through `--from-reports` as the fleet reads them.
"""

from __future__ import annotations

import json

import pytest
from suitecases import gpu, gpu_report

from gpuenv.fleet.collected import read_report_folder
from gpuenv.fleet.outcome import MALFORMED, NOT_READY, READY, gpus_owing_proof, status_from_report
from gpuenv.fleet.suitereport import check_report


def _read(tmp_path, report, text: str | None = None):
    (tmp_path / "gpu01.json").write_text(text if text is not None else json.dumps(report))
    [outcome] = read_report_folder(tmp_path)
    return outcome


def _report():
    return gpu_report([(gpu(0, host=1), 700.0, 3000.0), (gpu(1, host=1), 705.0, 3010.0)])


def test_an_honest_report_reads_ready(tmp_path):
    outcome = _read(tmp_path, _report())
    assert (outcome.status, outcome.reason) == (READY, "")


def test_zero_checks_with_ok_true_is_not_ready(tmp_path):
    report = {
        "format": "gpuenv-validate-report/1",
        "host": {"nvml": {}, "checks": []},
        "summary": {"verdicts": {}, "pytest_exit_status": 0, "ok": True},
    }
    outcome = _read(tmp_path, report)
    assert outcome.status == NOT_READY and outcome.reason == "not validated: no check ran"


@pytest.mark.parametrize("status", [1, 2, 5])
def test_from_reports_honours_the_pytest_exit_status(tmp_path, status):
    report = _report()
    report["summary"]["pytest_exit_status"] = status
    outcome = _read(tmp_path, report)
    assert (
        outcome.status == NOT_READY
        and f"exited with {status} although no row failed" in outcome.reason
    )


def test_a_report_without_an_exit_status_is_not_ready(tmp_path):
    report = _report()
    del report["summary"]["pytest_exit_status"]
    outcome = _read(tmp_path, report)
    assert outcome.status == NOT_READY and "no pytest_exit_status" in outcome.reason


@pytest.mark.parametrize("word", ["error", "FAILED", "passed", "xfail"])
def test_a_verdict_word_the_suite_never_writes_is_not_ready(tmp_path, word):
    report = _report()
    uuid = gpu(1, host=1)["uuid"]
    report[uuid]["checks"][2]["verdict"] = word
    report["summary"]["verdicts"] = {"info": 1, "pass": 8, word.lower(): 1}
    outcome = _read(tmp_path, report)
    assert outcome.status == NOT_READY and repr(word.lower()) in outcome.reason


def test_a_summary_that_counts_other_rows_than_it_holds_is_not_ready(tmp_path):
    report = _report()
    report[gpu(0, host=1)["uuid"]]["checks"][3]["verdict"] = (
        "warn"  # the summary still counts it a pass
    )
    outcome = _read(tmp_path, report)
    assert outcome.status == NOT_READY and "its summary counts" in outcome.reason


def test_a_gpu_report_where_no_framework_computed_is_not_validated(tmp_path):
    report = _report()
    for key in (gpu(0, host=1)["uuid"], gpu(1, host=1)["uuid"]):
        report[key]["checks"] = [
            c for c in report[key]["checks"] if c["check"] == "device memory GB/s"
        ]
    report["host"]["frameworks"] = {}
    report["summary"]["verdicts"] = {"info": 1, "pass": 3}
    outcome = _read(tmp_path, report)
    assert outcome.status == NOT_READY and outcome.reason.startswith(
        "not validated: no framework in this environment"
    )


def test_the_nodes_own_not_validated_reason_is_kept(tmp_path):
    report = _report()
    report["summary"].update(
        ok=False, not_validated="not validated: no framework in this environment (x)"
    )
    assert status_from_report(report, None) == (
        NOT_READY,
        "not validated: no framework in this environment (x)",
    )


def test_a_second_section_under_the_same_key_cannot_hide_a_failing_gpu(tmp_path):
    failing = gpu_report([(gpu(0, host=1), 700.0, 3000.0)], failed=["matmul bf16 TFLOPS"])
    passing = gpu_report([(gpu(0, host=1), 700.0, 3000.0)])
    uuid = gpu(0, host=1)["uuid"]
    body = json.dumps(passing)
    # The failing section first, then the passing one under the same key: json.loads keeps the last.
    text = body.replace(f'"{uuid}": ', f'"{uuid}": {json.dumps(failing[uuid])}, "{uuid}": ', 1)
    outcome = _read(tmp_path, None, text)
    assert outcome.status == MALFORMED and "given twice" in outcome.reason


def test_two_gpu_keys_that_read_the_same_once_made_safe_are_malformed(tmp_path):
    report = gpu_report(
        [(gpu(0, host=1), 700.0, 3000.0), (gpu(1, host=1), 705.0, 3010.0)],
        failed=["matmul bf16 TFLOPS"],
    )
    first, second = gpu(0, host=1)["uuid"], gpu(1, host=1)["uuid"]
    raw = "GPU-a\x1b"  # shown as GPU-a\x1b once made safe: the same text as the literal key below
    report[raw] = report.pop(first)
    report["GPU-a\\x1b"] = report.pop(second)
    outcome = _read(tmp_path, report)
    assert outcome.status == MALFORMED and "given twice" in outcome.reason


def _without_sections(report, *uuids: str):
    """The report as a node that dropped these GPUs' sections would send it: its summary recounted
    from the rows it kept, so the missing sections are the only lie left."""
    for uuid in uuids:
        del report[uuid]
    counts: dict[str, int] = {}
    for row in report["host"]["checks"] + [
        c for s in report.values() if isinstance(s, dict) and "gpu" in s for c in s["checks"]
    ]:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    report["summary"]["verdicts"] = counts
    return report


@pytest.mark.parametrize("dropped", [(0, 1), (1,)], ids=["both-sections", "one-section"])
def test_every_gpu_the_report_declares_owes_its_proof_though_its_section_is_gone(tmp_path, dropped):
    report = _report()
    declared = report["host"]["nvml"]["gpus"]
    assert [g["uuid"] for g in declared] == [gpu(0, host=1)["uuid"], gpu(1, host=1)["uuid"]]
    _without_sections(report, *(declared[i]["uuid"] for i in dropped))
    outcome = _read(tmp_path, report)
    assert outcome.status == NOT_READY, outcome.reason
    assert outcome.reason.startswith("not validated: no check proved that ")
    for i, entry in enumerate(declared):
        assert (f"GPU {entry['index']} ({entry['name']})" in outcome.reason) == (i in dropped), (
            outcome.reason
        )


def test_declared_gpus_are_read_before_any_wide_field_can_crowd_them_out():
    report = _without_sections(_report(), gpu(1, host=1)["uuid"])
    # A field wide enough to use up the free-form budget, written before the GPU list.
    report["host"]["nvml"] = {
        "padding": {f"k{a}": list(range(400)) for a in range(40)},
        **report["host"]["nvml"],
    }
    checked = check_report(report)
    assert [g["uuid"] for g in checked["host"]["nvml"]["gpus"]] == [
        gpu(0, host=1)["uuid"],
        gpu(1, host=1)["uuid"],
    ]
    assert gpus_owing_proof(checked)[gpu(1, host=1)["uuid"]] == "GPU 1 (NVIDIA H100 80GB HBM3)"


@pytest.mark.parametrize(
    "gpus,why",
    [
        ("GPU-x", "host.nvml.gpus is a str, not a list"),
        ([{"index": 0, "name": "NVIDIA H100 80GB HBM3"}], "host.nvml.gpus entry 0 has no GPU UUID"),
    ],
)
def test_a_declared_gpu_list_that_cannot_be_read_is_malformed(tmp_path, gpus, why):
    report = _report()
    report["host"]["nvml"]["gpus"] = gpus
    outcome = _read(tmp_path, report)
    assert (outcome.status, outcome.reason) == (MALFORMED, f"malformed report: {why}")


def test_wide_declared_gpus_keep_their_identity_past_the_free_form_budget():
    report = _without_sections(_report(), gpu(1, host=1)["uuid"])
    report["host"]["nvml"]["gpus"][0]["padding"] = {
        f"k{a}": list(range(400)) for a in range(40)
    }  # uses up the budget
    declared = check_report(report)["host"]["nvml"]["gpus"]
    assert [(g["index"], g["uuid"], g["name"]) for g in declared] == [
        (i, gpu(i, host=1)["uuid"], gpu(i)["name"]) for i in (0, 1)
    ]
