"""Suite reports for the fleet tests, written by the suite's own writer
(validate.report.record.build_json) so their shape is always the suite's. The figures are inputs
chosen for each case, not results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuenv.fleet.outcome import UNREACHABLE, HostOutcome, status_from_report
from validate.judge.peaks import load_peaks
from validate.report.record import Record, build_json

FIXTURES = Path(__file__).parent / "fixtures"
H100 = "NVIDIA H100 80GB HBM3"  # an NVML name in validate/judge/gpu_peaks.yaml
A100 = "NVIDIA A100-SXM4-80GB"


def cpu_report() -> dict[str, Any]:
    """A real `python -m validate --json --quick --expect-gpus 0` report of a CPU-only host."""
    return json.loads((FIXTURES / "cpu-suite-report.json").read_text())


def gpu(index: int, name: str = H100, host: int = 0) -> dict[str, Any]:
    return {
        "index": index,
        "name": name,
        "uuid": f"GPU-{host:04x}{index:04x}-0000-4000-8000-{host:06x}{index:06x}",
        "pci_bus_id": f"00000000:{index + 0x18:02X}:00.0",
        "compute_capability": "9.0",
        "memory_total_bytes": 85899345920,
        "memory_used_bytes": 0,
    }


def gpu_report(
    gpus: list[tuple[dict[str, Any], float, float]],
    failed: list[str] = (),
    verdicts: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A GPU host's report: per GPU (info, bf16 TFLOPS, memory GB/s); checks named in `failed` fail,
    checks named in `verdicts` get that verdict (before the summary is counted, as the suite
    does)."""
    records = [
        Record(
            "driver version",
            None,
            "550.54.15",
            "",
            "info",
            0.0,
            test="checks/test_01_environment.py::test_driver",
        ),
        Record(
            "cuda visible devices [torch]",
            None,
            "ok",
            "-",
            "pass",
            1.0,
            test="checks/test_04_masking.py::test_cuda_visible_devices[torch]",
        ),
    ]
    for info, bf16, bandwidth in gpus:
        uuid = info["uuid"]
        records += [
            Record(
                "torch matmul correct",
                uuid,
                "1.0e-06",
                "relative error <= 0.01",
                "pass",
                0.1,
                test="checks/test_02_visibility.py::test_torch_computes_on_gpu",
            ),
            Record(
                "tensorflow memory growth [growth-env]",
                uuid,
                "0.5 GiB",
                "<= 25%",
                "pass",
                2.0,
                test="checks/test_03_memory.py::test_tensorflow_memory_growth",
            ),
            Record(
                "matmul bf16 TFLOPS",
                uuid,
                f"{bf16:.1f} TFLOPS",
                ">= 35% of peak",
                "pass",
                1.0,
                value=bf16,
                test="checks/test_05_speed.py::test_matmul_throughput",
            ),
            Record(
                "device memory GB/s",
                uuid,
                f"{bandwidth:.1f} GB/s",
                ">= 60% of peak",
                "pass",
                1.0,
                value=bandwidth,
                test="checks/test_05_speed.py::test_memory_bandwidth",
            ),
        ]
    for record in records:
        record.verdict = (verdicts or {}).get(record.check, record.verdict)
        if record.check in failed:
            record.verdict, record.reason = "fail", f"{record.check} below threshold"
    host = {
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "gpus": [g for g, _, _ in gpus],
        "error": None,
    }
    fails = sum(r.verdict == "fail" for r in records)
    return build_json(
        records, host, [g for g, _, _ in gpus], {"torch": {"version": "2.3.1"}}, 1 if fails else 0
    )


#: The suite's peak table, as the fleet report reads it.
PEAKS = load_peaks()


def rack() -> list[HostOutcome]:
    """Three H100 hosts (one slow GPU), one A100 host with a failed check, one unreachable host."""
    a = gpu_report([(gpu(0, host=1), 700.0, 3000.0), (gpu(1, host=1), 690.0, 2950.0)])
    b = gpu_report(
        [(gpu(0, host=2), 710.0, 3010.0), (gpu(1, host=2), 400.0, 2980.0)]
    )  # GPU 1: bf16 far below
    c = gpu_report([(gpu(0, host=3), 705.0, 2990.0)])
    d = gpu_report(
        [(gpu(0, A100, host=4), 250.0, 1800.0)], failed=["tensorflow memory growth [growth-env]"]
    )
    outs = []
    for name, report in (
        ("ssh://ops@gpu1", a),
        ("ssh://ops@gpu2", b),
        ("ssh://ops@gpu3", c),
        ("ssh://ops@gpu4", d),
    ):
        status, reason = status_from_report(report, report["summary"]["pytest_exit_status"])
        outs.append(
            HostOutcome(
                name,
                status,
                reason,
                report=report,
                seconds=12.5,
                exit_code=report["summary"]["pytest_exit_status"],
            )
        )
    outs.append(
        HostOutcome(
            "ssh://ops@gpu5",
            UNREACHABLE,
            "cannot reach gpu5 over SSH (NoValidConnectionsError: refused)",
        )
    )
    return outs
