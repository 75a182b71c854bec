"""The `invoke validate` task: argument mapping (pure) and the --local path run for real."""

from __future__ import annotations

import importlib.util
import json

import pytest
from invoke import Context
from invoke.exceptions import Exit

from gpuenv.cli.validation import ReportPaths, suite_arguments, validate
from gpuenv.errors import BadInput
from validate.host import nvml

MISSING = [m for m in ("torch", "tensorflow") if importlib.util.find_spec(m) is None]
HOST = nvml.read_host()


def test_suite_arguments():
    assert suite_arguments(expect_gpus=None, json=None, quick=False) == []
    assert suite_arguments(
        expect_gpus="2",
        json="r.json",
        junit="r.xml",
        quick=True,
        save_baseline="b.json",
        baseline=None,
    ) == [
        "--expect-gpus",
        "2",
        "--json",
        "r.json",
        "--junit",
        "r.xml",
        "--save-baseline",
        "b.json",
        "--quick",
    ]


@pytest.mark.parametrize("bad", ["two", "-1"])
def test_bad_gpu_count_is_bad_input(bad):
    with pytest.raises(BadInput, match="--expect-gpus"):
        suite_arguments(expect_gpus=bad)


def test_report_paths_anywhere_are_mounted_and_shown_as_given(tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    reports = ReportPaths(work)
    assert reports(str(work / "out" / "r.json")) == "/workspace/out/r.json"
    assert reports(str(elsewhere / "v.json")) == "/gpuenv-reports/0/v.json"
    assert reports(str(elsewhere / "v.xml")) == "/gpuenv-reports/0/v.xml", "one mount per folder"
    assert reports.mounts == {elsewhere.resolve(): "/gpuenv-reports/0"}
    assert reports.shown["/gpuenv-reports/0/v.json"] == str(elsewhere / "v.json")
    with pytest.raises(BadInput, match="does not exist: create it first"):
        reports(str(tmp_path / "missing" / "r.json"))
    assert not (tmp_path / "missing").exists()


def test_local_with_a_stack_option_is_refused_with_exit_2():
    with pytest.raises(Exit) as err:
        validate(Context(), local=True, cuda="12.1")
    assert err.value.code == 2
    assert "--local runs on this host's Python" in str(err.value.message)


@pytest.mark.frameworks
@pytest.mark.skipif(
    bool(MISSING), reason=f"needs PyTorch and TensorFlow; not importable here: {', '.join(MISSING)}"
)
@pytest.mark.skipif(
    bool(HOST.gpus),
    reason=f"NVML sees {len(HOST.gpus)} GPU(s): the no-GPU outcome cannot be checked here",
)
def test_local_run_without_gpu_passes_and_expecting_one_fails(tmp_path, monkeypatch):
    report = tmp_path / "r.json"
    assert validate(Context(), local=True, quick=True, expect_gpus="0", json=str(report)) is None
    assert json.loads(report.read_text())["summary"]["ok"] is True
    # The failing run needs only the check that counts the GPUs: the whole --quick suite passed
    # through the task above, and a run expected to fail cannot tell another check's defect (it
    # fails either way). pytest reads PYTEST_ADDOPTS in the suite's process, as a user's -k.
    monkeypatch.setenv("PYTEST_ADDOPTS", "-k nvml_gpu_count")
    with pytest.raises(Exit) as err:
        validate(Context(), local=True, quick=True, expect_gpus="1", json=str(report))
    assert err.value.code == 1
    data = json.loads(report.read_text())
    assert data["summary"]["ok"] is False
    assert [c["check"] for c in data["host"]["checks"] if c["verdict"] == "fail"] == [
        "NVML GPU count"
    ], data["host"]["checks"]  # the expected GPU is what failed
