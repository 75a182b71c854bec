"""The live run on a real H200 (tests/validate/captures/live/h200-580.159.04/README.md), replayed:
the host's `nvidia-smi -q -x` and `-q` captures and the suite's own recording of the run, each
through `python -m validate --replay` as an operator runs it, judge every row they can read as the
live run judged it, and the host ready, as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = Path(__file__).parent / "captures"
LIVE = CAPTURES / "live" / "h200-580.159.04"
#: The second run (another H200, after this session's merges: NVML v2 memory, PCI ids, vGPU
#: readers).
LIVE_B = CAPTURES / "live" / "h200-580.159.04-b"
#: The third run (another H200, after the style round: ruff format, thin tasks, --replay=PATH).
LIVE_C = CAPTURES / "live" / "h200-580.159.04-c"
SOURCES = {
    "xml": (LIVE, CAPTURES / "nvidia-smi-xml" / "h200-580.159.04-gpuenv-live.xml"),
    "text": (
        LIVE,
        CAPTURES / "nvidia-smi-text" / "linux-x86_64__nvidia-h200__580.159.04__gpuenv-live.txt",
    ),
    "recording": (LIVE, LIVE / "recording.json"),
    "xml-b": (LIVE_B, LIVE_B / "nvidia-smi-q-x.xml"),
    "recording-b": (LIVE_B, LIVE_B / "recording.json"),
    "xml-c": (LIVE_C, LIVE_C / "nvidia-smi-q-x.xml"),
    "recording-c": (LIVE_C, LIVE_C / "recording.json"),
}
#: Rows nvidia-smi does not print, so a capture's replay says "not reported" where live NVML
#: answered: the infoROM checksum check (nvmlDeviceValidateInforom) has no line in -q or -q -x.
NOT_IN_CAPTURES = {"inforom"}
#: Rows whose measured text is a reading of that moment (the replay reads the capture's moment).
MOMENT = {"temperature", "pcie replays"}


def _rows(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every row by (check, "host" or "gpu": the host has one GPU); a recording's replay names a
    kept row 'recorded: CHECK'."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    sections = [
        ("host", report["host"]),
        *(("gpu", value) for key, value in report.items() if key.startswith("GPU-")),
    ]
    for scope, section in sections:
        for row in section["checks"]:
            key = (row["check"].removeprefix("recorded: "), scope)
            if key not in rows or rows[key]["verdict"] == "skip":
                rows[key] = row
    return rows


def _replay(source: Path, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        env.pop(name, None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "--replay",
            str(source),
            "--json",
            str(tmp_path / "r.json"),
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out.returncode, json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_the_replay_judges_every_row_it_can_read_as_the_live_run(kind, tmp_path):
    run, source = SOURCES[kind]
    live_report = json.loads((run / "live-full.json").read_text(encoding="utf-8"))
    status, report = _replay(source, tmp_path)
    assert live_report["summary"]["ok"] is True and status == 0, report[
        "summary"
    ]  # ready live, ready replayed
    live, replayed = _rows(live_report), _rows(report)
    compared = 0
    for key, row in replayed.items():
        was = live.get(key)
        if was is None or was["verdict"] == "skip":
            continue
        if row["verdict"] == "skip":
            # a replay may only lack what the capture does not hold, or what runs a framework
            assert not kind.startswith("recording") or "runs PyTorch" in row["reason"], (key, row)
            assert (
                kind.startswith("recording")
                or key[0] in NOT_IN_CAPTURES
                or "runs PyTorch" in row["reason"]
            ), (key, row)
            continue
        assert row["verdict"] == was["verdict"], (key, was, row)
        if key[0] not in MOMENT and kind.startswith("recording"):
            assert row["measured"] == was["measured"], (key, was["measured"], row["measured"])
        compared += 1
    assert compared >= (60 if kind.startswith("recording") else 14), (
        compared
    )  # the comparison covers the host, not a corner
    # the live GPU ran nothing (its process rows passed): the replay sees no work on it either,
    # whichever NVML memory answer it has (a capture: v2, the reserve apart; the recording: v1)
    assert live[("other compute processes", "gpu")]["verdict"] == "pass"
    assert replayed[("gpu in use", "gpu")]["verdict"] == "pass", replayed[("gpu in use", "gpu")]


@pytest.mark.parametrize("run", [LIVE, LIVE_B, LIVE_C], ids=lambda p: p.name)
def test_the_live_quick_run_agrees_with_the_full_one(run):
    full = _rows(json.loads((run / "live-full.json").read_text(encoding="utf-8")))
    quick = _rows(json.loads((run / "live-quick.json").read_text(encoding="utf-8")))
    both = [
        key
        for key in quick
        if key in full and "skip" not in (quick[key]["verdict"], full[key]["verdict"])
    ]
    assert len(both) >= 30
    assert [key for key in both if quick[key]["verdict"] != full[key]["verdict"]] == []


def test_a_recording_made_before_a_check_moved_still_holds_its_row(tmp_path):
    """The recordings name the NCCL all-reduce by the node id it had when they ran
    (checks/test_05_speed.py::...); it now runs in test_07_multigpu.py. The stored files stay as
    they ran: the replay maps the old id (validate/report/record.py, MOVED_TESTS), so the check
    still says where its recorded result is, and the result is shown."""
    recording = LIVE_C / "recording.json"
    held = json.loads(recording.read_text(encoding="utf-8"))["records"]
    assert [r["test"] for r in held if "nccl" in r["check"]] == [
        "checks/test_05_speed.py::test_nccl_all_reduce"
    ]
    _, report = _replay(recording, tmp_path, "-k", "nccl_all_reduce or recorded_measurements")
    rows = {row["check"]: row for row in report["host"]["checks"]}
    assert rows["recorded: nccl all reduce"]["reason"] == (
        "all-reduce needs 2 or more GPUs; PyTorch sees 1"
    ), rows
    assert rows["nccl all reduce"]["test"] == "checks/test_07_multigpu.py::test_nccl_all_reduce"
    assert "under 'recorded measurements'" in rows["nccl all reduce"]["reason"], rows
