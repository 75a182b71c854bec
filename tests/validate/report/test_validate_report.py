"""Rendering records (table, JSON keyed by GPU UUID), baselines, and the command line mapping."""

from __future__ import annotations

import json

import pytest

from validate.cli import parse_args, pytest_args
from validate.report.baseline import BaselineError, baseline_value, load_baseline, save_baseline
from validate.report.record import Record, build_json, render_table, write_json

UUID0 = "GPU-2b6f3c1e-7f3a-1b6c-9e1d-0f8c2f5a1a01"
UUID1 = "GPU-7d1e9a44-03c2-5e8b-bb1f-61c0e2d9b302"
RECORDS = [
    Record("driver version", None, "550.54.15", "", "info", 0.01),
    Record(
        "matmul bf16 TFLOPS",
        UUID0,
        "265.3 TFLOPS (85% of peak)",
        ">= 0.35 x peak 312",
        "pass",
        1.2,
        value=265.3,
    ),
    Record(
        "matmul bf16 TFLOPS",
        UUID1,
        "80.1 TFLOPS (26% of peak)",
        ">= 0.35 x peak 312",
        "fail",
        1.3,
        "bf16_tflops 80.1 is below 109.2",
        80.1,
    ),
    Record(
        "nccl all reduce",
        None,
        "-",
        "-",
        "skip",
        0.0,
        "all-reduce needs 2 or more GPUs; NVML sees 1",
    ),
]
GPUS = [
    {"uuid": UUID0, "index": 0, "name": "NVIDIA A100-SXM4-80GB"},
    {"uuid": UUID1, "index": 1, "name": "NVIDIA A100-SXM4-80GB"},
]


def test_table_has_the_columns_and_the_reasons():
    table = render_table(RECORDS, {UUID0: 0, UUID1: 1})
    header = table.splitlines()[0].split()
    assert header == ["check", "GPU", "measured", "threshold", "verdict", "time"]
    assert "0 GPU-2b6f3c1e" in table and "1.20s" in table
    assert "fail: matmul bf16 TFLOPS [1 GPU-7d1e9a44]: bf16_tflops 80.1 is below 109.2" in table
    assert "skip: nccl all reduce [host]: all-reduce needs 2 or more GPUs; NVML sees 1" in table


def test_json_is_keyed_by_gpu_uuid_with_a_host_section():
    data = build_json(
        RECORDS,
        {"driver_version": "550.54.15"},
        GPUS,
        {"torch": {"version": "2.5.1"}},
        exit_status=1,
    )
    assert set(data) == {"format", "host", UUID0, UUID1, "summary"}
    assert [c["check"] for c in data["host"]["checks"]] == ["driver version", "nccl all reduce"]
    assert data[UUID1]["checks"][0]["verdict"] == "fail"
    assert data[UUID0]["gpu"]["name"] == "NVIDIA A100-SXM4-80GB"
    assert data["summary"]["failed"] == 1 and data["summary"]["ok"] is False


def test_write_json_is_atomic_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "out" / "report.json"
    write_json(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in target.parent.iterdir()] == ["report.json"]


def test_baseline_round_trip(tmp_path):
    path = tmp_path / "baseline.json"
    save_baseline(path, RECORDS, {g["uuid"]: g["name"] for g in GPUS})
    models = load_baseline(path)
    # Both GPUs are the same model: the first one's figure is the model's baseline.
    assert baseline_value(models, "NVIDIA A100-SXM4-80GB", "matmul bf16 TFLOPS") == 265.3
    assert baseline_value(models, "NVIDIA H100 PCIe", "matmul bf16 TFLOPS") is None
    assert baseline_value(None, "NVIDIA A100-SXM4-80GB", "matmul bf16 TFLOPS") is None


def test_bad_baseline_files_say_why(tmp_path):
    with pytest.raises(BaselineError, match="does not exist"):
        load_baseline(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text('{"format": "something-else"}')
    with pytest.raises(BaselineError, match="is not a gpuenv-validate-baseline/1 file"):
        load_baseline(tmp_path / "other.json")


def test_cli_options_become_pytest_options():
    args, extra = parse_args(
        [
            "--expect-gpus",
            "2",
            "--json",
            "r.json",
            "--junit",
            "r.xml",
            "--quick",
            "--baseline",
            "b.json",
            "-k",
            "masking",
        ]
    )
    out = pytest_args(args, extra)
    assert out[0].endswith("validate")
    for expected in (
        ["--expect-gpus=2"],
        ["--json=r.json"],
        ["--quick"],
        ["--baseline=b.json"],
        ["-k", "masking"],
    ):
        start = out.index(expected[0])
        assert out[start : start + len(expected)] == expected
    assert "--junitxml=r.xml" in out


def test_not_judged_figures_are_named_under_the_table():
    from validate.report.record import Record, not_judged_note

    records = [
        Record(
            "matmul bf16 TFLOPS",
            "GPU-b200",
            "2100.0 TFLOPS",
            "no measured reference, no --baseline",
            "not judged",
            value=2100.0,
        ),
        Record(
            "matmul bf16 TFLOPS",
            "GPU-h100",
            "790.0 TFLOPS",
            ">= 0.75 x measured reference 797.5",
            "pass",
            value=790.0,
        ),
        Record(
            "cnn training samples/s (cpu)",
            None,
            "900 samples/s",
            "no measured reference, no --baseline",
            "no reference",
            value=900.0,
        ),
    ]
    note = not_judged_note(
        records, {"GPU-b200": "NVIDIA B200", "GPU-h100": "NVIDIA H100 80GB HBM3"}
    )
    assert note.startswith(
        "validate: 2 figure(s) measured but not judged (no measured reference for NVIDIA B200, "
        "this host's CPU)"
    )
    assert not_judged_note(records[1:2], {}) is None
