"""A folder of per-host reports read by worker processes (gpuenv.fleet.collected.read_in_workers,
which `--from-reports` uses from PARALLEL_FROM files on) gives the outcomes one process gives:
the same hosts in the same order, the same statuses and reasons, the same checked reports, for
good reports and for every kind of malformed one (a FIFO, a link out of the folder, a 401-digit
number), whichever worker read which chunk."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from suitecases import FIXTURES, gpu, gpu_report

from gpuenv.fleet.collected import read_in_workers, read_report, read_reports, report_files
from gpuenv.fleet.outcome import MALFORMED, NOT_READY, READY
from gpuenv.fleet.report.analysis import analyse
from gpuenv.fleet.report.jsonreport import render_json
from gpuenv.fleet.report.junitreport import render_junit
from gpuenv.fleet.suitereport import CheckedReport, safe_text
from validate.judge.peaks import load_peaks


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory) -> Path:
    """Good hosts, a failing one, every hostile fixture, a FIFO, a link to /dev/zero and a link to a
    report outside the folder: 40-odd files."""
    root = tmp_path_factory.mktemp("collected")
    folder = root / "reports"
    folder.mkdir()
    for n in range(24):
        failed = ["matmul bf16 TFLOPS"] if n % 7 == 3 else []
        report = gpu_report(
            [(gpu(0, host=n + 1), 700.0 + n, 3000.0), (gpu(1, host=n + 1), 690.0, 2990.0 + n)],
            failed=failed,
        )
        (folder / f"gpu{n:02d}.json").write_text(json.dumps(report))
    for case in sorted((FIXTURES / "hostile").glob("*.json")):
        shutil.copy(case, folder / f"bad-{case.name}")
    os.mkfifo(folder / "fifo.json")
    (folder / "zero.json").symlink_to("/dev/zero")
    outside = root / "outside.json"
    outside.write_text(json.dumps(gpu_report([(gpu(0, host=99), 700.0, 3000.0)])))
    (folder / "outside.json").symlink_to(outside)
    return folder


@pytest.fixture(autouse=True)
def _single_threaded() -> None:
    if threading.active_count() > 1:  # a test runner's threads (pytest-xdist's execnet, a timeout)
        pytest.skip(
            f"this test process runs {threading.active_count()} threads: read_in_workers forks "
            "workers only from a single-threaded process"
        )


def _serial(folder: Path) -> list:
    return [
        read_report(safe_text(host, limit=200), path, within=folder)
        for host, path in report_files(folder)
    ]


@pytest.mark.parametrize("readers, chunk", [(2, 3), (3, 1), (2, 1000)])
def test_workers_read_what_one_process_reads(mixed_folder, readers, chunk):
    files = report_files(mixed_folder)
    named = [(safe_text(host, limit=200), path) for host, path in files]
    serial = _serial(mixed_folder)
    parallel = read_in_workers(mixed_folder, named, readers, chunk=chunk)
    assert parallel is not None, "the workers did not run"
    assert [o.host for o in parallel] == [o.host for o in serial]
    assert parallel == serial
    statuses = {o.status for o in parallel}
    assert {READY, NOT_READY, MALFORMED} <= statuses, statuses
    # the analysis tells a checked report by its type (it is not checked twice, and only checked
    # reports are compared for duplicates): the type survives the way back from a worker
    for outcome in parallel:
        assert outcome.report is None or type(outcome.report) is CheckedReport
    outside = next(o for o in parallel if o.host == "outside")
    assert outside.status == MALFORMED and "outside" in outside.reason


def test_the_reports_rendered_from_workers_are_the_same(mixed_folder):
    """The formats do not tell who read the files: fleet.json and the JUnit XML are the same."""
    named = [(safe_text(h, limit=200), p) for h, p in report_files(mixed_folder)]
    parallel = read_in_workers(mixed_folder, named, 2, chunk=5)
    assert parallel is not None
    peaks = load_peaks()
    one, two = analyse(_serial(mixed_folder), peaks), analyse(parallel, peaks)
    assert render_json(one) == render_json(two)
    assert render_junit(one) == render_junit(two)


def test_no_workers_while_another_thread_runs(mixed_folder):
    """Forking a process that runs other threads could copy a lock one of them holds: the
    folder is then read by this process alone, to the same outcomes."""
    named = [(safe_text(h, limit=200), p) for h, p in report_files(mixed_folder)]
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, args=(30,))
    other.start()
    try:
        assert read_in_workers(mixed_folder, named, 2) is None
        assert read_reports(mixed_folder, report_files(mixed_folder), readers=2) == _serial(
            mixed_folder
        )
    finally:
        stop.set()
        other.join(5)
