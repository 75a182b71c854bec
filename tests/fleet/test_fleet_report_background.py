"""The page's plots drawn by another process while fleet.json and the JUnit XML are written
(gpuenv.fleet.report.plots.draw_in_background, which write_reports starts) make the same page as
plots drawn in place, a plot that fails included; fleet.json written by another process
(write_elsewhere) is the same file, fails as it would here, and leaves no half-written file
when it fails, is stopped or dies."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest
from hangbound import HANG_BOUND_S
from suitecases import A100, gpu, gpu_report

from gpuenv.fleet import report
from gpuenv.fleet.outcome import READY, HostOutcome
from gpuenv.fleet.report import plots, write_elsewhere, write_reports
from gpuenv.fleet.report.analysis import analyse
from gpuenv.fleet.report.htmlreport import plots_wanted, render_html
from gpuenv.fleet.report.jsonreport import iter_json, render_json
from gpuenv.fleet.report.junitreport import render_junit
from validate.judge.peaks import load_peaks
from validate.writing import WriteFailed, write_text_atomic


def _fleet():
    outcomes = [
        HostOutcome(
            f"n{h:02d}",
            READY,
            report=gpu_report(
                [
                    (gpu(0, host=h), 700.0 + h, 3000.0),
                    (gpu(1, host=h), 400.0 if h == 3 else 699.0, 2990.0),
                    (gpu(2, name=A100, host=h), 250.0 + h, 1700.0),
                ]
            ),
        )
        for h in range(8)
    ]
    return analyse(outcomes, load_peaks())


@pytest.fixture(autouse=True)
def _single_threaded() -> None:
    if threading.active_count() > 1:  # a test runner's threads (pytest-xdist's execnet, a timeout)
        pytest.skip(
            f"this test process runs {threading.active_count()} threads: the plots are drawn "
            "elsewhere only from a single-threaded process"
        )


def _undated(page: str) -> str:
    return re.sub(r"Generated [^.]*UTC\.", "Generated X.", page)


def test_plots_drawn_elsewhere_make_the_same_page(tmp_path):
    fleet = _fleet()
    wanted = plots_wanted(fleet)
    assert len(wanted) == 4  # two models, a distribution and a heatmap each
    background = plots.draw_in_background(fleet, wanted)
    assert background is not None, "the drawing process did not start"
    drawn = background.result()
    assert drawn is not None and set(drawn) == set(wanted)
    assert all(kind == "svg" and svg.startswith("<svg") for kind, svg in drawn.values())
    in_place = render_html(fleet, generated="then")
    assert render_html(fleet, generated="then", drawn=drawn) == in_place
    paths = {"json_path": tmp_path / "f.json", "html_path": tmp_path / "f.html"}
    write_reports(fleet, **{k: str(v) for k, v in paths.items()})
    assert _undated(paths["html_path"].read_text()) == _undated(render_html(fleet))


def test_a_plot_that_fails_elsewhere_is_said_on_the_page_as_in_place():
    fleet = _fleet()
    model = plots_wanted(fleet)[0][1]
    broken = plots.draw_all([("plot_heatmap", model, [("n00", {0: "not a number"})])], 0.9)
    kind, name, message = broken["plot_heatmap", model]
    assert kind == "error" and name and message
    page = render_html(fleet, generated="then", drawn=broken)
    assert f"plot_heatmap of {model} could not be drawn: {name}: " in page


# ---------------------------------------------------------------- fleet.json written elsewhere
# (gpuenv.fleet.report.write_elsewhere, which write_reports starts when another format is asked)


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_json_written_elsewhere_is_the_file_written_here(tmp_path):
    fleet = _fleet()
    elsewhere = write_elsewhere(str(tmp_path / "f.json"), iter_json, fleet)
    assert elsewhere is not None, "the writing process did not start"
    elsewhere.finish()
    assert (tmp_path / "f.json").read_text() == render_json(fleet)
    paths = {"json_path": tmp_path / "w.json", "junit_path": tmp_path / "w.xml"}
    assert write_reports(fleet, **{k: str(v) for k, v in paths.items()}) == [
        str(paths["json_path"]),
        str(paths["junit_path"]),
    ]
    assert paths["json_path"].read_text() == render_json(fleet)
    assert paths["junit_path"].read_text() == render_junit(fleet)
    assert _leftovers(tmp_path) == []


def test_a_json_that_cannot_be_written_elsewhere_fails_as_here_and_the_others_are_written(
    tmp_path,
):
    fleet = _fleet()
    (tmp_path / "file").write_text("not a folder\n")
    json_path, junit_path = tmp_path / "file" / "f.json", tmp_path / "f.xml"
    with pytest.raises(WriteFailed) as here:
        write_text_atomic(json_path, iter_json(fleet))
    with pytest.raises(WriteFailed) as raised:
        write_reports(fleet, json_path=str(json_path), junit_path=str(junit_path))
    assert str(raised.value) == str(here.value) and raised.value.errno == here.value.errno
    assert junit_path.read_text() == render_junit(fleet)
    assert _leftovers(tmp_path) == []


def _fails_halfway(fleet):
    pieces = iter_json(fleet)
    yield next(pieces)
    raise RuntimeError("a bug halfway through fleet.json")


def test_a_bug_in_the_writer_elsewhere_is_raised_here_and_leaves_no_file(tmp_path):
    fleet = _fleet()
    elsewhere = write_elsewhere(str(tmp_path / "f.json"), _fails_halfway, fleet)
    assert elsewhere is not None
    with pytest.raises(RuntimeError, match="a bug halfway"):  # met again here, with its traceback
        elsewhere.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _slow(fleet):
    pieces = iter_json(fleet)
    yield next(pieces)
    time.sleep(60)  # stopped during this
    yield from pieces


def test_a_writer_stopped_halfway_leaves_neither_the_file_nor_its_temporary_file(
    tmp_path, monkeypatch
):
    # a writer that ignored SIGTERM would be killed only after three hang bounds: ending within
    # one says SIGTERM ended it (and its cleanup ran), not the kill
    monkeypatch.setattr(report, "STOP_WAIT_S", 3 * HANG_BOUND_S)
    fleet = _fleet()
    elsewhere = write_elsewhere(str(tmp_path / "f.json"), _slow, fleet)
    assert elsewhere is not None
    deadline = time.monotonic() + 30
    while not _leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _leftovers(tmp_path), "the writer never started its temporary file"
    started = time.monotonic()
    elsewhere.stop()  # as write_reports does on Ctrl-C or an error of its own
    assert time.monotonic() - started < HANG_BOUND_S  # ended by SIGTERM, not by the kill
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _dies_elsewhere(parent):
    def render(fleet):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
        return iter_json(fleet)

    return render


def test_a_writer_that_dies_is_replaced_by_writing_here(tmp_path):
    fleet = _fleet()
    elsewhere = write_elsewhere(str(tmp_path / "f.json"), _dies_elsewhere(os.getpid()), fleet)
    assert elsewhere is not None
    elsewhere.finish()
    assert (tmp_path / "f.json").read_text() == render_json(fleet)
    assert _leftovers(tmp_path) == []
