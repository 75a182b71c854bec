"""The page's plots drawn by another process while fleet.json and the JUnit XML are written
(gpuenv.fleet.report.plots.draw_in_background, which write_reports starts) make the same page as
plots drawn in place, a plot that fails included."""

from __future__ import annotations

import re
import threading

import pytest
from suitecases import A100, gpu, gpu_report

from gpuenv.fleet.outcome import READY, HostOutcome
from gpuenv.fleet.report import plots, write_reports
from gpuenv.fleet.report.analysis import analyse
from gpuenv.fleet.report.htmlreport import plots_wanted, render_html
from validate.judge.peaks import load_peaks


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
