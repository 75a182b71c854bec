"""Every replay a person reads fits 120 columns, and an 8-GPU host's fits one screen: each real
record in tests/validate/captures/ (copies of the project's shared records, with their provenance)
and the SYNTHETIC fault variants tests/validate/host_variants.py makes of them, replayed end to end
through `python -m validate --replay`, as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from host_variants import RECORDS, VARIANTS

from validate.report.summary import WIDTH

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = Path(__file__).parent.parent / "captures"
#: A terminal's screen: the report below its header line must fit in it for an 8-GPU host.
SCREEN_LINES = 60


def _report(path: Path, tmp_path: Path) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        env.pop(name, None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "--replay",
            str(path),
            "--json",
            str(tmp_path / "r.json"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "gpuenv validation report" in line)
    return out.returncode, lines[start + 1 :]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, tuple[Path, int, list[str]]]:
    """Every record and every variant replayed, each a `python -m validate` of its own, two at a
    time (each is a pytest run of its own): name -> (path, exit status, the report's lines)."""
    tmp = tmp_path_factory.mktemp("every-record")
    paths = {path.name: path for path in RECORDS}
    for name, make in VARIANTS.items():
        paths[name] = tmp / name
        paths[name].write_text(make(), encoding="utf-8")

    def replay(item: tuple[int, str]) -> tuple[str, tuple[Path, int, list[str]]]:
        number, name = item
        out = tmp / str(number)  # a short folder: the report prints the JSON file's path
        out.mkdir()
        return name, (paths[name], *_report(paths[name], out))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(replay, enumerate(paths)))


def _gpus(path: Path) -> int:
    text = path.read_text(encoding="utf-8")
    return (
        text.count("<gpu id=")
        if path.suffix == ".xml"
        else sum(line.startswith("GPU 0000") for line in text.splitlines())
    )


def _check(path: Path, status: int, report: list[str]) -> None:
    assert status in (0, 1), (status, report)
    widest = max(report, key=len)
    assert len(widest) <= WIDTH, f"{len(widest)} columns: {widest}"
    if _gpus(path) >= 8:
        assert len(report) <= SCREEN_LINES, f"{len(report)} lines"


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_every_record_replays_within_120_columns(path, reports):
    _check(*reports[path.name])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_fault_variant_replays_within_120_columns(name, reports):
    _check(*reports[name])


def test_the_lost_gpu_line_is_wrapped_not_cut(reports):
    """The mock's lost GPU: its error (bus id, UUID, the fix) was one 220-column line; wrapped,
    every word of it is still printed."""
    _, _, report = reports["MOCK-gb200-gpu-lost.xml"]
    start = next(i for i, line in enumerate(report) if line.startswith("NVML cannot read GPU 1"))
    joined = " ".join(line.strip() for line in report[start : start + 3])
    assert "NVMLError_GpuIsLost" in joined and "check dmesg for Xid errors" in joined


def test_the_eight_gpu_records_are_among_those_replayed():
    """The one-screen rule above must bite: at least the 8x H100 and 8x B200 captures have 8
    GPUs."""
    assert {p.name for p in RECORDS if _gpus(p) >= 8} >= {
        "h100x8-580.105.08.xml",
        "b200x8-580.105.08.xml",
    }


def test_a_long_cell_wraps_in_the_summary_and_in_verbose_and_loses_no_word():
    """A legacy GPU's identity (its last driver branch and CUDA line) is longer than any column:
    both tables print all of it, on more lines, within their widths."""
    from validate.report.record import Record, render_table
    from validate.report.summary import COLUMNS, render_summary

    uuid = "GPU-00000000-0000-0000-0000-000000000000"
    measured = (
        "Tesla K10.G1.8GB (Kepler, cc 3.0: legacy, last driver branch R470, last CUDA 10.2) "
        "00000000:06:00.0"
    )
    records = [Record("gpu identity", uuid, measured, "", "info", 0.0, "")]
    summary, verbose = render_summary(records, {uuid: 0}), render_table(records, {uuid: 0})
    assert len(measured) > max(COLUMNS) and len(measured) > 48
    for text in (summary, verbose):
        lines = text.splitlines()
        header = next(line for line in lines if line.startswith("check "))
        start, end = header.index("measured"), header.index("threshold")
        column = " ".join(
            line[start:end].strip()
            for line in lines[lines.index(header) + 2 :]
            if line[start:end].strip()
        )
        assert column.startswith(measured), text
    assert max(len(line) for line in summary.splitlines()) <= WIDTH
