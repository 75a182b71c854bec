"""The fleet report: every host's suite report merged, then rendered for people and machines.

`analyse()` turns the backends' `HostOutcome`s into one `Fleet`: each report checked as untrusted
input (suitereport.py), a row per GPU, figures compared with the team's baseline, the measured
reference of the model and the fleet median of the same GPU model, and hosts with a GPU below the outlier floor
marked "degraded". The renderers are pure functions of that, and read at any fleet size: what a
person needs first (the summary, then the hosts that are not ready, worst first) comes first, the
plots are distributions whose size does not grow with the host count, and ready hosts come last,
collapsed. Formats: a text table, JSON keyed by host and GPU UUID, JUnit XML with one testsuite per
host, one self-contained HTML page (inline CSS and SVG, no script). Only `write_reports` touches
the disk. Every step is linear in the number of hosts (benchmarks/fleet_report.py).
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable
from xml.sax.saxutils import quoteattr
from xml.sax.saxutils import escape as xml_escape

from gpuenv.fleet.outcome import (
    AUTH_REFUSED, CANCELLED, DEGRADED, ENGINE_NOT_ANSWERING, FAILED, MALFORMED, NO_DOCKER, NO_GPU_RUNTIME, NOT_READY, READY, TIMEOUT,
    UNREACHABLE, HostOutcome,
    fleet_ready,
)
from gpuenv.fleet.suitereport import MalformedReport, check_report, safe_text
from validate.files import write_text_atomic
from validate.report.tables import format_table

FLEET_FORMAT = "gpuenv-fleet-report/1"
#: Default outlier floor: a figure below this share of the fleet median of its GPU model makes its
#: host "degraded" (`--outlier-floor`, invoke.yaml `gpuenv.fleet.outlier_floor`).
OUTLIER_FLOOR = 0.9
OUTLIER_FRACTION = OUTLIER_FLOOR  # the name before --outlier-floor existed
#: The headline figures (suite check name -> datasheet metric), plotted first when present.
PLOTTED = {
    "matmul bf16 TFLOPS": ("bf16_tflops", "bf16 matmul TFLOPS"),
    "device memory GB/s": ("memory_bandwidth_gbs", "device memory bandwidth GB/s"),
}
#: Suite areas, one column each, in report order. A check's area comes from its test file
#: (validate/checks/test_NN_<area>.py), else from its name below; anything else is "other".
AREAS = ("environment", "visibility", "memory", "masking", "speed", "sustained", "other")
AREA_OF_FILE = {area: area for area in AREAS if area != "other"}
AREA_OF_CHECK = {
    "sustained load": "sustained",
    "clock events under load": "sustained",
    "pcie generation under load": "sustained",
}
#: Verdicts that are neither pass nor fail: a figure reported, a warning, or measured with no
#: reference ("not judged"; "no reference" is its older name). The fleet median judges those here.
NEUTRAL = ("info", "warn", "not judged", "no reference")
#: Hosts that are not ready, worst first: proven broken, then cannot run, then unknown, then slow.
STATUS_ORDER = (NOT_READY, NO_GPU_RUNTIME, FAILED, TIMEOUT, MALFORMED, ENGINE_NOT_ANSWERING, NO_DOCKER, AUTH_REFUSED, UNREACHABLE,
                CANCELLED, DEGRADED, READY)
_RANK = {status: n for n, status in enumerate(STATUS_ORDER)}
HOST_MODEL = "host"  # baseline key of host-wide (CPU) figures, as validate/report/baseline.py writes it
_PEAK_METRIC = re.compile(r"^matmul (fp32|tf32|bf16|fp16) TFLOPS$")
_AREA = re.compile(r"test_\d+_([a-z_]+)\.py")
#: How many names a plot's caption, a host's list of failures or the heatmap's labels hold.
NAMED = 12
WORST_LABELLED = 40
MAX_COLUMNS = 64  # GPUs per host the heatmap shows
#: Plots per page: the GPU models with the most hosts, and per model the figures most GPUs gave
#: (headline figures first). Bounds the page whatever the reports hold; the JSON has the rest.
MAX_MODELS = 6
MAX_FIGURES = 12


@dataclass
class Figure:
    """One measured figure of one GPU (or of the host) against the references we know."""

    check: str
    value: float
    peak: float | None = None  # datasheet: shown for orientation, never a reference
    measured: float | None = None  # what a healthy unit of this model measured (gpu_peaks.yaml)
    baseline: float | None = None  # the team's known-good server of this model
    median: float | None = None  # fleet median of this model
    samples: int = 0  # how many GPUs of this model gave the median
    floor: float = OUTLIER_FLOOR

    @property
    def outlier(self) -> bool:
        return self.median is not None and self.samples > 1 and self.value < self.floor * self.median

    def of_median(self) -> float | None:
        return self.value / self.median if self.median and self.samples > 1 else None

    def reference(self) -> tuple[str, float] | None:
        """What the figure is compared with: the team's baseline, else a healthy unit's measured
        reference, else the fleet median. Never the datasheet: healthy power-capped parts sit far
        below it (the suite's own rule, validate/judge/thresholds.py)."""
        fleet = self.median if self.samples > 1 else None  # a median of one is the figure itself
        for name, ref in (("baseline", self.baseline), ("reference", self.measured), ("fleet median", fleet)):
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
            "measured_reference": self.measured,
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
        by_area: dict[str, list[str]] = {}
        for check in self.checks:
            by_area.setdefault(check_area(check), []).append(check["verdict"])
        return {area: summarise_verdicts(by_area.get(area, ())) for area in AREAS}

    def outliers(self) -> list[tuple[str, Figure]]:
        return [(name, fig) for name, fig in self.figures.items() if fig.outlier]

    def worst_figure(self) -> tuple[str, Figure] | None:
        """The figure furthest below its reference (outliers first), for the table's last column."""
        judged = [(c, f) for c, f in self.figures.items() if f.ratio() is not None]
        if not judged:
            return None
        return min(judged, key=lambda item: (not item[1].outlier, item[1].ratio()))

    def lowest_of_median(self) -> float | None:
        """This GPU's lowest figure as a share of its model's fleet median (the heatmap's cell)."""
        shares = [s for s in (f.of_median() for f in self.figures.values()) if s is not None]
        return min(shares) if shares else None


@dataclass
class Fleet:
    outcomes: list[HostOutcome]  # after analysis: malformed reports and outliers reflected
    rows: list[Row]
    medians: dict[str, dict[str, float]]  # model -> check -> fleet median
    baseline_applied: bool = False
    floor: float = OUTLIER_FLOOR
    host_rows: list[list[Row]] = field(default_factory=list)  # the rows of outcomes[i]

    @property
    def ready(self) -> bool:
        return fleet_ready(self.outcomes)

    def outliers(self) -> list[tuple[Row, str, Figure]]:
        return [(row, check, fig) for row in self.rows for check, fig in row.figures.items() if fig.outlier]

    def hosts(self) -> list[tuple[HostOutcome, list[Row]]]:
        return list(zip(self.outcomes, self.host_rows))

    def counts(self) -> dict[str, int]:
        """Hosts per status, in STATUS_ORDER, ready first; zero counts of the headline ones kept."""
        counts = {s: 0 for s in (READY, NOT_READY, DEGRADED, UNREACHABLE, MALFORMED)}
        for outcome in self.outcomes:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        return counts

    def models(self) -> dict[str, dict[str, Any]]:
        """Per GPU model: hosts, GPUs, and hosts per status ("no GPU" for hosts that showed none)."""
        out: dict[str, dict[str, Any]] = {}
        for outcome, rows in self.hosts():
            names = {r.model or "unknown GPU" for r in rows if r.uuid} or {"no GPU shown"}
            for name in names:
                entry = out.setdefault(name, {"hosts": 0, "gpus": 0, "status": {}})
                entry["hosts"] += 1
                entry["gpus"] += sum(1 for r in rows if r.uuid and (r.model or "unknown GPU") == name)
                entry["status"][outcome.status] = entry["status"].get(outcome.status, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1]["hosts"], kv[0])))

    def not_ready(self) -> list[tuple[HostOutcome, list[Row]]]:
        """Hosts that are not ready, worst first: by status, then failed checks, then lowest figure."""
        def key(item: tuple[HostOutcome, list[Row]]) -> tuple[Any, ...]:
            outcome, rows = item
            failed = sum(1 for c in _host_checks(outcome) if c["verdict"] == "fail")
            lowest = min((s for s in (r.lowest_of_median() for r in rows) if s is not None), default=1.0)
            return _RANK.get(outcome.status, len(_RANK)), -failed, lowest, outcome.host
        return sorted((item for item in self.hosts() if not item[0].ready), key=key)


# ---------------------------------------------------------------- analysis (pure)


def check_area(check: dict[str, Any]) -> str:
    """'checks/test_05_speed.py::test_matmul_throughput[gpu0]' -> 'speed'; by name when the file
    does not say ('sustained load' -> 'sustained'); anything else -> 'other', never dropped."""
    match = _AREA.search(str(check.get("test") or ""))
    if match and match.group(1) in AREA_OF_FILE:
        return AREA_OF_FILE[match.group(1)]
    return AREA_OF_CHECK.get(str(check.get("check")), "other")


def summarise_verdicts(verdicts: Iterable[str]) -> str:
    """A cell of the table: 'FAIL 2', 'pass', 'pass, 3 skip', 'pass, 1 warn', 'not judged', 'skip'
    or '-' for none. info, warn and not judged are neither pass nor fail."""
    words = list(verdicts)
    if not words:
        return "-"
    failed = words.count("fail")
    if failed:
        return f"FAIL {failed}"
    skipped = words.count("skip")
    if skipped == len(words):
        return "skip"
    passed = words.count("pass")
    warned = words.count("warn")
    unjudged = words.count("not judged") + words.count("no reference")
    parts = ["pass"] if passed else []
    if warned:
        parts.append(f"{warned} warn")
    if unjudged and not passed:
        parts.append("not judged")
    if skipped:
        parts.append(f"{skipped} skip")
    return ", ".join(parts) or "info"


def suite_gpus(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(uuid, section) of each GPU in a checked suite report, in NVML index order."""
    sections = [(k, v) for k, v in report.items() if isinstance(v, dict) and isinstance(v.get("gpu"), dict)]
    return sorted(sections, key=lambda kv: (kv[1]["gpu"].get("index") is None, kv[1]["gpu"].get("index") or 0, kv[0]))


def _host_checks(outcome: HostOutcome) -> list[dict[str, Any]]:
    report = outcome.report or {}
    checks = list((report.get("host") or {}).get("checks") or [])
    for _, section in suite_gpus(report):
        checks += section.get("checks") or []
    return checks


def _peak_metric(check: str) -> str | None:
    if check in PLOTTED:
        return PLOTTED[check][0]
    match = _PEAK_METRIC.match(check)
    return f"{match.group(1)}_tflops" if match else None


def _checked(outcome: HostOutcome) -> HostOutcome:
    """The outcome with its report checked; a report that cannot be read makes it MALFORMED."""
    if outcome.report is None:
        return outcome
    try:
        report = check_report(outcome.report)
    except (MalformedReport, RecursionError) as err:
        why = str(err) if isinstance(err, MalformedReport) else "nested too deep"
        return dataclasses.replace(outcome, status=MALFORMED, reason=f"malformed report: {why}", report=None)
    return outcome if report is outcome.report else dataclasses.replace(outcome, report=report)


def _outlier_reason(rows: list[Row], floor: float) -> str:
    """'3 figure(s) below 90% of the fleet median; lowest: GPU 2 matmul bf16 TFLOPS 391.8 is 56% of
    the fleet median 699.5 of NVIDIA H100 80GB HBM3'."""
    found = [(row, name, fig) for row in rows for name, fig in row.outliers()]
    row, name, fig = min(found, key=lambda item: item[2].value / item[2].median)  # type: ignore[operator]
    return (f"{len(found)} figure(s) below {floor:.0%} of the fleet median; lowest: GPU {row.index} {name} {fig.value:.1f} "
            f"is {fig.value / fig.median:.0%} of the fleet median {fig.median:.1f} of {row.model or 'this host type'}")  # type: ignore[operator]


def analyse(
    outcomes: list[HostOutcome],
    peaks: Any = None,
    baseline: dict[str, dict[str, float]] | None = None,
    outlier_floor: float = OUTLIER_FLOOR,
) -> Fleet:
    """Rows per GPU with figures against peak, baseline (per GPU model) and the fleet median.

    `peaks` is validate.judge.peaks' table (list of GpuPeaks) or None; `baseline` the models section of
    a gpuenv-validate-baseline/1 file. Both are plain data so this stays a pure function. A host
    whose checks all passed but which has a GPU below `outlier_floor` of its model's fleet median
    comes back DEGRADED (not ready), with the figure and the median in its reason.
    """
    from validate.judge.peaks import peaks_for

    checked = [_checked(o) for o in outcomes]
    rows: list[Row] = []
    host_rows: list[list[Row]] = []
    for outcome in checked:
        report = outcome.report or {}
        host_checks = list((report.get("host") or {}).get("checks") or [])
        gpus = suite_gpus(report)
        mine = []
        if not gpus:
            mine.append(Row(outcome.host, outcome.status, outcome.reason, checks=host_checks))
        for uuid, section in gpus:
            gpu = section["gpu"]
            mine.append(Row(
                outcome.host, outcome.status, outcome.reason, uuid=uuid, index=gpu.get("index"),
                model=gpu.get("name"), checks=host_checks + list(section.get("checks") or []),
            ))
        rows += mine
        host_rows.append(mine)
    # figures: a GPU row holds its own; a GPU-less row holds the host-wide ones (CPU training ...)
    by_model: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        model = row.model or HOST_MODEL
        for check in row.checks:
            value = check.get("value")
            if value is None or (row.uuid is not None and check.get("gpu") != row.uuid):
                continue
            row.figures[check["check"]] = Figure(check["check"], float(value), floor=outlier_floor)
            by_model.setdefault((model, check["check"]), []).append(float(value))
    medians: dict[str, dict[str, float]] = {}
    for (model, name), values in by_model.items():
        medians.setdefault(model, {})[name] = statistics.median(values)
    entries: dict[str | None, Any] = {}
    for row in rows:
        model = row.model or HOST_MODEL
        if row.model not in entries:
            entries[row.model] = peaks_for(row.model, peaks) if (peaks and row.model) else None
        entry = entries[row.model]
        for name, fig in row.figures.items():
            fig.median = medians[model][name]
            fig.samples = len(by_model[(model, name)])
            metric = _peak_metric(name)
            fig.peak = entry.peak(metric) if (entry and metric) else None
            measured = entry.reference_for(metric) if (entry and metric) else None
            fig.measured = measured.value if (measured and measured.confirmed) else None  # measured like the suite
            ref = (baseline or {}).get(model, {}).get(name)
            fig.baseline = float(ref) if isinstance(ref, (int, float)) and not isinstance(ref, bool) else None
    final = []
    for outcome, mine in zip(checked, host_rows):
        if outcome.status == READY and any(row.outliers() for row in mine):
            outcome = dataclasses.replace(outcome, status=DEGRADED, reason=_outlier_reason(mine, outlier_floor))
            for row in mine:
                row.status, row.reason = outcome.status, outcome.reason
        final.append(outcome)
    return Fleet(final, rows, medians, baseline_applied=bool(baseline), floor=outlier_floor, host_rows=host_rows)


# ---------------------------------------------------------------- text


def _figure_text(check: str, fig: Figure) -> str:
    ref = fig.reference()
    text = f"{check} {fig.value:.1f}"
    if ref:
        text += f" ({fig.value / ref[1]:.0%} of {ref[0]})"
    return text + (" OUTLIER" if fig.outlier else "")


def _host_worst(rows: list[Row]) -> tuple[str, Figure] | None:
    worst = [w for w in (r.worst_figure() for r in rows) if w]
    return min(worst, key=lambda item: (not item[1].outlier, item[1].ratio())) if worst else None


def _host_areas(rows: list[Row]) -> dict[str, str]:
    """A host's verdict per area over all its GPUs (the host-wide checks counted once)."""
    seen: set[int] = set()
    by_area: dict[str, list[str]] = {}
    for row in rows:
        for check in row.checks:
            if id(check) in seen:
                continue
            seen.add(id(check))
            by_area.setdefault(check_area(check), []).append(check["verdict"])
    return {area: summarise_verdicts(by_area.get(area, ())) for area in AREAS}


def _count_words(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in counts.items() if n or status in (READY, NOT_READY))


def _summary_lines(fleet: Fleet) -> list[str]:
    counts = fleet.counts()
    lines = [f"{counts[READY]} of {len(fleet.outcomes)} host(s) ready"
             + (", baseline applied per GPU model" if fleet.baseline_applied else "")
             + f" ({_count_words(counts)}); outlier floor {fleet.floor:.0%} of the fleet median"]
    for model, entry in fleet.models().items():
        status = ", ".join(f"{n} {s}" for s, n in sorted(entry["status"].items(), key=lambda kv: _RANK.get(kv[0], 99)))
        lines.append(f"  {safe_text(model)}: {entry['hosts']} host(s), {entry['gpus']} GPU(s): {status}")
    return lines


def _failure_lines(outcome: HostOutcome, rows: list[Row], limit: int = NAMED) -> list[str]:
    """Why one host is not ready, in detail: its failed checks and its outlier figures."""
    out = []
    index = {r.uuid: r.index for r in rows if r.uuid}
    for check in _host_checks(outcome):
        if check["verdict"] == "fail":
            where = f"GPU {index.get(check['gpu'], '?')}" if check["gpu"] else "host"
            out.append(f"fail: {check['check']} [{where}]: {check['reason'] or check['measured']}")
    for row in rows:
        for name, fig in row.outliers():
            out.append(f"outlier: GPU {row.index} {name} {fig.value:.1f} is {fig.value / fig.median:.0%} of the fleet median "  # type: ignore[operator]
                       f"{fig.median:.1f} ({row.model or 'this host type'})")
    if len(out) > limit:
        out = out[:limit] + [f"... {len(out) - limit} more (see the JSON report)"]
    return out


def render_table(fleet: Fleet, verbose: bool = False) -> str:
    """For the terminal, what matters first: the summary (counts, per GPU model), then the hosts
    that are not ready, worst first, each with its reason and failed checks or outlier figures,
    then their table per GPU. Ready hosts are one line each with `verbose`, else one count.
    Every text from a node is made safe for the terminal (no raw escape sequences)."""
    out = _summary_lines(fleet)
    bad = fleet.not_ready()
    if bad:
        out += ["", f"not ready, worst first ({len(bad)}):"]
        for outcome, rows in bad:
            out.append(f"{outcome.status}: {safe_text(outcome.host)}: {safe_text(outcome.reason or 'see its report')}")
            out += ["  " + safe_text(line) for line in _failure_lines(outcome, rows)]
        headers = ("host", "GPU", "status", *AREAS, "worst figure")
        lines = []
        for outcome, rows in bad:
            for row in rows:
                worst = row.worst_figure()
                verdicts = row.area_verdicts() if row.checks else {a: "-" for a in AREAS}
                lines.append((safe_text(row.host), safe_text(row.gpu_label), row.status, *(verdicts[a] for a in AREAS),
                              safe_text(_figure_text(*worst)) if worst else "-"))
        out += ["", format_table(headers, lines, max_width=80)]
    ready = [(o, rows) for o, rows in fleet.hosts() if o.ready]
    if ready and verbose:
        headers = ("host", "GPUs", "status", *AREAS, "worst figure")
        lines = []
        for outcome, rows in ready:
            worst = _host_worst(rows)
            areas = _host_areas(rows)
            lines.append((safe_text(outcome.host), sum(1 for r in rows if r.uuid), outcome.status, *(areas[a] for a in AREAS),
                          safe_text(_figure_text(*worst)) if worst else "-"))
        out += ["", f"ready ({len(ready)}):", format_table(headers, lines, max_width=80)]
    elif ready:
        out += ["", f"{len(ready)} ready host(s) not listed (--verbose lists them; the JSON report has every check)"]
    return "\n".join(out)


def render_live(state: dict[str, tuple[str, str, float, float | None]], total: int, now: float, limit: int = 20) -> Any:
    """The live view of a fleet run (a rich Table): done/total and a count per status in the
    title, then the hosts still running, longest first, and the hosts finished not ready.

    `state` is host -> (phase, detail, started, ended or None), as `HostProgress` keeps it; a host
    is done when its phase is "done" (its detail is then its status). At most `limit` rows, so
    the view stays one screen at 1,000 hosts.
    """
    from rich.table import Table

    done = {h: s for h, s in state.items() if s[0] == "done"}
    running = sorted(((h, s) for h, s in state.items() if s[0] != "done"), key=lambda hs: hs[1][2])
    statuses: dict[str, int] = {}
    for _, (_, detail, _, _) in done.items():
        statuses[detail or "done"] = statuses.get(detail or "done", 0) + 1
    title = f"fleet validation: {len(done)}/{total} done" + (
        " (" + ", ".join(f"{n} {safe_text(s, limit=40)}" for s, n in sorted(statuses.items(), key=lambda kv: _RANK.get(kv[0], 99))) + ")"
        if statuses else "")
    waiting = max(0, total - len(state))
    table = Table(title=title, show_edge=False, caption=f"{len(running)} running, {waiting} waiting" if total else None,
                  title_justify="left", min_width=len(title))
    for column in ("host", "phase", "detail", "time"):
        table.add_column(column)
    shown = 0
    for host, (phase, detail, since, _) in running[:limit]:
        table.add_row(safe_text(host, limit=60), safe_text(phase, limit=30), safe_text(detail, limit=60), f"{now - since:.0f}s")
        shown += 1
    failed = [(h, s) for h, s in done.items() if s[1] != READY]
    for host, (phase, detail, since, ended) in failed[: max(0, limit - shown)]:
        table.add_row(safe_text(host, limit=60), phase, safe_text(detail, limit=60), f"{(ended or now) - since:.0f}s", style="red")
    if len(running) > limit:
        table.add_row(f"... {len(running) - limit} more running", "", "", "")
    return table


# ---------------------------------------------------------------- JSON


def _finite(value: Any) -> Any:
    """NaN and infinities become null: fleet.json stays strict JSON (allow_nan=False)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _host_entry(outcome: HostOutcome, rows: list[Row]) -> dict[str, Any]:
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
    for row in rows:
        figures = {name: fig.to_dict() for name, fig in row.figures.items()}
        if row.uuid is None:
            entry["figures"] = figures
            continue
        section = dict(report.get(row.uuid) or {})
        section["model"] = row.model
        section["figures"] = figures
        entry["gpus"][row.uuid] = section
    return entry


def _json_hosts(fleet: Fleet) -> Iterable[tuple[str, dict[str, Any]]]:
    """(key, entry) per host, one at a time (so fleet.json never holds every host twice)."""
    seen: set[str] = set()
    for n, (outcome, rows) in enumerate(fleet.hosts()):
        key = outcome.host if outcome.host not in seen else f"{outcome.host} ({n})"
        seen.add(key)
        yield key, _host_entry(outcome, rows)


def _json_head(fleet: Fleet) -> dict[str, Any]:
    return {
        "format": FLEET_FORMAT,
        "ready": fleet.ready,
        "hosts_ready": sum(1 for o in fleet.outcomes if o.ready),
        "hosts_total": len(fleet.outcomes),
        "counts": fleet.counts(),
        "not_ready": [o.host for o, _ in fleet.not_ready()],
        "baseline_applied": fleet.baseline_applied,
        "outlier_fraction": fleet.floor,
        "fleet_medians": fleet.medians,
    }


def build_json(fleet: Fleet) -> dict[str, Any]:
    """JSON keyed by host, then GPU UUID: each host's status and suite report, with the fleet's
    comparisons (peak, baseline, median, outlier) beside every figure."""
    return {**_json_head(fleet), "hosts": dict(_json_hosts(fleet))}


def _strict(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, default=str)
    except ValueError:  # a non-finite number from a backend's details: mapped to null
        return json.dumps(_finite(value), allow_nan=False)


def render_json(fleet: Fleet) -> str:
    """fleet.json's text, build_json's content with one host per line: strict JSON (no bare NaN or
    Infinity), encoded host by host so its cost and memory stay linear."""
    head = _strict(_json_head(fleet))
    lines = [head[:-1] + ', "hosts": {']
    hosts = [f"{json.dumps(key)}: {_strict(entry)}" for key, entry in _json_hosts(fleet)]
    lines.append(",\n".join(hosts))
    lines.append("}}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- JUnit


def _x(text: Any) -> str:
    return xml_escape(safe_text(text, newlines=True))


def _xa(text: Any) -> str:
    return quoteattr(safe_text(text, newlines=True))


def render_junit(fleet: Fleet) -> str:
    """JUnit XML: one <testsuite> per host, one <testcase> per check (per GPU), a failing testcase
    per outlier figure; a host whose run never produced a report gets one erroring testcase that
    says why. Written as text (not a tree) so that it stays linear and light at 4,000 hosts."""
    body: list[str] = []
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for outcome, rows in fleet.hosts():
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        cases: list[str] = []
        report = outcome.report or {}
        checks: list[tuple[str | None, dict[str, Any]]] = [(None, c) for c in (report.get("host") or {}).get("checks") or []]
        for uuid, section in suite_gpus(report):
            checks += [(uuid, c) for c in section.get("checks") or []]
        host = safe_text(outcome.host)
        for uuid, check in checks:
            counts["tests"] += 1
            head = (f'<testcase classname={_xa(host + "." + check_area(check))} name={_xa(check["check"] + " [" + (uuid or "host") + "]")} '
                    f'time="{check["seconds"] or 0:.3f}">')
            verdict = check["verdict"]
            if verdict == "fail":
                counts["failures"] += 1
                cases.append(f'{head}<failure message={_xa(check["reason"] or check["measured"] or "failed")}/></testcase>')
            elif verdict == "skip":
                counts["skipped"] += 1
                cases.append(f'{head}<skipped message={_xa(check["reason"] or "skipped")}/></testcase>')
            else:
                cases.append(f'{head}<system-out>{_x(check["measured"] + " | " + check["threshold"] + " | " + verdict)}</system-out></testcase>')
        for row in rows:
            for name, fig in row.outliers():
                counts["tests"] += 1
                counts["failures"] += 1
                message = (f"{fig.value:.1f} is {fig.value / fig.median:.0%} of the fleet median {fig.median:.1f} of "  # type: ignore[operator]
                           f"{row.model or 'this host type'} (floor {fleet.floor:.0%})")
                cases.append(f'<testcase classname={_xa(host + ".fleet")} name={_xa("outlier: " + name + " [" + str(row.uuid or "host") + "]")} '
                             f'time="0.000"><failure message={_xa(message)}/></testcase>')
        if not outcome.ready and not counts["failures"]:
            counts["tests"] += 1
            counts["errors"] += 1
            cases.append(f'<testcase classname={_xa(host + ".run")} name="validation run" time="{outcome.seconds or 0:.3f}">'
                         f'<error message={_xa(outcome.status + ": " + outcome.reason)} type={_xa(outcome.status)}/></testcase>')
        props = f'<property name="status" value={_xa(outcome.status)}/>'
        if outcome.reason:
            props += f'<property name="reason" value={_xa(outcome.reason)}/>'
        attrs = " ".join(f'{k}="{v}"' for k, v in counts.items())
        body.append(f'  <testsuite name={_xa(host)} hostname={_xa(host)} {attrs} time="{outcome.seconds or 0:.3f}">\n'
                    f"    <properties>{props}</properties>\n" + "".join(f"    {c}\n" for c in cases) + "  </testsuite>\n")
        for key, value in counts.items():
            totals[key] += value
    attrs = " ".join(f'{k}="{v}"' for k, v in totals.items())
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuites name="gpuenv fleet validation" {attrs}>\n'
            + "".join(body) + "</testsuites>\n")


# ---------------------------------------------------------------- HTML plots


def _mpl_context() -> Any:
    """matplotlib settings for every plot: text as text (small SVG), no TeX, stable ids. Text from
    a node's report (a GPU name, a check, a host) is drawn with parse_math=False, so that
    `$\\frac{a}{b}$` or a lone `$` is shown as written, never handed to mathtext."""
    import matplotlib

    return matplotlib.rc_context({"text.usetex": False, "svg.fonttype": "none", "svg.hashsalt": "gpuenv-fleet", "font.size": 8})


def _svg(fig: Any) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE: inline in HTML


def _model_figures(fleet: Fleet, model: str) -> list[tuple[str, list[tuple[Row, Figure]]]]:
    """(check, [(row, figure)]) of the GPUs of one model, headline figures first."""
    by_check: dict[str, list[tuple[Row, Figure]]] = {}
    for row in fleet.rows:
        if row.uuid and (row.model or "unknown GPU") == model:
            for name, fig in row.figures.items():
                by_check.setdefault(name, []).append((row, fig))
    order = [c for c in PLOTTED if c in by_check] + sorted((c for c in by_check if c not in PLOTTED), key=lambda c: (-len(by_check[c]), c))
    return [(c, by_check[c]) for c in order[:MAX_FIGURES]]


def plot_distributions(fleet: Fleet, model: str) -> str | None:
    """One SVG per GPU model: a histogram per figure of every GPU of that model, with the fleet
    median, the outlier floor, the measured reference and the team baseline as lines, outliers in red.
    Its size depends on the number of figures, never on the number of hosts."""
    from matplotlib.figure import Figure as MplFigure

    figures = _model_figures(fleet, model)
    if not figures:
        return None
    cols = min(3, len(figures))
    rows = math.ceil(len(figures) / cols)
    with _mpl_context():
        fig = MplFigure(figsize=(3.6 * cols, 2.5 * rows + 0.3))
        for n, (check, points) in enumerate(figures):
            ax = fig.add_subplot(rows, cols, n + 1)
            values = [f.value for _, f in points]
            low = [f.value for _, f in points if f.outlier]
            sample = points[0][1]
            refs = [v for v in (sample.median, sample.measured, sample.baseline) if v]
            lo, hi = min(values + refs), max(values + refs)
            span = (hi - lo) or max(abs(hi), 1.0) * 0.1
            bins = [lo - span * 0.02 + i * span * 1.04 / 40 for i in range(41)]
            # a log count axis, so that one slow GPU among thousands is still a visible bar
            ax.hist([f.value for _, f in points if not f.outlier], bins=bins, color="#1565c0", label="GPUs", log=True)
            if low:
                ax.hist(low, bins=bins, color="#c62828", label=f"outliers ({len(low)})", log=True)
            if sample.median and sample.samples > 1:
                ax.axvline(sample.median, color="#ef6c00", linestyle="--", linewidth=1.2, label="fleet median")
                ax.axvline(fleet.floor * sample.median, color="#ef6c00", linestyle=":", linewidth=1, label=f"{fleet.floor:.0%} of median")
            if sample.measured:
                ax.axvline(sample.measured, color="black", linewidth=1.2, label="measured reference")
            if sample.baseline:
                ax.axvline(sample.baseline, color="#2e7d32", linewidth=1.2, label="team baseline")
            ax.set_title(f"{check} ({len(values)} GPUs)", fontsize=8, parse_math=False)
            ax.set_ylabel("GPUs (log)")
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6, frameon=False, loc="upper left")
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle(model, fontsize=9, parse_math=False)
        fig.tight_layout()
        return _svg(fig)


def plot_heatmap(fleet: Fleet, model: str) -> str | None:
    """Host x GPU heatmap of one model: each cell is the GPU's lowest figure as a share of the
    fleet median. Left: the worst hosts, labelled; right: every host, worst first, one pixel row
    each, so it stays legible (and the same size) at 1,000 hosts. Grey: the GPU gave no figure."""
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure as MplFigure

    hosts: list[tuple[str, dict[int, float | None]]] = []
    indexes: set[int] = set()
    for outcome, rows in fleet.hosts():
        mine = [r for r in rows if r.uuid and (r.model or "unknown GPU") == model]
        if not mine:
            continue
        cells = {r.index or 0: r.lowest_of_median() for r in mine}
        indexes.update(cells)
        hosts.append((outcome.host, cells))
    if not hosts or not any(v is not None for _, cells in hosts for v in cells.values()):
        return None
    columns = sorted(indexes)[:MAX_COLUMNS]  # the GPU indexes seen (a report may skip or invent some)
    width = len(columns)
    hosts.sort(key=lambda hc: (min((v for v in hc[1].values() if v is not None), default=9.0), hc[0]))
    grid = [[(cells.get(i) if cells.get(i) is not None else math.nan) for i in columns] for _, cells in hosts]
    labelled = grid[:WORST_LABELLED]
    import matplotlib

    with _mpl_context():
        cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#bdbdbd")
        norm = TwoSlopeNorm(vmin=min(0.5, fleet.floor - 0.05), vcenter=fleet.floor, vmax=1.1)
        two = len(hosts) > WORST_LABELLED
        fig = MplFigure(figsize=(10, max(2.6, 1.4 + 0.16 * len(labelled))), layout="constrained")
        axes = fig.subplots(1, 2 if two else 1, width_ratios=[1, 1] if two else None, squeeze=False)[0]
        ax = axes[0]
        image = ax.imshow(labelled, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(labelled)), [h.removeprefix("ssh://")[:40] for h, _ in hosts[:WORST_LABELLED]], fontsize=6,
                      parse_math=False)
        ax.set_xticks(range(width), [str(i) for i in columns], fontsize=7)
        ax.set_xlabel("GPU index")
        ax.set_title(f"worst {len(labelled)} of {len(hosts)} hosts" if two else f"{len(hosts)} hosts, worst first", fontsize=8)
        if two:
            whole = axes[1]
            whole.imshow(grid, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
            whole.set_xticks(range(width), [str(i) for i in columns], fontsize=7)
            whole.set_xlabel("GPU index")
            whole.set_ylabel("host rank (worst first)")
            whole.set_title(f"all {len(hosts)} hosts, worst first", fontsize=8)
        bar = fig.colorbar(image, ax=list(axes), fraction=0.04, pad=0.02)
        bar.set_label("lowest figure / fleet median", fontsize=7)
        bar.ax.axhline(fleet.floor, color="black", linewidth=1)
        fig.suptitle(f"{model}: each GPU's lowest figure against the fleet median", fontsize=9, parse_math=False)
        return _svg(fig)


# ---------------------------------------------------------------- HTML page


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em;color:#212121;max-width:1400px}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.6em} .summary{font-size:1.1em;margin:.5em 0 1em}
table{border-collapse:collapse;margin-bottom:1em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#eceff1} .ready{background:#e8f5e9} .bad{background:#ffebee} .skip,.muted{color:#757575}
.pass{color:#2e7d32} .fail{color:#c62828;font-weight:bold} .outlier{color:#c62828;font-weight:bold}
.st-ready{color:#2e7d32;font-weight:bold} .st-bad{color:#c62828;font-weight:bold} .st-degraded{color:#ef6c00;font-weight:bold}
figure{margin:0 0 2em} svg{max-width:100%;height:auto} details{margin:.4em 0} summary{cursor:pointer}
ul.why{margin:.2em 0 .2em 1.2em;padding:0}
"""


def _cell(text: str) -> str:
    cls = "fail" if text.startswith("FAIL") or text == "fail" else "skip" if text in ("skip", "-") else "pass" if text.startswith("pass") else ""
    return f'<td class="{cls}">{html.escape(text)}</td>'


def _e(text: Any) -> str:
    return html.escape(safe_text(text, newlines=True))


def _status_class(status: str) -> str:
    return "st-ready" if status == READY else "st-degraded" if status == DEGRADED else "st-bad"


def _summary_html(fleet: Fleet, title: str, when: str) -> list[str]:
    counts = fleet.counts()
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f'<section id="fleet-summary"><p class="summary"><b>{counts[READY]} of {len(fleet.outcomes)}</b> host(s) ready'
        + (" &mdash; baseline applied per GPU model" if fleet.baseline_applied else "")
        + f"; a GPU below {fleet.floor:.0%} of its model's fleet median makes its host degraded. Generated {html.escape(when)}.</p>",
        '<table id="fleet-counts"><thead><tr>' + "".join(f"<th>{html.escape(s)}</th>" for s in counts) + "</tr></thead><tbody><tr>"
        + "".join(f'<td class="{_status_class(s) if n else "muted"}">{n}</td>' for s, n in counts.items()) + "</tr></tbody></table>",
    ]
    statuses = list(counts)
    parts.append('<table id="fleet-models"><thead><tr><th>GPU model</th><th>hosts</th><th>GPUs</th>'
                 + "".join(f"<th>{html.escape(s)}</th>" for s in statuses) + "</tr></thead><tbody>")
    for model, entry in fleet.models().items():
        parts.append(f"<tr><td>{_e(model)}</td><td>{entry['hosts']}</td><td>{entry['gpus']}</td>"
                     + "".join(f'<td class="{_status_class(s) if entry["status"].get(s) else "muted"}">{entry["status"].get(s, 0)}</td>'
                               for s in statuses) + "</tr>")
    parts.append("</tbody></table></section>")
    return parts


def _not_ready_html(fleet: Fleet, bad: list[tuple[HostOutcome, list[Row]]]) -> list[str]:
    parts = [f'<section id="fleet-not-ready"><h2>Not ready, worst first ({len(bad)})</h2>']
    if not bad:
        return parts + ['<p class="st-ready">Every host is ready.</p></section>']
    parts.append('<table id="not-ready-table"><thead><tr><th>#</th><th>host</th><th>status</th><th>reason</th></tr></thead><tbody>')
    for n, (outcome, rows) in enumerate(bad, start=1):
        why = _failure_lines(outcome, rows, limit=3)
        detail = ('<ul class="why">' + "".join(f"<li>{_e(w)}</li>" for w in why) + "</ul>") if why else ""
        parts.append(f'<tr class="bad" data-status="{html.escape(outcome.status)}"><td>{n}</td><td>{_e(outcome.host)}</td>'
                     f'<td class="{_status_class(outcome.status)}">{html.escape(outcome.status)}</td>'
                     f"<td>{_e(outcome.reason or 'see its report')}{detail}</td></tr>")
    parts.append("</tbody></table></section>")
    return parts


def _plots_html(fleet: Fleet) -> list[str]:
    every = [m for m in fleet.models() if m != "no GPU shown"]
    models = every[:MAX_MODELS]
    parts = ['<section id="fleet-distributions"><h2>Figures per GPU model, against the reference and the fleet median</h2>']
    if len(every) > len(models):
        parts.append(f'<p class="noplot">{len(every) - len(models)} more GPU model(s) not plotted (the {len(models)} with the most '
                     f"hosts are): {_e(', '.join(every[len(models):][:NAMED]))}{' ...' if len(every) - len(models) > NAMED else ''}</p>")
    plotted = False
    for model in models:
        svg = _drawn(plot_distributions, fleet, model, parts)
        if not svg:
            continue
        plotted = True
        slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
        named = sorted(((r, c, f) for r, c, f in fleet.outliers() if (r.model or "unknown GPU") == model),
                       key=lambda item: item[2].value / item[2].median)  # type: ignore[operator]
        caption = (f"{len(named)} outlier(s) below {fleet.floor:.0%} of the fleet median: "
                   + "; ".join(f"{_e(r.host)} GPU {r.index} {_e(c)} {f.value:.1f} ({f.value / f.median:.0%})" for r, c, f in named[:NAMED])  # type: ignore[operator]
                   + (f"; and {len(named) - NAMED} more" if len(named) > NAMED else "")) if named else "No outlier."
        parts.append(f'<figure id="dist-{slug}" class="plot">{svg}<figcaption class="{"outlier" if named else ""}">{caption}</figcaption></figure>')
    for check in PLOTTED:  # the headline figures missing from every GPU are said so, not silently left out
        if not any(check in r.figures for r in fleet.rows if r.uuid):
            parts.append(f'<p class="noplot">No GPU in this fleet reported {html.escape(check)}.</p>')
    if not plotted:
        parts.append('<p class="noplot">No GPU in this fleet reported a figure to plot.</p>')
    parts.append('</section><section id="fleet-heatmap"><h2>Host &times; GPU: lowest figure against the fleet median</h2>')
    for model in models:
        svg = _drawn(plot_heatmap, fleet, model, parts)
        if svg:
            slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
            parts.append(f'<figure id="heat-{slug}" class="plot">{svg}<figcaption>Red: below {fleet.floor:.0%} of the fleet median '
                         f"of {_e(model)}; grey: no figure.</figcaption></figure>")
    parts.append("</section>")
    return parts


def _drawn(plot: Any, fleet: Fleet, model: str, parts: list[str]) -> str | None:
    """A plot, or None with a line on the page saying why it could not be drawn: the page and the
    other formats are still written (the figures come from reports we do not control)."""
    try:
        return plot(fleet, model)
    except Exception as err:  # noqa: BLE001 - a diagnostic never crashes; the reason is shown
        parts.append(f'<p class="noplot">{html.escape(plot.__name__)} of {_e(model)} could not be drawn: '
                     f"{_e(type(err).__name__)}: {_e(str(err)[:300])}</p>")
        return None


def _gpu_rows_html(rows: list[Row]) -> list[str]:
    parts = ["<table><thead><tr><th>GPU</th>" + "".join(f"<th>{a}</th>" for a in AREAS) + "<th>worst figure</th></tr></thead><tbody>"]
    for row in rows:
        worst = row.worst_figure()
        verdicts = row.area_verdicts() if row.checks else {a: "-" for a in AREAS}
        worst_html = _e(_figure_text(*worst)) if worst else "-"
        if worst and worst[1].outlier:
            worst_html = f'<span class="outlier">{worst_html}</span>'
        parts.append(f"<tr><td>{_e(row.gpu_label)}</td>" + "".join(_cell(verdicts[a]) for a in AREAS) + f"<td>{worst_html}</td></tr>")
    parts.append("</tbody></table>")
    return parts


def render_html(fleet: Fleet, title: str = "gpuenv fleet validation", generated: str | None = None) -> str:
    """One self-contained page (inline CSS and SVG, no script, no network asset), in the order a
    person reads it at any fleet size: the summary and the hosts that are not ready (worst first,
    with reasons); the distribution of each figure per GPU model; a host x GPU heatmap; the details
    of each host that is not ready; then the ready hosts, one row each, collapsed."""
    when = generated or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    counts = fleet.counts()
    bad = fleet.not_ready()
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f'<main id="fleet-report" data-hosts="{len(fleet.outcomes)}" data-ready="{counts[READY]}" '
        f'data-not-ready="{len(bad)}" data-outliers="{len(fleet.outliers())}">',
    ]
    parts += _summary_html(fleet, title, when)
    parts += _not_ready_html(fleet, bad)
    parts += _plots_html(fleet)
    if bad:
        parts.append(f'<section id="fleet-not-ready-details"><h2>Hosts that are not ready, in detail ({len(bad)})</h2>')
        for outcome, rows in bad:
            parts.append(f'<details class="host" open><summary>{_e(outcome.host)}: '
                         f'<span class="{_status_class(outcome.status)}">{html.escape(outcome.status)}</span></summary>')
            parts.append(f"<p>{_e(outcome.reason or 'no reason given')}</p>")
            if any(r.uuid or r.checks for r in rows):
                parts += _gpu_rows_html(rows)
            index = {r.uuid: r.index for r in rows if r.uuid}
            noted = [c for c in _host_checks(outcome) if c["verdict"] in ("fail", "warn")]
            if noted:
                parts.append("<table><thead><tr><th>check</th><th>GPU</th><th>measured</th><th>threshold</th>"
                             "<th>verdict</th><th>reason</th></tr></thead><tbody>")
                for c in noted[:200]:
                    parts.append(f"<tr><td>{_e(c['check'])}</td><td>{'host' if c['gpu'] is None else index.get(c['gpu'], '?')}</td>"
                                 f"<td>{_e(c['measured'])}</td><td>{_e(c['threshold'])}</td>" + _cell(c["verdict"])
                                 + f"<td>{_e(c['reason'])}</td></tr>")
                parts.append("</tbody></table>")
            parts.append("</details>")
        parts.append("</section>")
    ready = [(o, rows) for o, rows in fleet.hosts() if o.ready]
    parts.append(f'<section id="fleet-ready"><h2>Ready hosts ({len(ready)})</h2>')
    if ready:
        parts.append(f"<details><summary>{len(ready)} ready host(s): one row each (every check is in the JSON report)</summary>"
                     '<table id="ready-table"><thead><tr><th>host</th><th>GPUs</th>'
                     + "".join(f"<th>{a}</th>" for a in AREAS) + "<th>worst figure</th></tr></thead><tbody>")
        for outcome, rows in ready:
            worst = _host_worst(rows)
            areas = _host_areas(rows)
            parts.append(f'<tr class="ready"><td>{_e(outcome.host)}</td><td>{sum(1 for r in rows if r.uuid)}</td>'
                         + "".join(_cell(areas[a]) for a in AREAS) + f"<td>{_e(_figure_text(*worst)) if worst else '-'}</td></tr>")
        parts.append("</tbody></table></details>")
    parts.append("</section></main></body></html>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- files


def write_reports(fleet: Fleet, *, json_path: str | None = None, junit_path: str | None = None, html_path: str | None = None) -> list[str]:
    """Write the asked-for files atomically; returns the paths written."""
    written = []
    if json_path:
        write_text_atomic(json_path, render_json(fleet))
        written.append(json_path)
    if junit_path:
        write_text_atomic(junit_path, render_junit(fleet))
        written.append(junit_path)
    if html_path:
        write_text_atomic(html_path, render_html(fleet))
        written.append(html_path)
    return written


def load_suite_report(text: str) -> dict[str, Any] | None:
    """A node's suite report from its text: None when it is not JSON of an object (reads as 'no
    report'); a report that cannot be read (too big, too deep, a 400-digit number, NaN) comes back
    as an UnreadableReport, which status_from_report and analyse turn into 'malformed report: why'.
    Never raises: the text is untrusted."""
    from gpuenv.fleet.suitereport import MAX_REPORT_BYTES, UnreadableReport, load_json

    if len(text) > MAX_REPORT_BYTES:
        return UnreadableReport(f"{len(text) / 2**20:.1f} MiB, over the {MAX_REPORT_BYTES // 2**20} MiB limit")
    try:
        data = load_json(text)
    except MalformedReport as err:
        return None if str(err).startswith("not JSON") else UnreadableReport(str(err))
    return data if isinstance(data, dict) else None


def read_suite_report(path: Any) -> dict[str, Any] | None:
    """A node's suite report file (a Slurm run folder's): None when there is none; bounded in size,
    never blocking on a FIFO, and never raising (see load_suite_report)."""
    from gpuenv.fleet.collected import read_bounded
    from gpuenv.fleet.suitereport import UnreadableReport, parse_report

    try:
        return parse_report(read_bounded(path))
    except MalformedReport as err:
        if not os.path.lexists(path) or str(err).startswith("not JSON"):
            return None  # no report, or half of one (the suite was stopped): the exit code says more
        return UnreadableReport(str(err))
