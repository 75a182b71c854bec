"""The fleet report of a small mixed fleet (issue 28 item 10): a few hosts of several models and
one CPU-only host. Categorical figures are counted, the "not plotted" note is true, no section is
left empty, and a CPU-only host in a GPU fleet is named as such, neither ready nor silently
failed."""

from __future__ import annotations

import pytest
from suitecases import A100, H100, cpu_report, gpu, gpu_report

from gpuenv.fleet.outcome import CPU_ONLY, READY, HostOutcome, fleet_ready
from gpuenv.fleet.report import plots
from gpuenv.fleet.report.analysis import analyse
from gpuenv.fleet.report.htmlreport import render_html
from gpuenv.fleet.report.jsonreport import build_json
from validate.judge.peaks import load_peaks

PEAKS = load_peaks()


def with_pcie(report: dict, generation: int, width: int) -> dict:
    """Add the sustained check's PCIe figures (whole values) to every GPU of a report."""
    for key, section in report.items():
        if isinstance(section, dict) and "gpu" in section:
            section["checks"] += [
                {
                    "check": "pcie generation under load",
                    "gpu": key,
                    "measured": str(generation),
                    "threshold": "-",
                    "verdict": "pass",
                    "seconds": 0.0,
                    "reason": "",
                    "value": float(generation),
                    "test": "checks/test_06_sustained.py::test_sustained_load",
                },
                {
                    "check": "pcie link width under load",
                    "gpu": key,
                    "measured": f"x{width}",
                    "threshold": "-",
                    "verdict": "pass",
                    "seconds": 0.0,
                    "reason": "",
                    "value": float(width),
                    "test": "checks/test_06_sustained.py::test_sustained_load",
                },
            ]
    return report


@pytest.fixture(scope="module")
def small_fleet():
    outcomes = [
        HostOutcome(
            f"h100-{n}",
            READY,
            report=with_pcie(gpu_report([(gpu(0, H100, n), 600.0, 2500.0)]), 5, 16),
        )
        for n in range(3)
    ]
    outcomes.append(
        HostOutcome(
            "h100-x8", READY, report=with_pcie(gpu_report([(gpu(0, H100, 9), 600.0, 2500.0)]), 4, 8)
        )
    )
    outcomes.append(
        HostOutcome("a100-0", READY, report=gpu_report([(gpu(0, A100, 20), 250.0, 1800.0)]))
    )
    outcomes.append(HostOutcome("cpu-box", READY, report=cpu_report()))
    return analyse(outcomes, PEAKS)


def test_a_cpu_only_host_in_a_gpu_fleet_is_named_not_ready(small_fleet):
    cpu = next(o for o in small_fleet.outcomes if o.host == "cpu-box")
    assert cpu.status == CPU_ONLY and "CPU-only host" in cpu.reason
    assert not fleet_ready(small_fleet.outcomes), (
        "a GPU fleet with a host that shows no GPU is not all ready"
    )
    assert small_fleet.counts[CPU_ONLY] == 1 and small_fleet.counts[READY] == 4, (
        small_fleet.counts
    )  # and h100-x8 is degraded (x8 of x16)
    assert build_json(small_fleet)["hosts"]["cpu-box"]["status"] == CPU_ONLY


def test_a_cpu_only_fleet_stays_ready():
    fleet = analyse(
        [HostOutcome("cpu-a", READY, report=cpu_report())], PEAKS
    )  # (two copies of one report would be a duplicate)
    assert all(o.status == READY for o in fleet.outcomes)


def test_pcie_generation_and_width_are_counted_not_binned(small_fleet):
    assert plots.is_categorical("pcie generation under load") and plots.is_categorical(
        "pcie link width under load"
    )
    assert not plots.is_categorical("matmul bf16 TFLOPS")
    svg = plots.plot_distributions(small_fleet, H100)
    assert "GPUs (log)" in svg, "the continuous figures keep their log count axis"
    from matplotlib.figure import Figure as MplFigure

    panels = {p.check: p for p in plots.distribution_panels(small_fleet, H100)}
    ax = MplFigure().add_subplot()
    plots._plot_counts(ax, panels["pcie link width under load"])
    assert ax.get_yscale() == "linear"
    assert sorted(p.get_height() for p in ax.patches if p.get_height()) == [1, 3], (
        "one bar per width: 1 GPU at x8, 3 at x16"
    )
    fig_checks = [c for c, _ in plots._model_figures(small_fleet, H100)]
    assert "pcie generation under load" in fig_checks and "pcie link width under load" in fig_checks


def test_the_not_plotted_note_is_true_and_no_section_is_empty(small_fleet, monkeypatch):
    from gpuenv.fleet.report import htmlreport

    monkeypatch.setattr(htmlreport, "MAX_MODELS", 1)
    page = render_html(small_fleet)
    assert page.count('<figure id="dist-') == 1
    assert (
        "1 of 2 GPU model(s) plotted; not plotted: 1 beyond the 1 with the most hosts: NVIDIA "
        "A100-SXM4-80GB" in page
    )
    heat = page.split('id="fleet-heatmap"')
    assert len(heat) == 1 or '<figure id="heat-' in heat[1].split("</section>")[0], (
        "a heatmap heading has a heatmap under it"
    )


def test_without_a_heatmap_there_is_no_heatmap_heading():
    """A fleet whose GPUs gave no figure: no distribution, no heatmap, and no empty heading."""
    report = gpu_report([(gpu(0, H100, 1), 600.0, 2500.0)])
    for key, section in report.items():
        if isinstance(section, dict) and "gpu" in section:
            section["checks"] = [c for c in section["checks"] if c.get("value") is None]
    page = render_html(analyse([HostOutcome("h", READY, report=report)], PEAKS))
    assert 'id="fleet-heatmap"' not in page
    assert "No GPU in this fleet reported a figure to plot." in page
