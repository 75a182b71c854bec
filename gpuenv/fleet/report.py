"""The fleet report: every host's suite report merged, then rendered for people and machines.

`analyse()` turns the backends' `HostOutcome`s into one `Fleet` (a row per GPU, figures compared
with the datasheet peak, the team's baseline and the fleet median of the same GPU model). The
renderers are pure functions of that: a text table, JSON keyed by host and GPU UUID, JUnit XML
with one testsuite per host, and one self-contained HTML page whose plots matplotlib draws as
inline SVG. Only `write_reports` touches the disk.
"""

from __future__ import annotations

import html
import io
import json
import re
import statistics
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from gpuenv.fleet.outcome import READY, HostOutcome, fleet_ready
from validate.files import write_text_atomic
from validate.tables import format_table

FLEET_FORMAT = "gpuenv-fleet-report/1"
#: A figure below this share of the fleet median of its GPU model is an outlier.
OUTLIER_FRACTION = 0.9
#: The figures the HTML page plots: suite check name -> (datasheet metric, axis label).
PLOTTED = {
    "matmul bf16 TFLOPS": ("bf16_tflops", "bf16 matmul TFLOPS"),
    "device memory GB/s": ("memory_bandwidth_gbs", "device memory bandwidth GB/s"),
}
#: Suite areas, from the check files' names (validate/checks/test_NN_<area>.py), in report order.
AREAS = ("environment", "visibility", "memory", "masking", "speed")
HOST_MODEL = "host"  # baseline key of host-wide (CPU) figures, as validate/baseline.py writes it
_PEAK_METRIC = re.compile(r"^matmul (fp32|tf32|bf16|fp16) TFLOPS$")
_AREA = re.compile(r"test_\d+_([a-z_]+)\.py")


@dataclass
class Figure:
    """One measured figure of one GPU (or of the host) against the references we know."""

    check: str
    value: float
    peak: float | None = None  # datasheet
    baseline: float | None = None  # the team's known-good server of this model
    median: float | None = None  # fleet median of this model
    samples: int = 0  # how many GPUs of this model gave the median

    @property
    def outlier(self) -> bool:
        return self.median is not None and self.samples > 1 and self.value < OUTLIER_FRACTION * self.median

    def reference(self) -> tuple[str, float] | None:
        """What the figure is judged against: the baseline, else the datasheet, else the fleet."""
        fleet = self.median if self.samples > 1 else None  # a median of one is the figure itself
        for name, ref in (("baseline", self.baseline), ("peak", self.peak), ("fleet median", fleet)):
            if ref:
                return name, ref
        return None

    def ratio(self) -> float | None:
        ref = self.reference()
        return self.value / ref[1] if ref else None

    def to_dict(self) -> dict[str, Any]:
        ratio = self.ratio()
        return {
            "value": self.value,
            "datasheet_peak": self.peak,
            "baseline": self.baseline,
            "fleet_median": self.median,
            "fraction_of_median": round(self.value / self.median, 4) if self.median else None,
            "outlier": self.outlier,
            "reference": (self.reference() or ("none",))[0],
            "fraction_of_reference": round(ratio, 4) if ratio is not None else None,
        }


@dataclass
class Row:
    """One line of the fleet table: a GPU of a host, or the host alone when it shows no GPU."""

    host: str
    status: str
    reason: str
    uuid: str | None = None
    index: int | None = None
    model: str | None = None  # NVML name
    checks: list[dict[str, Any]] = field(default_factory=list)  # host-wide checks + this GPU's
    figures: dict[str, Figure] = field(default_factory=dict)

    @property
    def gpu_label(self) -> str:
        if self.uuid is None:
            return "-"
        return f"{self.index if self.index is not None else '?'} {self.model or ''} {self.uuid[:12]}".replace("  ", " ")

    def area_verdicts(self) -> dict[str, str]:
        return {area: summarise_verdicts(c["verdict"] for c in self.checks if check_area(c) == area) for area in AREAS}

    def worst_figure(self) -> tuple[str, Figure] | None:
        """The figure furthest below its reference (outliers first), for the table's last column."""
        judged = [(c, f) for c, f in self.figures.items() if f.ratio() is not None]
        if not judged:
            return None
        return min(judged, key=lambda item: (not item[1].outlier, item[1].ratio()))


@dataclass
class Fleet:
    outcomes: list[HostOutcome]
    rows: list[Row]
    medians: dict[str, dict[str, float]]  # model -> check -> fleet median
    baseline_applied: bool = False

    @property
    def ready(self) -> bool:
        return fleet_ready(self.outcomes)

    def outliers(self) -> list[tuple[Row, str, Figure]]:
        return [(row, check, fig) for row in self.rows for check, fig in row.figures.items() if fig.outlier]


# ---------------------------------------------------------------- analysis (pure)


def check_area(check: dict[str, Any]) -> str:
    """'checks/test_05_speed.py::test_matmul_throughput[gpu0]' -> 'speed' (other files: 'other')."""
    match = _AREA.search(str(check.get("test") or ""))
    return match.group(1) if match and match.group(1) in AREAS else "other"


def summarise_verdicts(verdicts: Iterable[str]) -> str:
    """A cell of the table: 'FAIL 2', 'pass', 'pass, 3 skip', 'skip' or '-' for none."""
    words = list(verdicts)
    if not words:
        return "-"
    failed = words.count("fail")
    skipped = words.count("skip")
    if failed:
        return f"FAIL {failed}"
    if skipped == len(words):
        return "skip"
    return "pass" + (f", {skipped} skip" if skipped else "")


def suite_gpus(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(uuid, section) of each GPU in a suite report, in NVML index order."""
    sections = [(k, v) for k, v in report.items() if isinstance(v, dict) and isinstance(v.get("gpu"), dict)]
    return sorted(sections, key=lambda kv: (kv[1]["gpu"].get("index") is None, kv[1]["gpu"].get("index") or 0, kv[0]))


def _peak_metric(check: str) -> str | None:
    if check in PLOTTED:
        return PLOTTED[check][0]
    match = _PEAK_METRIC.match(check)
    return f"{match.group(1)}_tflops" if match else None


def analyse(
    outcomes: list[HostOutcome],
    peaks: Any = None,
    baseline: dict[str, dict[str, float]] | None = None,
) -> Fleet:
    """Rows per GPU with figures against peak, baseline (per GPU model) and the fleet median.

    `peaks` is validate.peaks' table (list of GpuPeaks) or None; `baseline` the models section of
    a gpuenv-validate-baseline/1 file. Both are plain data so this stays a pure function.
    """
    from validate.peaks import peaks_for

    rows: list[Row] = []
    for outcome in outcomes:
        report = outcome.report or {}
        host_checks = list((report.get("host") or {}).get("checks") or [])
        gpus = suite_gpus(report)
        if not gpus:
            rows.append(Row(outcome.host, outcome.status, outcome.reason, checks=host_checks))
        for uuid, section in gpus:
            gpu = section["gpu"]
            rows.append(Row(
                outcome.host, outcome.status, outcome.reason, uuid=uuid, index=gpu.get("index"),
                model=gpu.get("name"), checks=host_checks + list(section.get("checks") or []),
            ))
    # figures: a GPU row holds its own; a GPU-less row holds the host-wide ones (CPU training ...)
    for row in rows:
        for check in row.checks:
            value = check.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if row.uuid is not None and check.get("gpu") != row.uuid:
                continue
            row.figures[str(check["check"])] = Figure(str(check["check"]), float(value))
    by_model: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        for name, fig in row.figures.items():
            by_model.setdefault((row.model or HOST_MODEL, name), []).append(fig.value)
    medians: dict[str, dict[str, float]] = {}
    for (model, name), values in by_model.items():
        medians.setdefault(model, {})[name] = statistics.median(values)
    for row in rows:
        model = row.model or HOST_MODEL
        entry = peaks_for(row.model, peaks) if (peaks and row.model) else None
        for name, fig in row.figures.items():
            fig.median = medians[model][name]
            fig.samples = len(by_model[(model, name)])
            metric = _peak_metric(name)
            fig.peak = entry.peak(metric) if (entry and metric) else None
            ref = (baseline or {}).get(model, {}).get(name)
            fig.baseline = float(ref) if isinstance(ref, (int, float)) else None
    return Fleet(outcomes, rows, medians, baseline_applied=bool(baseline))


# ---------------------------------------------------------------- text


def _figure_text(check: str, fig: Figure) -> str:
    ref = fig.reference()
    text = f"{check} {fig.value:.1f}"
    if ref:
        text += f" ({fig.value / ref[1]:.0%} of {ref[0]})"
    return text + (" OUTLIER" if fig.outlier else "")


def render_table(fleet: Fleet) -> str:
    """The table for people (host, GPU, status, a verdict per suite area, worst figure) and, below
    it, why each host that is not ready is not, with its failed checks."""
    headers = ("host", "GPU", "status", *AREAS, "worst figure")
    lines = []
    for row in fleet.rows:
        worst = row.worst_figure()
        verdicts = row.area_verdicts() if row.checks else {a: "-" for a in AREAS}
        lines.append((row.host, row.gpu_label, row.status, *(verdicts[a] for a in AREAS), _figure_text(*worst) if worst else "-"))
    out = [format_table(headers, lines, max_width=80)]
    ready = sum(1 for o in fleet.outcomes if o.ready)
    out.append("")
    out.append(f"{ready} of {len(fleet.outcomes)} host(s) ready" + (", baseline applied per GPU model" if fleet.baseline_applied else ""))
    for outcome in fleet.outcomes:
        if outcome.ready:
            continue
        out.append(f"{outcome.status}: {outcome.host}: {outcome.reason or 'see its report'}")
        for row in (r for r in fleet.rows if r.host == outcome.host):
            for check in row.checks:
                if check.get("verdict") == "fail" and (row.uuid is None or check.get("gpu") in (None, row.uuid)):
                    where = f"GPU {row.index}" if check.get("gpu") else "host"
                    out.append(f"  fail: {check.get('check')} [{where}]: {check.get('reason') or check.get('measured')}")
    for row, check, fig in fleet.outliers():
        out.append(f"outlier: {row.host} GPU {row.gpu_label}: {check} {fig.value:.1f} is below {OUTLIER_FRACTION:.0%} of the fleet median {fig.median:.1f} for {row.model or 'this host type'}")
    return "\n".join(out)


# ---------------------------------------------------------------- JSON


def build_json(fleet: Fleet) -> dict[str, Any]:
    """JSON keyed by host, then GPU UUID: each host's status and suite report, with the fleet's
    comparisons (peak, baseline, median, outlier) beside every figure."""
    hosts: dict[str, Any] = {}
    for outcome in fleet.outcomes:
        report = outcome.report or {}
        entry: dict[str, Any] = {
            "status": outcome.status,
            "ready": outcome.ready,
            "reason": outcome.reason,
            "seconds": outcome.seconds,
            "exit_code": outcome.exit_code,
            "details": outcome.details,
            "host": report.get("host"),
            "summary": report.get("summary"),
            "gpus": {},
        }
        for row in (r for r in fleet.rows if r.host == outcome.host):
            figures = {name: fig.to_dict() for name, fig in row.figures.items()}
            if row.uuid is None:
                entry["figures"] = figures
                continue
            section = dict(report.get(row.uuid) or {})
            section["model"] = row.model
            section["figures"] = figures
            entry["gpus"][row.uuid] = section
        hosts[outcome.host] = entry
    return {
        "format": FLEET_FORMAT,
        "ready": fleet.ready,
        "hosts_ready": sum(1 for o in fleet.outcomes if o.ready),
        "hosts_total": len(fleet.outcomes),
        "baseline_applied": fleet.baseline_applied,
        "outlier_fraction": OUTLIER_FRACTION,
        "fleet_medians": fleet.medians,
        "hosts": hosts,
    }


# ---------------------------------------------------------------- JUnit


def render_junit(fleet: Fleet) -> str:
    """JUnit XML: one <testsuite> per host, one <testcase> per check (per GPU); a host whose run
    never produced a report gets one erroring testcase that says why."""
    root = ET.Element("testsuites", name="gpuenv fleet validation")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for outcome in fleet.outcomes:
        suite = ET.SubElement(root, "testsuite", name=outcome.host, hostname=outcome.host)
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="status", value=outcome.status)
        if outcome.reason:
            ET.SubElement(props, "property", name="reason", value=outcome.reason)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        report = outcome.report or {}
        checks: list[tuple[str | None, dict[str, Any]]] = [(None, c) for c in (report.get("host") or {}).get("checks") or []]
        for uuid, section in suite_gpus(report):
            checks += [(uuid, c) for c in section.get("checks") or []]
        for uuid, check in checks:
            counts["tests"] += 1
            name = f"{check.get('check')} [{uuid or 'host'}]"
            case = ET.SubElement(suite, "testcase", classname=f"{outcome.host}.{check_area(check)}", name=name,
                                 time=f"{float(check.get('seconds') or 0):.3f}")
            verdict = check.get("verdict")
            if verdict == "fail":
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=str(check.get("reason") or check.get("measured") or "failed"))
            elif verdict == "skip":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=str(check.get("reason") or "skipped"))
            else:
                ET.SubElement(case, "system-out").text = f"{check.get('measured')} | {check.get('threshold')} | {verdict}"
        if not outcome.ready and not any(c.get("verdict") == "fail" for _, c in checks):
            counts["tests"] += 1
            counts["errors"] += 1
            case = ET.SubElement(suite, "testcase", classname=f"{outcome.host}.run", name="validation run",
                                 time=f"{outcome.seconds or 0:.3f}")
            ET.SubElement(case, "error", message=f"{outcome.status}: {outcome.reason}", type=outcome.status)
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", f"{outcome.seconds or 0:.3f}")
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ---------------------------------------------------------------- HTML


def plot_svg(fleet: Fleet, check: str, label: str) -> str | None:
    """A bar per GPU of `check`, the datasheet peak and the team baseline as ticks on each bar,
    the fleet median of each GPU model as a dashed line, outliers in red. None when no GPU has it."""
    from matplotlib.figure import Figure as MplFigure

    bars = [(row, row.figures[check]) for row in fleet.rows if check in row.figures and row.uuid]
    if not bars:
        return None
    bars.sort(key=lambda item: (item[0].model or "", item[0].host, item[0].index or 0))
    xs = list(range(len(bars)))
    fig = MplFigure(figsize=(max(6.0, 0.55 * len(bars) + 2.5) + 2.2, 3.6))  # + room for the legend on the right
    ax = fig.add_subplot()
    ax.bar(xs, [f.value for _, f in bars], color=["#c62828" if f.outlier else "#1565c0" for _, f in bars],
           label="measured")
    peaks = [(x, f.peak) for x, (_, f) in zip(xs, bars) if f.peak]
    if peaks:
        ax.scatter([x for x, _ in peaks], [p for _, p in peaks], marker="_", s=900, linewidths=2.5, color="black",
                   label="datasheet peak", zorder=3)
    bases = [(x, f.baseline) for x, (_, f) in zip(xs, bars) if f.baseline]
    if bases:
        ax.scatter([x for x, _ in bases], [b for _, b in bases], marker="_", s=900, linewidths=2, color="#2e7d32",
                   label="team baseline", zorder=3)
    labelled = False
    for model in dict.fromkeys(r.model for r, _ in bars):
        group = [x for x, (r, _) in zip(xs, bars) if r.model == model]
        median = bars[group[0]][1].median
        if median is None:
            continue
        ax.hlines(median, group[0] - 0.45, group[-1] + 0.45, colors="#ef6c00", linestyles="dashed",
                  label=None if labelled else "fleet median (per model)", zorder=4)
        ax.hlines(OUTLIER_FRACTION * median, group[0] - 0.45, group[-1] + 0.45, colors="#ef6c00",
                  linestyles="dotted", linewidth=0.8, label=None if labelled else f"{OUTLIER_FRACTION:.0%} of median", zorder=4)
        labelled = True
    ax.set_xticks(xs, [f"{r.host.removeprefix('ssh://')}\nGPU {r.index}" for r, _ in bars], fontsize=7,
                  rotation=30 if len(bars) > 6 else 0, ha="right" if len(bars) > 6 else "center")
    ax.set_ylabel(label)
    ax.set_title(f"{label} per GPU")
    if any(f.outlier for _, f in bars):
        ax.bar([xs[0]], [0], color="#c62828", label=f"outlier (< {OUTLIER_FRACTION:.0%} of median)")  # legend entry only
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, markerscale=0.4)  # beside the bars
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE: inline in HTML


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em;color:#212121}
h1{font-size:1.5em;margin-bottom:.2em} .summary{font-size:1.1em;margin:.5em 0 1.5em}
table{border-collapse:collapse;margin-bottom:1.5em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#eceff1} .ready{background:#e8f5e9} .bad{background:#ffebee} .skip{color:#757575}
.pass{color:#2e7d32} .fail{color:#c62828;font-weight:bold} .outlier{color:#c62828;font-weight:bold}
figure{margin:0 0 2em} svg{max-width:100%;height:auto} details{margin:.5em 0}
"""


def _cell(text: str) -> str:
    cls = "fail" if text.startswith("FAIL") or text == "fail" else "skip" if text in ("skip", "-") else "pass" if text.startswith("pass") else ""
    return f'<td class="{cls}">{html.escape(text)}</td>'


def render_html(fleet: Fleet, title: str = "gpuenv fleet validation", generated: str | None = None) -> str:
    """One self-contained page (inline CSS and SVG, no script, no network asset): the summary, the
    table, the plots against peak and fleet median, and every check's verdict per host."""
    when = generated or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ready = sum(1 for o in fleet.outcomes if o.ready)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f'<main id="fleet-report" data-hosts="{len(fleet.outcomes)}" data-ready="{ready}" data-outliers="{len(fleet.outliers())}">',
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="summary" id="fleet-summary"><b>{ready} of {len(fleet.outcomes)}</b> host(s) ready'
        + (" &mdash; baseline applied per GPU model" if fleet.baseline_applied else "")
        + f". Generated {html.escape(when)}.</p>",
        '<table id="fleet-table"><thead><tr><th>host</th><th>GPU</th><th>status</th>'
        + "".join(f"<th>{a}</th>" for a in AREAS) + "<th>worst figure</th><th>reason</th></tr></thead><tbody>",
    ]
    for row in fleet.rows:
        worst = row.worst_figure()
        verdicts = row.area_verdicts() if row.checks else {a: "-" for a in AREAS}
        worst_html = html.escape(_figure_text(*worst)) if worst else "-"
        if worst and worst[1].outlier:
            worst_html = f'<span class="outlier">{worst_html}</span>'
        parts.append(
            f'<tr class="{"ready" if row.status == READY else "bad"}"><td>{html.escape(row.host)}</td>'
            f"<td>{html.escape(row.gpu_label)}</td><td>{html.escape(row.status)}</td>"
            + "".join(_cell(verdicts[a]) for a in AREAS)
            + f"<td>{worst_html}</td><td>{html.escape(row.reason)}</td></tr>"
        )
    parts.append("</tbody></table>")
    outliers = fleet.outliers()
    if outliers:
        parts.append('<h2>Outliers</h2><ul id="fleet-outliers">')
        for row, check, fig in outliers:
            parts.append(
                f'<li class="outlier">{html.escape(row.host)} GPU {html.escape(row.gpu_label)}: {html.escape(check)} '
                f"{fig.value:.1f} is {fig.value / fig.median:.0%} of the fleet median {fig.median:.1f} "
                f"({html.escape(row.model or '')})</li>"  # type: ignore[operator]
            )
        parts.append("</ul>")
    parts.append("<h2>Figures against datasheet peak and fleet median</h2>")
    for check, (_, label) in PLOTTED.items():
        svg = plot_svg(fleet, check, label)
        slug = re.sub(r"[^a-z0-9]+", "-", check.lower()).strip("-")
        if svg:
            parts.append(f'<figure id="plot-{slug}" class="plot">{svg}<figcaption>{html.escape(label)}: bars measured '
                         f"(red: below {OUTLIER_FRACTION:.0%} of the fleet median of the same GPU model)</figcaption></figure>")
        else:
            parts.append(f'<p id="plot-{slug}" class="noplot">No GPU in this fleet reported {html.escape(check)}.</p>')
    parts.append("<h2>Every check, per host</h2>")
    for outcome in fleet.outcomes:
        report = outcome.report or {}
        parts.append(f'<details{" open" if not outcome.ready else ""}><summary>{html.escape(outcome.host)}: '
                     f"{html.escape(outcome.status)}</summary>")
        checks = [(None, c) for c in (report.get("host") or {}).get("checks") or []]
        index = {}
        for uuid, section in suite_gpus(report):
            index[uuid] = section["gpu"].get("index")
            checks += [(uuid, c) for c in section.get("checks") or []]
        if not checks:
            parts.append(f"<p>{html.escape(outcome.reason or 'no report')}</p></details>")
            continue
        parts.append("<table><thead><tr><th>check</th><th>GPU</th><th>measured</th><th>threshold</th>"
                     "<th>verdict</th><th>reason</th></tr></thead><tbody>")
        for uuid, c in checks:
            parts.append(
                f"<tr><td>{html.escape(str(c.get('check')))}</td><td>{'host' if uuid is None else index.get(uuid)}</td>"
                f"<td>{html.escape(str(c.get('measured')))}</td><td>{html.escape(str(c.get('threshold')))}</td>"
                + _cell(str(c.get("verdict"))) + f"<td>{html.escape(str(c.get('reason') or ''))}</td></tr>"
            )
        parts.append("</tbody></table></details>")
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- files


def write_reports(fleet: Fleet, *, json_path: str | None = None, junit_path: str | None = None, html_path: str | None = None) -> list[str]:
    """Write the asked-for files atomically; returns the paths written."""
    written = []
    if json_path:
        write_text_atomic(json_path, json.dumps(build_json(fleet), indent=2, default=str) + "\n")
        written.append(json_path)
    if junit_path:
        write_text_atomic(junit_path, render_junit(fleet))
        written.append(junit_path)
    if html_path:
        write_text_atomic(html_path, render_html(fleet))
        written.append(html_path)
    return written


def load_suite_report(text: str) -> dict[str, Any] | None:
    """A suite JSON report from its text, or None when it is not one (so a bad file reads as 'no report')."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) and str(data.get("format", "")).startswith("gpuenv-validate-report/") else None


def read_suite_report(path: Path) -> dict[str, Any] | None:
    try:
        return load_suite_report(path.read_text(encoding="utf-8"))
    except OSError:
        return None
