"""Print the table of measured references in docs/suite.md ("What the suite checks and how it
judges") from validate/judge/gpu_peaks.yaml, then the table of metrics with no public figure and
why, to paste there when a reference changes; tests/validate/judge/test_validate_floors.py fails
while docs/suite.md and the data disagree.

    python scripts/reference_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from validate.judge.peaks import load_peaks  # noqa: E402
from validate.judge.speed import REFERENCE_FRACTION, UNCONFIRMED_FAIL_FRACTION  # noqa: E402

LABELS = {
    "fp32_tflops": "fp32 TFLOPS",
    "tf32_tflops": "tf32 TFLOPS",
    "bf16_tflops": "bf16 TFLOPS",
    "fp16_tflops": "fp16 TFLOPS",
    "memory_bandwidth_gbs": "memory GB/s",
}


def _link(source: str) -> str:
    if "zzc0721" in source:
        return f"[zzc0721 #{source.rstrip('/').split('/')[-1]}]({source})"
    if "NVIDIA/DCGM" in source:
        return f"[DCGM]({source})"
    return source


def _kind(m) -> str:
    """How an unconfirmed figure was taken: another tool, a best-of-sizes table, or another n."""
    if m.method != "torch.matmul":
        return m.method
    return "best of n=1024..10240" if m.n is None else f"torch.matmul at n={m.n}"


def rows() -> list[str]:
    out = ["| model | metric | measured reference | floor | source |", "|---|---|---|---|---|"]
    for entry in load_peaks():
        for metric, label in LABELS.items():
            ref = entry.reference_for(metric)
            if ref is None:
                continue
            units = (
                f", lowest of {len(ref.measurements)} units" if len(ref.measurements) > 1 else ""
            )
            if ref.confirmed:
                how = "torch.matmul, n=8192" + units
                floor = f"{REFERENCE_FRACTION * ref.value:.4g}"
            else:
                kinds = sorted({_kind(m) for m in ref.measurements})
                how = "unconfirmed: " + "; ".join(kinds) + units
                floor = (
                    f"{REFERENCE_FRACTION * ref.value:.4g} (warns; fails below "
                    f"{UNCONFIRMED_FAIL_FRACTION * ref.value:.4g})"
                )
            sources = ", ".join(dict.fromkeys(_link(m.source) for m in ref.measurements))
            out.append(f"| {entry.model} | {label} | {ref.value:g} ({how}) | {floor} | {sources} |")
    return out


def unjudged_rows() -> list[str]:
    """The metrics the data says have no public figure, and why (`no_reference`): not judged."""
    out = ["| model | metric | not judged: why |", "|---|---|---|"]
    for entry in load_peaks():
        for metric, why in entry.no_reference:
            out.append(f"| {entry.model} | {LABELS[metric]} | {why} |")
    return out


if __name__ == "__main__":
    print("\n".join(rows()))
    print()
    print("\n".join(unjudged_rows()))
