"""A replayed capture read as what it is (pure): whole, cut short (fewer GPU sections than its
header's count of attached GPUs), or an excerpt that starts at a GPU section without the header.
A cut capture is not ready: the GPUs it lost are not judged, and one of them may be the broken
one. An excerpt is judged on what it holds, and says what it lacks."""

from __future__ import annotations

from typing import Any

from validate.judge.verdict import FAIL, PASS, SKIP, WARN, Verdict

THRESHOLD = "every attached GPU"


def capture_text(scope: dict[str, Any]) -> str:
    """The measured cell: '1 of 4 attached GPU sections', 'an excerpt: 1 GPU section'."""
    sections, attached = scope.get("gpu_sections"), scope.get("attached_gpus")
    if not scope.get("header"):
        return f"an excerpt: {sections} GPU section(s), no header"
    if attached is None:
        return f"{sections} GPU section(s), attached count not reported"
    return f"{sections} of {attached} attached GPU section(s)"


def capture_verdict(scope: dict[str, Any]) -> Verdict:
    sections, attached = int(scope.get("gpu_sections") or 0), scope.get("attached_gpus")
    if not scope.get("header"):
        absent = ", ".join(scope.get("absent") or []) or "the header block"
        return Verdict(
            WARN,
            THRESHOLD,
            (
                f"an excerpt that starts at a GPU section: {absent} are not in it, so the driver "
                "is not judged and GPUs outside the excerpt are not seen: judged on the GPU "
                "section(s) it holds; give the whole output (nvidia-smi -q > host.txt) to judge "
                "the host"
            ),
        )
    if attached is None:
        return Verdict(
            SKIP, THRESHOLD, "the capture's header has no count of attached GPUs: not reported"
        )
    if sections < attached:
        return Verdict(
            FAIL,
            THRESHOLD,
            (
                f"{attached - sections} of {attached} GPUs missing from the capture: its header "
                f"counts {attached} attached GPUs and {sections} GPU section(s) follow: it was "
                "cut short (or filtered with -i); capture the whole output again (nvidia-smi -q "
                "-x > host.xml)"
            ),
        )
    return Verdict(PASS, THRESHOLD)
