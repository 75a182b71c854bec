"""Time to refuse captures and recordings whose element counts no host can have
(docs/decisions.md, issue 29).

    .venv/bin/python benchmarks/hostile_counts.py

The review measured 99 s before a 16 MB capture of 1.5 million <gpu> was refused, and 61 s and
1.25 GB for a 14 MB capture with 3.5 million children of one section, which then passed. The
bounds (validate/host/bounds.py: tags counted in C before parsing, children per section and GPUs
counted while parsing, JSON values counted before decoding) should refuse each in well under a
second. Prints each case, its size, the seconds to refusal and the first words of the reason.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validate.host.capture import CaptureError, load_capture  # noqa: E402

A100 = (
    ROOT / "tests" / "validate" / "captures" / "nvidia-smi-xml" / "a100-sxm4-40gb-570.148.08.xml"
).read_text(encoding="utf-8")
RECORDING = {
    "format": "gpuenv-nvml-recording/1",
    "source": "bench",
    "system": {"nvmlDeviceGetCount": 1},
}

CASES = {
    "1.5M <gpu>.xml": A100.replace(
        "</nvidia_smi_log>", "<gpu></gpu>" * 1_500_000 + "</nvidia_smi_log>"
    ),
    "3.5M clock children.xml": A100.replace(
        "<clocks_event_reasons>", "<clocks_event_reasons>" + "<a/>" * 3_500_000, 1
    ),
    "65 <gpu>.xml": A100.replace("</nvidia_smi_log>", "<gpu></gpu>" * 65 + "</nvidia_smi_log>"),
    "3.5M values.json": json.dumps({**RECORDING, "devices": [{"junk": [0] * 3_500_000}]}),
}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        for name, text in CASES.items():
            path = Path(folder) / name
            path.write_text(text, encoding="utf-8")
            started = time.perf_counter()
            try:
                load_capture(path)
                outcome = "ACCEPTED"
            except CaptureError as err:
                outcome = str(err).split(": ", 1)[1][:70]
            print(
                f"{name:26} {path.stat().st_size / 2**20:5.1f} MiB  "
                f"{time.perf_counter() - started:5.2f} s  {outcome}"
            )


if __name__ == "__main__":
    main()
