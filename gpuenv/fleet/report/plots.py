"""The fleet report's figures, as inline SVG for the HTML page (matplotlib, imported only here
and only when a page is drawn): per GPU model, the distribution of each figure and a host x GPU
heatmap. Pure functions of the Fleet; their size depends on the number of figures and GPU
indexes, never on the number of hosts.

Each plot is taken in two steps: its data from the Fleet (distribution_panels, heatmap_hosts:
plain lists, small enough to pass to another process), then the drawing (draw_distributions,
draw_heatmap), which is what costs: matplotlib takes 4 to 5 s for a page's plots. So
draw_in_background can draw them in another process while the other formats are written."""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from gpuenv.fleet.report.analysis import PLOTTED, Figure, Fleet, Row

#: How many of the worst hosts the heatmap labels, and how many GPUs per host it shows.
WORST_LABELLED = 40
MAX_COLUMNS = 64
#: Figures plotted per GPU model: the ones most GPUs gave (headline figures first). Bounds the
#: page whatever the reports hold; the JSON has the rest.
MAX_FIGURES = 12


def _mpl_context() -> Any:
    """matplotlib settings for every plot: text as text (small SVG), no TeX, stable ids. Text from
    a node's report (a GPU name, a check, a host) is drawn with parse_math=False, so that
    `$\\frac{a}{b}$` or a lone `$` is shown as written, never handed to mathtext."""
    import matplotlib

    return matplotlib.rc_context(
        {
            "text.usetex": False,
            "svg.fonttype": "none",
            "svg.hashsalt": "gpuenv-fleet",
            "font.size": 8,
        }
    )


def _svg(fig: Any) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    return svg[svg.index("<svg") :]  # drop the XML prolog and DOCTYPE: inline in HTML


def _model_figures(fleet: Fleet, model: str) -> list[tuple[str, list[tuple[Row, Figure]]]]:
    """(check, [(row, figure)]) of the GPUs of one model, headline figures first."""
    by_check: dict[str, list[tuple[Row, Figure]]] = {}
    for row in fleet.rows:
        if row.uuid and (row.model or "unknown GPU") == model:
            for name, fig in row.figures.items():
                by_check.setdefault(name, []).append((row, fig))
    order = [c for c in PLOTTED if c in by_check] + sorted(
        (c for c in by_check if c not in PLOTTED), key=lambda c: (-len(by_check[c]), c)
    )
    return [(c, by_check[c]) for c in order[:MAX_FIGURES]]


@dataclass
class Panel:
    """One figure of the GPUs of one model, as its histogram needs it: each GPU's value and
    whether it is an outlier, and the lines drawn over it (the references of the model)."""

    check: str
    values: list[float]
    outliers: list[bool]
    median: float | None
    samples: int
    measured: float | None
    baseline: float | None


def distribution_panels(fleet: Fleet, model: str) -> list[Panel]:
    """The panels of plot_distributions for one GPU model, headline figures first."""
    panels = []
    for check, points in _model_figures(fleet, model):
        sample = points[0][1]
        panels.append(
            Panel(
                check,
                [f.value for _, f in points],
                [f.outlier for _, f in points],
                sample.median,
                sample.samples,
                sample.measured,
                sample.baseline,
            )
        )
    return panels


#: Figures that take a few whole values (a PCIe generation, a link width): counted per value, not
#: binned.
CATEGORICAL = re.compile(r"\bpcie\b.*\b(generation|gen|width)\b", re.IGNORECASE)


def is_categorical(check: str) -> bool:
    return bool(CATEGORICAL.search(check))


def _plot_counts(ax: Any, panel: Panel) -> None:
    """One bar per value with its count on a linear axis (a PCIe generation is 3, 4 or 5: no
    histogram, no log axis); outliers in red."""
    check, points = panel.check, list(zip(panel.values, panel.outliers))
    values = sorted(set(panel.values))
    good = [sum(1 for value, low in points if value == v and not low) for v in values]
    low = [sum(1 for value, low in points if value == v and low) for v in values]
    labels = [f"{v:g}" for v in values]
    ax.bar(labels, good, color="#1565c0", label="GPUs")
    if any(low):
        ax.bar(labels, low, bottom=good, color="#c62828", label=f"outliers ({sum(low)})")
    for n, total in enumerate(g + b for g, b in zip(good, low)):
        ax.annotate(str(total), (n, total), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("GPUs")
    ax.set_xlabel(
        "gen" if "gen" in check.lower() else "lanes" if "width" in check.lower() else "value",
        fontsize=7,
    )


def plot_distributions(fleet: Fleet, model: str) -> str | None:
    """One SVG per GPU model: a histogram per figure of every GPU of that model, with the fleet
    median, the outlier floor, the measured reference and the team baseline as lines, outliers in
    red.
    Its size depends on the number of figures, never on the number of hosts."""
    return draw_distributions(model, distribution_panels(fleet, model), fleet.floor)


def draw_distributions(model: str, panels: list[Panel], floor: float) -> str | None:
    """plot_distributions' drawing, from its panels and the fleet's outlier floor."""
    from matplotlib.figure import Figure as MplFigure

    if not panels:
        return None
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    with _mpl_context():
        fig = MplFigure(figsize=(3.6 * cols, 2.5 * rows + 0.3))
        for n, sample in enumerate(panels):
            check = sample.check
            ax = fig.add_subplot(rows, cols, n + 1)
            values = sample.values
            if is_categorical(check):
                _plot_counts(ax, sample)
                ax.set_title(f"{check} ({len(values)} GPUs)", fontsize=8, parse_math=False)
                ax.tick_params(labelsize=7)
                ax.legend(fontsize=6, frameon=False, loc="upper left")
                continue
            low = [v for v, outlier in zip(values, sample.outliers) if outlier]
            refs = [v for v in (sample.median, sample.measured, sample.baseline) if v]
            lo, hi = min(values + refs), max(values + refs)
            span = (hi - lo) or max(abs(hi), 1.0) * 0.1
            bins = [lo - span * 0.02 + i * span * 1.04 / 40 for i in range(41)]
            # a log count axis, so that one slow GPU among thousands is still a visible bar
            ax.hist(
                [v for v, outlier in zip(values, sample.outliers) if not outlier],
                bins=bins,
                color="#1565c0",
                label="GPUs",
                log=True,
            )
            if low:
                ax.hist(low, bins=bins, color="#c62828", label=f"outliers ({len(low)})", log=True)
            if sample.median and sample.samples > 1:
                ax.axvline(
                    sample.median,
                    color="#ef6c00",
                    linestyle="--",
                    linewidth=1.2,
                    label="fleet median",
                )
                ax.axvline(
                    floor * sample.median,
                    color="#ef6c00",
                    linestyle=":",
                    linewidth=1,
                    label=f"{floor:.0%} of median",
                )
            if sample.measured:
                ax.axvline(
                    sample.measured, color="black", linewidth=1.2, label="measured reference"
                )
            if sample.baseline:
                ax.axvline(sample.baseline, color="#2e7d32", linewidth=1.2, label="team baseline")
            ax.set_title(f"{check} ({len(values)} GPUs)", fontsize=8, parse_math=False)
            ax.set_ylabel("GPUs (log)")
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6, frameon=False, loc="upper left")
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle(model, fontsize=9, parse_math=False)
        # margins in inches, set once: tight_layout measured every text in a draw of its own, a
        # third of the plot's time, to find about the same margins for 8-point labels
        width, height = fig.get_size_inches()
        fig.subplots_adjust(
            left=0.75 / width,
            right=1 - 0.15 / width,
            bottom=0.45 / height,
            top=1 - 0.6 / height,
            wspace=0.75 / (width / cols),
            hspace=0.7 / (height / rows),
        )
        return _svg(fig)


def plot_heatmap(fleet: Fleet, model: str) -> str | None:
    """Host x GPU heatmap of one model: each cell is the GPU's lowest figure as a share of the
    fleet median. Left: the worst hosts, labelled; right: every host, worst first, one pixel row
    each, so it stays legible (and the same size) at 1,000 hosts. Grey: the GPU gave no figure."""
    return draw_heatmap(model, heatmap_hosts(fleet, model), fleet.floor)


def heatmap_hosts(fleet: Fleet, model: str) -> list[tuple[str, dict[int, float | None]]]:
    """plot_heatmap's data: (host, {GPU index: lowest figure / fleet median}) per host of the
    model, in the fleet's order."""
    hosts: list[tuple[str, dict[int, float | None]]] = []
    for outcome, rows in fleet.hosts:
        mine = [r for r in rows if r.uuid and (r.model or "unknown GPU") == model]
        if mine:
            hosts.append((outcome.host, {r.index or 0: r.lowest_of_median() for r in mine}))
    return hosts


def draw_heatmap(
    model: str, hosts: list[tuple[str, dict[int, float | None]]], floor: float
) -> str | None:
    """plot_heatmap's drawing, from its hosts and the fleet's outlier floor."""
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure as MplFigure

    hosts = list(hosts)
    indexes = {index for _, cells in hosts for index in cells}
    if not hosts or not any(v is not None for _, cells in hosts for v in cells.values()):
        return None
    columns = sorted(indexes)[
        :MAX_COLUMNS
    ]  # the GPU indexes seen (a report may skip or invent some)
    width = len(columns)
    hosts.sort(
        key=lambda hc: (min((v for v in hc[1].values() if v is not None), default=9.0), hc[0])
    )
    grid = [
        [(cells.get(i) if cells.get(i) is not None else math.nan) for i in columns]
        for _, cells in hosts
    ]
    labelled = grid[:WORST_LABELLED]
    import matplotlib

    with _mpl_context():
        cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#bdbdbd")
        norm = TwoSlopeNorm(vmin=min(0.5, floor - 0.05), vcenter=floor, vmax=1.1)
        two = len(hosts) > WORST_LABELLED
        fig = MplFigure(figsize=(10, max(2.6, 1.4 + 0.16 * len(labelled))), layout="constrained")
        axes = fig.subplots(
            1, 2 if two else 1, width_ratios=[1, 1] if two else None, squeeze=False
        )[0]
        ax = axes[0]
        image = ax.imshow(labelled, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        ax.set_yticks(
            range(len(labelled)),
            [h.removeprefix("ssh://")[:40] for h, _ in hosts[:WORST_LABELLED]],
            fontsize=6,
            parse_math=False,
        )
        ax.set_xticks(range(width), [str(i) for i in columns], fontsize=7)
        ax.set_xlabel("GPU index")
        ax.set_title(
            f"worst {len(labelled)} of {len(hosts)} hosts"
            if two
            else f"{len(hosts)} hosts, worst first",
            fontsize=8,
        )
        if two:
            whole = axes[1]
            whole.imshow(grid, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
            whole.set_xticks(range(width), [str(i) for i in columns], fontsize=7)
            whole.set_xlabel("GPU index")
            whole.set_ylabel("host rank (worst first)")
            whole.set_title(f"all {len(hosts)} hosts, worst first", fontsize=8)
        bar = fig.colorbar(image, ax=list(axes), fraction=0.04, pad=0.02)
        bar.set_label("lowest figure / fleet median", fontsize=7)
        bar.ax.axhline(floor, color="black", linewidth=1)
        fig.suptitle(
            f"{model}: each GPU's lowest figure against the fleet median",
            fontsize=9,
            parse_math=False,
        )
        return _svg(fig)


#: What each plot function draws from: (its data from the Fleet, its drawing).
STEPS: dict[str, tuple[Callable[[Fleet, str], Any], Callable[[str, Any, float], str | None]]] = {
    "plot_distributions": (distribution_panels, draw_distributions),
    "plot_heatmap": (heatmap_hosts, draw_heatmap),
}
#: The longest a page waits for the plots drawn elsewhere before it draws them itself.
BACKGROUND_WAIT_S = 600.0


def draw_all(jobs: list[tuple[str, str, Any]], floor: float) -> dict[tuple[str, str], Any]:
    """(plot name, model) -> ("svg", the SVG or None: nothing to plot) or ("error", the
    exception's type name, its message): what each job's drawing gave."""
    drawn: dict[tuple[str, str], Any] = {}
    for name, model, data in jobs:
        try:
            drawn[name, model] = ("svg", STEPS[name][1](model, data, floor))
        except Exception as err:  # noqa: BLE001 - said on the page, as a plot drawn in place
            drawn[name, model] = ("error", type(err).__name__, str(err)[:300])
    return drawn


class Background:
    """Plots being drawn by another process; result() gives draw_all's answer, or None when
    that process could not draw them (the page then draws them itself)."""

    def __init__(self, pool: Any, future: Any) -> None:
        self._pool, self._future = pool, future

    def result(self) -> dict[tuple[str, str], Any] | None:
        try:
            return self._future.result(timeout=BACKGROUND_WAIT_S)
        except Exception:  # noqa: BLE001 - died, killed, timed out: drawn in place instead
            return None
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)


def draw_in_background(fleet: Fleet, wanted: list[tuple[str, str]]) -> Background | None:
    """Start drawing the `wanted` (plot name, model) in a forked process, from their data taken
    here (lists of numbers: a few MB at 100,000 GPUs). None when it cannot start: not on Linux,
    or another thread runs (a fork could copy a lock it holds), or the fork fails. A plot whose
    data cannot be taken is left out: the page draws it in place and says why it failed."""
    import sys
    import threading

    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    jobs = []
    for name, model in wanted:
        try:
            jobs.append((name, model, STEPS[name][0](fleet, model)))
        except Exception:  # noqa: BLE001 - drawn in place, where the failure is shown
            continue
    try:
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
        return Background(pool, pool.submit(draw_all, jobs, fleet.floor))
    except Exception:  # noqa: BLE001 - OSError, or a pool that broke at once: drawn in place
        return None
