"""Issue 34, item 6: no Python `None` in any printed line or report cell. Every real capture in
tests/validate/captures/, every SYNTHETIC variant made of them (tests/validate/host_variants.py,
vgpu_variants.py and pci_variants.py: older schemas, vGPU guests whose PCIe and power read N/A,
excerpts, driver 418) and the live runs' NVML recordings are
replayed once with --verbose and --json (in this process: suiteruns.validate_in_process); the
screen (header and full table), the one-screen summary rendered from the same rows, and every JSON
cell are searched for the word None."""

from __future__ import annotations

import json
import re
from pathlib import Path

import host_variants as v
import pci_variants as pci
import pytest
import vgpu_variants as g
from host_variants import RECORDS, VARIANTS
from suiteruns import validate_in_process
from vgpu_variants import CASES

from validate.report.record import Record
from validate.report.summary import render_summary

NONE = re.compile(r"None(?![a-z])")  # "genNone" too: no word boundary before it
INPUTS = {p.name: (lambda p=p: p.read_text(encoding="utf-8")) for p in RECORDS}
INPUTS.update({f"variant-{name}": make for name, make in VARIANTS.items()})
INPUTS.update({f"issue34-{name}": make for name, make in CASES.items()})
# Drivers before "Device Max" existed print no GPU-side PCIe maximum ("GPU max genNone" once).
INPUTS["variant-no-device-max.xml"] = lambda: v.without(v.A100_XML, "max_device_link_gen")
# The live runs' NVML recordings (tests/validate/captures/live/*/recording.json).
INPUTS.update(
    {
        f"live-{p.parent.name}.json": (lambda p=p: p.read_text(encoding="utf-8"))
        for p in sorted((v.CAPTURES / "live").glob("*/recording.json"))
    }
)
# Identity by PCI id (pci_variants.py): driver 418's "Graphics Device", a vGPU profile without id.
INPUTS["pci-gtx1660-418.txt"] = pci.text_driver418_gtx1660
INPUTS["pci-grid-p4-no-id.xml"] = lambda: pci.xml_gpu("GRID P4-1Q", None)
# A vGPU guest with no PCIe link and power readings (nvidia-smi prints N/A for them in a guest).
INPUTS["issue34-guest-no-pcie.txt"] = lambda: re.sub(
    r"(Device Max|Device Current|Host Max|Max|Current)( +): (\d+x?|Gen\d)\n",
    r"\1\2: N/A\n",
    g.vgpu_guest_text("Licensed (Expiry: 2024-10-19 6:51:17 GMT)"),
)


def _replay(name: str, text: str, tmp: Path) -> tuple[str, str, dict]:
    """`python -m validate --replay FILE --verbose --json OUT`, run in this process (the screen
    and the report are the subject here, not the process: suiteruns.validate_in_process)."""
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    out = tmp / f"{name}.json"
    status, stdout, stderr = validate_in_process(
        ["--replay", str(path), "--verbose", "--json", str(out)],
        unset=("GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"),
    )
    assert status in (0, 1), (name, stdout[-2000:], stderr[-2000:])
    return name, stdout, json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> dict[str, tuple[str, dict]]:
    tmp = tmp_path_factory.mktemp("none")
    done = [_replay(name, make(), tmp) for name, make in INPUTS.items()]
    return {name: (screen, report) for name, screen, report in done}


def _cells(report: dict) -> list[tuple[str, str]]:
    out = []
    for key, section in report.items():
        if isinstance(section, dict):
            for row in section.get("checks", []):
                out += [
                    (f"{key}/{row['check']}/{field}", str(row.get(field) or ""))
                    for field in ("measured", "threshold", "reason")
                ]
    return out


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_no_none_on_screen_or_in_a_cell(name, replayed):
    screen, report = replayed[name]
    report_part = screen[screen.index("gpuenv validation report") :]
    printed = [line for line in report_part.splitlines() if NONE.search(line)]
    assert not printed, printed
    cells = [(where, text) for where, text in _cells(report) if NONE.search(text)]
    assert not cells, cells
    records = [
        Record(
            r["check"],
            r.get("gpu"),
            r.get("measured", ""),
            r.get("threshold", ""),
            r["verdict"],
            0.0,
            r.get("reason", ""),
        )
        for s in report.values()
        if isinstance(s, dict)
        for r in s.get("checks", [])
    ]
    index = {k: n for n, k in enumerate(k for k in report if k.startswith("GPU-"))}
    summary = [
        line
        for line in render_summary(records, index, replayed=True).splitlines()
        if NONE.search(line)
    ]
    assert not summary, summary
