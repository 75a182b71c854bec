"""The replay a person reads in one screen: verdict and failing rows first, rows collapsed across
GPUs, a table within 120 columns, one line for the skipped framework checks; --verbose and the
JSON keep every row. End to end on a SYNTHETIC variant of the real 8x H100 capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import host_variants as v
import pytest

from validate.report.record import Record
from validate.report.summary import WIDTH, collapse, render_summary

ROOT = Path(__file__).resolve().parents[3]
UUIDS = [f"GPU-0000000{i}-0000-0000-0000-00000000000{i}" for i in range(8)]
INDEX = {u: i for i, u in enumerate(UUIDS)}


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "validate", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def power_brake(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("summary")
    capture = tmp / "h100-power-brake.xml"
    capture.write_text(v.power_brake_at_idle(), encoding="utf-8")
    short = _run("--replay", str(capture), "--json", str(tmp / "r.json"))
    full = _run("--replay", str(capture), "--verbose")
    return {
        "short": short.stdout,
        "full": full.stdout,
        "json": json.loads((tmp / "r.json").read_text(encoding="utf-8")),
        "status": short.returncode,
    }


def _report(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "gpuenv validation report" in line)
    return lines[start + 1 :]


def test_the_summary_fits_120_columns_and_one_screen(power_brake):
    report = _report(power_brake["short"])
    assert power_brake["status"] != 0
    assert max(len(line) for line in report) <= WIDTH, max(report, key=len)
    assert len(report) <= 60, len(report)


def test_verdict_and_failing_rows_come_before_the_table(power_brake):
    report = _report(power_brake["short"])
    verdict = next(
        i
        for i, line in enumerate(report)
        if line.startswith("result (replayed): FAILING ROWS BELOW: 8 fail")
    )
    failing = next(
        i for i, line in enumerate(report) if line.startswith("FAIL clock events at idle [GPU 0-7]")
    )
    header = next(i for i, line in enumerate(report) if line.startswith("check "))
    assert verdict < failing < header
    assert "power brake" in "\n".join(report[failing:header]) and "BMC" in "\n".join(
        report[failing:header]
    )


def test_skipped_framework_checks_are_one_line_and_repeated_reasons_collapse(power_brake):
    report = _report(power_brake["short"])
    framework = [
        line for line in report if line.startswith("skipped") and "framework check(s)" in line
    ]
    assert len(framework) == 1
    assert sum("replayed host" in line and "PyTorch/TensorFlow" in line for line in report) == 1
    assert not any(
        str(ROOT) in line or "/tmp" in line
        for line in report
        if line.startswith(("skipped", "    "))
    )


def test_verbose_and_json_keep_every_row(power_brake):
    rows = [
        c
        for key, section in power_brake["json"].items()
        if isinstance(section, dict) and "checks" in section
        for c in section["checks"]
    ]
    clock_rows = [c for c in rows if c["check"] == "clock events at idle"]
    assert len(clock_rows) == 8 and all(c["verdict"] == "fail" for c in clock_rows)
    full = _report(power_brake["full"])
    assert sum(line.startswith("clock events at idle") for line in full) == 8
    assert all(u[:12] in power_brake["full"] for u in UUIDS)


def _record(
    check: str, gpu: int | None, measured: str, verdict: str = "pass", reason: str = ""
) -> Record:
    return Record(check, None if gpu is None else UUIDS[gpu], measured, "t", verdict, 0.0, reason)


def test_rows_that_differ_on_one_gpu_stay_apart():
    records = [_record("memory", i, "79.6 GiB total") for i in range(8)]
    records[5] = _record("memory", 5, "40.0 GiB total")
    groups = collapse(records, INDEX)
    assert [(gpus, r.measured) for gpus, r in groups] == [
        ([0, 1, 2, 3, 4, 6, 7], "79.6 GiB total"),
        ([5], "40.0 GiB total"),
    ]
    text = render_summary(records, INDEX)
    assert "0-4,6,7" in text and "\nmemory" in text


def test_identity_rows_collapse_without_their_bus_ids():
    records = [
        _record(
            "gpu identity",
            i,
            f"NVIDIA H100 80GB HBM3 (Hopper, cc 9.0) 00000000:{0x18 + i:02X}:00.0",
            "info",
        )
        for i in range(8)
    ]
    (group,) = collapse(records, INDEX)
    assert group[0] == list(range(8))
    assert "NVIDIA H100 80GB HBM3 (Hopper, cc 9.0)" in render_summary(records, INDEX)


def test_a_failure_on_one_gpu_keeps_its_own_reason():
    records = [_record("row remapping", i, "pending no") for i in range(8)]
    records[3] = _record(
        "row remapping",
        3,
        "pending yes",
        "fail",
        "GPU 3 has a row remap pending: drain it, then reset the GPU (nvidia-smi -r -i 3)",
    )
    text = render_summary(records, INDEX)
    assert "FAIL row remapping [GPU 3]: pending yes" in text and "nvidia-smi -r -i 3" in text
    assert text.splitlines()[0] == "result: FAILING ROWS BELOW: 1 fail, 0 warn, 7 pass, 0 skip"


def test_a_replayed_source_with_parentheses_of_its_own_is_dropped_whole():
    """A text capture's name carries parentheses ("h100.txt (idle :: query (-q))"): the skip line
    read "replayed host)): it runs ..." when the source was cut at its first ')'."""
    source = "/tmp/h100.txt (idle :: query (-q))"
    records = [
        Record(check, None, "", "", "skip", 0.0, f"replayed host ({source}): {why}")
        for check, why in (
            ("torch build", "it runs PyTorch/TensorFlow on the host itself"),
            ("shared memory", "it checks this machine, not the recorded host"),
        )
    ]
    text = render_summary(records, {}, replayed=True)
    assert "replayed host: it runs PyTorch/TensorFlow" in text, text
    assert "replayed host: it checks this machine" in text, text
    assert ")):" not in text and "/tmp" not in text and "(-q)" not in text, text
