"""Ready needs proof: a GPU run where no GPU computed, or whose rows and exit status disagree, is
not validated.

The GPUs here are the real ones of recorded captures (tests/validate/captures); the rows are the
suite's own records, as its checks write them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from validate.cli import parse_args, pytest_args, verdict
from validate.host.capture import load_capture
from validate.judge.evidence import NO_FRAMEWORK, missing_evidence
from validate.report.record import Record, build_json

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = Path(__file__).parent.parent / "captures"


def _capture_gpus() -> dict[str, str]:
    """UUID -> label of every GPU of a recorded 8-GPU H100 host, read through the suite's own NVML
    reader."""
    from validate.host import nvml
    from validate.host.replay import ReplayNvml

    host = nvml.read_host(
        ReplayNvml(load_capture(str(CAPTURES / "nvidia-smi-xml" / "h100x8-580.105.08.xml")))
    )
    assert len(host.gpus) == 8, host.error
    return {g.uuid: f"GPU {g.index} ({g.name})" for g in host.gpus}


def _health_rows(gpus: dict[str, str]) -> list[dict]:
    rows = [Record("driver version", None, "550.54.15", "", "info").to_dict()]
    rows += [Record("gpu health", uuid, "ok", "-", "pass").to_dict() for uuid in gpus]
    return rows


def _skipped_compute_rows(gpus: dict[str, str], why: str) -> list[dict]:
    return [
        Record("torch matmul correct", uuid, "-", "-", "skip", reason=why).to_dict()
        for uuid in gpus
    ]


def test_a_gpu_host_without_a_framework_is_not_validated_unless_health_only_is_asked():
    gpus = _capture_gpus()
    rows = _health_rows(gpus) + _skipped_compute_rows(gpus, "PyTorch is not installed here")
    why = missing_evidence(rows, gpus, frameworks=[], exit_status=0)
    assert why is not None and why.startswith(NO_FRAMEWORK)
    assert missing_evidence(rows, gpus, frameworks=[], exit_status=0, health_only=True) is None


def test_each_gpu_needs_its_own_passing_compute_row():
    gpus = dict(list(_capture_gpus().items())[:2])
    first, second = list(gpus)[:2]
    rows = _health_rows(gpus) + [
        Record("torch matmul correct", first, "1e-06", "<= 0.01", "pass").to_dict()
    ]
    rows += [
        Record(
            "torch matmul correct",
            second,
            "-",
            "-",
            "skip",
            reason="hidden by CUDA_VISIBLE_DEVICES",
        ).to_dict()
    ]
    why = missing_evidence(rows, gpus, frameworks=["torch"], exit_status=0)
    assert why is not None and gpus[second] in why and gpus[first] not in why
    rows[-1] = Record(
        "tensorflow matmul correct (/GPU:1)", second, "1e-06", "<= 0.01", "pass"
    ).to_dict()
    assert missing_evidence(rows, gpus, frameworks=["torch", "tensorflow"], exit_status=0) is None


@pytest.mark.parametrize("word", ["error", "failed", "FAIL ", "passed", "ok"])
def test_a_verdict_the_suite_never_writes_is_no_evidence(word):
    gpus = _capture_gpus()
    rows = _health_rows(gpus) + [
        Record("torch matmul correct", u, "1e-06", "<= 0.01", "pass").to_dict() for u in gpus
    ]
    rows.append(Record("sustained load", None, "-", "-", word).to_dict())
    why = missing_evidence(rows, gpus, frameworks=["torch"], exit_status=0)
    assert why is not None and repr(word) in why


def test_an_exit_status_that_disagrees_with_the_rows_is_named():
    gpus = _capture_gpus()
    proven = _health_rows(gpus) + [
        Record("torch matmul correct", u, "1e-06", "<= 0.01", "pass").to_dict() for u in gpus
    ]
    assert missing_evidence(proven, gpus, frameworks=["torch"], exit_status=0) is None
    assert "exited with 1 although no row failed" in missing_evidence(
        proven, gpus, frameworks=["torch"], exit_status=1
    )
    failing = proven + [Record("gpu health", None, "xid 79", "-", "fail").to_dict()]
    assert "exit status 0 disagrees with its rows: 1 failed" in missing_evidence(
        failing, gpus, frameworks=["torch"], exit_status=0
    )
    assert (
        missing_evidence([], gpus, frameworks=["torch"], exit_status=0)
        == "not validated: no check ran"
    )


def test_the_report_of_an_unproven_run_says_not_ok_and_why():
    gpus = _capture_gpus()
    records = [Record("gpu health", uuid, "ok", "-", "pass") for uuid in gpus]
    why = missing_evidence([r.to_dict() for r in records], gpus, frameworks=[], exit_status=0)
    data = build_json(records, {}, [{"uuid": u} for u in gpus], {}, 0, not_validated=why)
    assert data["summary"]["ok"] is False and data["summary"]["not_validated"].startswith(
        NO_FRAMEWORK
    )
    assert data["summary"]["pytest_exit_status"] == 0  # pytest's own status: the rows agree with it
    assert build_json(records, {}, [{"uuid": u} for u in gpus], {}, 0)["summary"]["ok"] is True


def test_the_last_line_and_exit_status_of_an_unproven_run():
    code, line = verdict(
        0, 12, f"{NO_FRAMEWORK} (neither PyTorch nor TensorFlow is installed, so no GPU computed)"
    )
    assert (
        code == 1
        and "NOT VALIDATED: no framework in this environment" in line
        and "--health-only" in line
    )
    assert verdict(0, 12) == (0, "validate: every check passed (or skipped with its reason)")


def test_health_only_is_asked_by_name_and_documented():
    args, extra = parse_args(["--health-only"])
    assert args.health_only and "--health-only" in pytest_args(args, extra)
    assert not parse_args([])[0].health_only and "--health-only" not in pytest_args(*parse_args([]))
    done = subprocess.run(
        [sys.executable, "-m", "validate", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        done.returncode == 0
        and "--health-only" in done.stdout
        and "'not validated'" in " ".join(done.stdout.split())
    )


def _suite_on_a_synthetic_gpu_host(
    tmp_path, *args: str
) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m validate` in a subprocess on the SYNTHETIC two-GPU host of
    synthetic_gpu_host.py."""
    import os

    report = tmp_path / "report.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent.parent)]),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "--json",
            str(report),
            "-p",
            "synthetic_gpu_host",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.is_file(), done.stdout[-3000:] + done.stderr[-2000:]
    return done, json.loads(report.read_text())


def test_a_gpu_run_where_no_gpu_computed_exits_1_not_validated_and_health_only_is_the_named_way_out(
    tmp_path,
):
    # Only the NVML health checks run (-k): every row passes, yet no GPU computed.
    done, report = _suite_on_a_synthetic_gpu_host(tmp_path, "-k", "gpu_health and not dcgm")
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 1, done.stdout[-3000:]
    assert last.startswith(
        "validate: NOT VALIDATED: no check proved that GPU 0 (NVIDIA H100 80GB HBM3), GPU 1"
    ), last
    assert "--health-only" in last
    assert not [r for r in report["host"]["checks"] if r["verdict"] == "fail"]
    assert report["summary"]["ok"] is False and report["summary"]["pytest_exit_status"] == 0
    assert report["summary"]["not_validated"].startswith("not validated: no check proved")

    done, report = _suite_on_a_synthetic_gpu_host(
        tmp_path, "--health-only", "-k", "gpu_health and not dcgm"
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert (
        done.stdout.strip().splitlines()[-1]
        == "validate: every check passed (or skipped with its reason)"
    )
    assert report["summary"]["ok"] is True and report["summary"]["health_only"] is True


def test_a_local_run_owes_proof_for_every_gpu_nvml_lists_not_only_those_with_rows(tmp_path):
    # Host-wide checks only (-k): the report holds no row of either GPU, yet NVML lists both, and
    # both are named as unproven (the same rule as the fleet's host.nvml.gpus cross-check).
    done, report = _suite_on_a_synthetic_gpu_host(
        tmp_path, "-k", "test_driver or test_device_order"
    )
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 1, done.stdout[-3000:]
    sections = {key: s for key, s in report.items() if isinstance(s, dict) and "gpu" in s}
    assert [g["uuid"] for g in report["host"]["nvml"]["gpus"]] == list(sections) and len(
        sections
    ) == 2
    assert all(s["checks"] == [] for s in sections.values())
    assert last.startswith(
        "validate: NOT VALIDATED: no check proved that GPU 0 (NVIDIA H100 80GB HBM3), GPU 1"
    ), last
