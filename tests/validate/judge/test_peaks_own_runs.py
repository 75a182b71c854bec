"""gpu_peaks.yaml's own measurements (source `gpuenv:PATH`) are held to the run they cite: the file
is in the repository and holds that figure, as the suite measured it, on a GPU of that model."""

from __future__ import annotations

import json
from pathlib import Path

from validate.judge import peaks

ROOT = Path(__file__).resolve().parents[3]
#: The report row that holds each metric's figure (validate/checks/test_05_speed.py's names).
ROWS = {
    "fp32_tflops": "matmul fp32 TFLOPS",
    "tf32_tflops": "matmul tf32 TFLOPS",
    "bf16_tflops": "matmul bf16 TFLOPS",
    "fp16_tflops": "matmul fp16 TFLOPS",
    "memory_bandwidth_gbs": "device memory GB/s",
}


def test_every_own_measurement_is_the_figure_its_run_reported():
    own = [
        (gpu, m)
        for gpu in peaks.load_peaks()
        for m in gpu.measured
        if m.source.startswith(peaks.OWN_SOURCE)
    ]
    assert own, "the H200 run of tests/validate/captures/live/ is cited"
    for gpu, m in own:
        path = ROOT / m.source.removeprefix(peaks.OWN_SOURCE)
        report = json.loads(path.read_text(encoding="utf-8"))
        sections = [v for k, v in report.items() if k.startswith("GPU-")]
        figures = [
            row["value"]
            for s in sections
            for row in s["checks"]
            if row["check"] == ROWS[m.metric] and row.get("value")
        ]
        identities = [
            row["measured"]
            for s in sections
            for row in s["checks"]
            if row["check"] == "gpu identity"
        ]
        assert identities, path
        assert figures and any(abs(f - m.value) <= 0.01 * m.value for f in figures), (m, figures)
        assert all(any(name in text for name in gpu.nvml_names) for text in identities), (
            gpu.model,
            identities,
        )
