"""The fleet report's analysis: every host's suite report merged into one `Fleet`, which each
format then renders without computing anything of its own (terminal.py, jsonreport.py,
junitreport.py, htmlreport.py with plots.py).

`analyse()` turns the backends' `HostOutcome`s into that `Fleet` in one linear walk: each report
checked as untrusted input (suitereport.py), a row per GPU, each figure compared with the team's
baseline, the measured reference of its model and the fleet median of the same GPU model, hosts
with a GPU below the outlier floor marked "degraded" (reports that lie set aside first: an
impossible figure, or one machine under two names), then the counts, the GPU models, the
outliers and the hosts that are not ready, worst first. Pure: plain data in, plain data out.
Every step is linear in the number of hosts, the worst-first sort aside
(benchmarks/fleet_report.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

from gpuenv.fleet.outcome import (
    AUTH_REFUSED,
    CANCELLED,
    CPU_ONLY,
    DEGRADED,
    DUPLICATE,
    ENGINE_NOT_ANSWERING,
    FAILED,
    IMPLAUSIBLE,
    MALFORMED,
    MULTINODE_TEST,
    NO_DOCKER,
    NO_GPU_RUNTIME,
    NOT_READY,
    READY,
    TIMEOUT,
    UNREACHABLE,
    HostOutcome,
    fleet_ready,
    host_checks,
    suite_gpus,
)
from gpuenv.fleet.suitereport import CheckedReport, MalformedReport, check_report
from validate.judge.verdict import INFO, SKIP

#: Default outlier floor: a figure below this share of the fleet median of its GPU model makes its
#: host "degraded" (`--outlier-floor`, invoke.yaml `gpuenv.fleet.outlier_floor`).
OUTLIER_FLOOR = 0.9
#: The headline figures (suite check name -> datasheet metric), plotted first when present.
PLOTTED = {
    "matmul bf16 TFLOPS": ("bf16_tflops", "bf16 matmul TFLOPS"),
    "device memory GB/s": ("memory_bandwidth_gbs", "device memory bandwidth GB/s"),
}
#: Suite areas, one column each, in report order. A check's area comes from its test file
#: (validate/checks/test_NN_<area>.py), else from its name below; anything else is "other". A
#: check that moved between files keeps its column, so reports saved before and after the move
#: (validate/report/record.py, MOVED_TESTS) agree.
AREAS = (
    "environment",
    "visibility",
    "memory",
    "masking",
    "speed",
    "sustained",
    "multigpu",
    "other",
)
#: Check 1's health file (test_01_health.py) reports in "environment", where its rows were before.
AREA_OF_FILE = {**{area: area for area in AREAS if area != "other"}, "health": "environment"}
#: Checks whose column is not their file's: the NCCL all-reduce, moved from test_05_speed.py to
#: test_07_multigpu.py beside DDP, keeps its "speed" column (its figure is a bus bandwidth).
AREA_OF_FUNCTION = {"test_nccl_all_reduce": "speed"}
#: Report lines that come from no test file: the fleet's multi-node job (gpuenv/fleet/multinode.py).
AREA_OF_TEST = {MULTINODE_TEST: "multigpu"}
AREA_OF_CHECK = {
    "sustained load": "sustained",
    "clock events under load": "sustained",
    "pcie generation under load": "sustained",
}
#: Hosts that are not ready, worst first: proven broken, then cannot run, then unknown, then slow.
STATUS_ORDER = (
    NOT_READY,
    NO_GPU_RUNTIME,
    FAILED,
    TIMEOUT,
    MALFORMED,
    IMPLAUSIBLE,
    DUPLICATE,
    ENGINE_NOT_ANSWERING,
    NO_DOCKER,
    AUTH_REFUSED,
    UNREACHABLE,
    CANCELLED,
    CPU_ONLY,
    DEGRADED,
    READY,
)
STATUS_RANK = {status: n for n, status in enumerate(STATUS_ORDER)}
CPU_ONLY_REASON = (
    "no GPU shown, in a fleet whose other hosts show GPUs: a CPU-only host (not counted as ready; "
    "validate it with --expect-gpus N to fail it, or leave it out of the fleet)"
)
HOST_MODEL = (
    "host"  # baseline key of host-wide (CPU) figures, as validate/report/baseline.py writes it
)
_PEAK_METRIC = re.compile(r"^matmul (fp32|tf32|bf16|fp16) TFLOPS$")
_AREA = re.compile(r"test_\d+_([a-z_]+)\.py(?:::(\w+))?")
#: How many lines a host's list of failures (and a plot's caption) holds.
NAMED = 12
#: Verdicts of figures that are information only: shown, but kept out of the fleet median and
#: the outlier floor, so a noisy figure the suite never judges cannot turn a host degraded.
NOT_FLEET_JUDGED = frozenset({INFO, SKIP})


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
        return (
            self.median is not None and self.samples > 1 and self.value < self.floor * self.median
        )

    def of_median(self) -> float | None:
        return self.value / self.median if self.median and self.samples > 1 else None

    def reference(self) -> tuple[str, float] | None:
        """What the figure is compared with: the team's baseline, else a healthy unit's measured
        reference, else the fleet median. Never the datasheet: healthy power-capped parts sit far
        below it (the suite's own rule, validate/judge/speed.py)."""
        fleet = self.median if self.samples > 1 else None  # a median of one is the figure itself
        for name, ref in (
            ("baseline", self.baseline),
            ("reference", self.measured),
            ("fleet median", fleet),
        ):
            if ref:
                return name, ref
        return None

    def ratio(self) -> float | None:
        ref = self.reference()
        return self.value / ref[1] if ref else None

    def to_dict(self) -> dict[str, Any]:
        reference = self.reference()  # once: fleet.json has a million figures at 100,000 GPUs
        ratio = self.value / reference[1] if reference else None
        return {
            "value": self.value,
            "datasheet_peak": self.peak,
            "measured_reference": self.measured,
            "baseline": self.baseline,
            "fleet_median": self.median,
            "fraction_of_median": round(self.value / self.median, 4) if self.median else None,
            "outlier": self.outlier,
            "reference": (reference or ("none",))[0],
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
        index = self.index if self.index is not None else "?"
        return f"{index} {self.model or ''} {self.uuid[:12]}".replace("  ", " ")

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
    """The fleet after analysis: what every format renders, each part computed once by analyse()."""

    outcomes: list[HostOutcome]  # malformed reports and outliers reflected
    hosts: list[
        tuple[HostOutcome, list[Row]]
    ]  # each outcome and its rows, in the order the hosts came
    rows: list[Row]
    medians: dict[str, dict[str, float]]  # model -> check -> fleet median
    counts: dict[str, int]  # hosts per status; the headline statuses kept at zero
    models: dict[
        str, dict[str, Any]
    ]  # GPU model -> hosts, GPUs, hosts per status; most hosts first
    not_ready: list[tuple[HostOutcome, list[Row]]]  # worst first
    ready_hosts: list[tuple[HostOutcome, list[Row]]]  # in the order the hosts came
    outliers: list[tuple[Row, str, Figure]]
    baseline_applied: bool = False
    floor: float = OUTLIER_FLOOR

    @property
    def ready(self) -> bool:
        return fleet_ready(self.outcomes)


# ---------------------------------------------------------------- analysis (pure)


def check_area(check: dict[str, Any]) -> str:
    """'checks/test_05_speed.py::test_matmul_throughput[gpu0]' -> 'speed'; by name when the file
    does not say ('sustained load' -> 'sustained'); anything else -> 'other', never dropped."""
    match = _AREA.search(str(check.get("test") or ""))
    if match and match.group(2) in AREA_OF_FUNCTION:
        return AREA_OF_FUNCTION[match.group(2)]
    if match and match.group(1) in AREA_OF_FILE:
        return AREA_OF_FILE[match.group(1)]
    if check.get("test") in AREA_OF_TEST:
        return AREA_OF_TEST[check["test"]]
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


@functools.lru_cache(maxsize=4096)  # a fleet has a few dozen check names, over a million figures
def _peak_metric(check: str) -> str | None:
    """The datasheet metric (validate/judge/gpu_peaks.yaml) a check's figure is measured in, if
    any."""
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
        return dataclasses.replace(
            outcome, status=MALFORMED, reason=f"malformed report: {why}", report=None
        )
    return outcome if report is outcome.report else dataclasses.replace(outcome, report=report)


def _outlier_reason(rows: list[Row], floor: float) -> str:
    """'3 figure(s) below 90% of the fleet median; lowest: GPU 2 matmul bf16 TFLOPS 391.8 is 56% of
    the fleet median 699.5 of NVIDIA H100 80GB HBM3'."""
    found = [(row, name, fig) for row in rows for name, fig in row.outliers()]
    row, name, fig = min(found, key=lambda item: item[2].value / item[2].median)  # type: ignore[operator]
    return (
        f"{len(found)} figure(s) below {floor:.0%} of the fleet median; lowest: GPU {row.index} "
        f"{name} {fig.value:.1f} is {fig.value / fig.median:.0%} of the fleet median "
        f"{fig.median:.1f} of {row.model or 'this host type'}"
    )  # type: ignore[operator]


def analyse(
    outcomes: list[HostOutcome],
    peaks: Any = None,
    baseline: dict[str, dict[str, float]] | None = None,
    outlier_floor: float = OUTLIER_FLOOR,
) -> Fleet:
    """The Fleet: rows per GPU with figures against peak, baseline (per GPU model) and the fleet
    median, the statuses after outliers, the counts, the models and the hosts not ready, worst
    first.

    `peaks` is validate.judge.peaks' table (list of GpuPeaks) or None; `baseline` the models section
    of a gpuenv-validate-baseline/1 file. Both are plain data so this stays a pure function. A host
    whose checks all passed but which has a GPU below `outlier_floor` of its model's fleet median
    comes back DEGRADED (not ready), with the figure and the median in its reason.
    """
    from validate.judge.peaks import peaks_for

    checked = set_lies_aside([_checked(o) for o in outcomes], peaks or [])
    rows: list[Row] = []
    host_rows: list[list[Row]] = []
    for outcome in checked:
        mine = _host_rows(outcome)
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
            if fleet_judged(check):
                by_model.setdefault((model, check["check"]), []).append(float(value))
    medians: dict[str, dict[str, float]] = {}
    for (model, name), values in by_model.items():
        medians.setdefault(model, {})[name] = statistics.median(values)
    entries: dict[str | None, Any] = {}
    # (GPU model, check) -> (median, samples, peak, measured, baseline): the same for every figure
    # of that model, so worked out once (a fleet has a few dozen pairs, 100,000 GPUs half a
    # million figures)
    references: dict[tuple[str | None, str], tuple[Any, ...]] = {}
    for row in rows:
        for name, fig in row.figures.items():
            known = references.get((row.model, name))
            if known is None:
                if row.model not in entries:
                    entries[row.model] = (
                        peaks_for(row.model, peaks) if (peaks and row.model) else None
                    )
                known = references[row.model, name] = _references(
                    entries[row.model], row.model or HOST_MODEL, name, medians, by_model, baseline
                )
            fig.median, fig.samples, fig.peak, fig.measured, fig.baseline = known
    final = []
    gpu_fleet = any(row.uuid for row in rows)
    for outcome, mine in zip(checked, host_rows):
        final.append(_fleet_status(outcome, mine, gpu_fleet, outlier_floor))
    hosts = list(zip(final, host_rows))
    return Fleet(
        final,
        hosts,
        rows,
        medians,
        counts=_counts(final),
        models=_models(hosts),
        not_ready=_worst_first(hosts),
        ready_hosts=[(outcome, mine) for outcome, mine in hosts if outcome.ready],
        outliers=[(row, name, fig) for row in rows for name, fig in row.outliers()],
        baseline_applied=bool(baseline),
        floor=outlier_floor,
    )


def _references(
    entry: Any,
    model: str,
    name: str,
    medians: dict[str, dict[str, float]],
    by_model: dict[tuple[str, str], list[float]],
    baseline: dict[str, dict[str, float]] | None,
) -> tuple[float | None, int, float | None, float | None, float | None]:
    """What a figure `name` of a GPU `model` is compared with (its `entry` of the peaks table, or
    None): (fleet median, samples, datasheet peak, measured reference, baseline)."""
    metric = _peak_metric(name)
    peak = entry.peak(metric) if (entry and metric) else None
    measured = entry.reference_for(metric) if (entry and metric) else None
    ref = (baseline or {}).get(model, {}).get(name)
    return (
        medians.get(model, {}).get(name),
        len(by_model.get((model, name), ())),
        peak,
        measured.value if (measured and measured.confirmed) else None,  # measured like the suite
        float(ref) if isinstance(ref, (int, float)) and not isinstance(ref, bool) else None,
    )


def _host_rows(outcome: HostOutcome) -> list[Row]:
    """One host's rows: one per GPU, each with the host-wide checks and its own, or one row of
    the host-wide checks when the report has no GPU."""
    report = outcome.report or {}
    host_wide = list((report.get("host") or {}).get("checks") or [])
    gpus = suite_gpus(report)
    if not gpus:
        return [Row(outcome.host, outcome.status, outcome.reason, checks=host_wide)]
    return [
        Row(
            outcome.host,
            outcome.status,
            outcome.reason,
            uuid=uuid,
            index=section["gpu"].get("index"),
            model=section["gpu"].get("name"),
            checks=host_wide + list(section.get("checks") or []),
        )
        for uuid, section in gpus
    ]


def _fleet_status(
    outcome: HostOutcome, mine: list[Row], gpu_fleet: bool, outlier_floor: float
) -> HostOutcome:
    """The host's outcome once the fleet is seen: a ready host is CPU_ONLY in a GPU fleet when it
    has no GPU, and DEGRADED with a GPU below the floor of its model's median; its rows follow."""
    if outcome.status == READY and gpu_fleet and not any(row.uuid for row in mine):
        # a CPU-only host passes its own CPU-only checks: in a GPU fleet that is neither ready
        # nor a failure, but named
        outcome = dataclasses.replace(outcome, status=CPU_ONLY, reason=CPU_ONLY_REASON)
        for row in mine:
            row.status, row.reason = outcome.status, outcome.reason
    if outcome.status == READY and any(row.outliers() for row in mine):
        outcome = dataclasses.replace(
            outcome, status=DEGRADED, reason=_outlier_reason(mine, outlier_floor)
        )
        for row in mine:
            row.status, row.reason = outcome.status, outcome.reason
    return outcome


def fleet_judged(check: dict[str, Any]) -> bool:
    """Whether a figure meets the fleet median: not when the suite only reports it (an "info" row,
    or one the suite marked `fleet_judged: false`, validate/report/record.py)."""
    if check.get("fleet_judged") is False:
        return False
    return str(check.get("verdict") or "").strip().lower() not in NOT_FLEET_JUDGED


# ---------------------------------------------------------------- reports that lie

#: How far above its datasheet peak a figure may be before it is impossible. The datasheet peak is
#: computed at the rated boost clock; GPU Boost runs parts above it (consumer cards by 10-15%,
#: data-centre parts less), and a host-timed figure can be a few per cent high. 25% above covers
#: both; a figure beyond it was not measured on that GPU.
PEAK_MARGIN = 1.25
#: For a model the table does not know: how far above the fastest figure of the table. No GPU
#: generation has yet reached 2.5 times its predecessor's dense peak; 4 times leaves room for the
#: next ones while still refusing the orders-of-magnitude figures of a forged report.
UNKNOWN_MODEL_MARGIN = 4.0


@functools.lru_cache(maxsize=4096)
def figure_metric(check: str) -> str | None:
    """The datasheet metric a suite figure is bounded by, PyTorch's or TensorFlow's
    ('tensorflow matmul bf16 TFLOPS' -> 'bf16_tflops')."""
    return _peak_metric(check.removeprefix("tensorflow "))


def _ceiling(metric: str, model: str | None, peaks: list[Any]) -> tuple[float, str] | None:
    """(highest plausible figure, what it rests on) for this metric on this model, or None (no
    bound)."""
    from validate.judge.peaks import peaks_for

    entry = peaks_for(model, peaks) if model else None
    if entry is not None:
        peak = entry.peak(metric)
        return (
            (
                peak * PEAK_MARGIN,
                f"{PEAK_MARGIN:.2f} x the datasheet peak {peak:g} of {entry.model}",
            )
            if peak
            else None
        )
    known = [p.peak(metric) for p in peaks if p.peak(metric)]
    if not known:
        return None
    fastest = max(known)
    return (
        fastest * UNKNOWN_MODEL_MARGIN,
        f"{UNKNOWN_MODEL_MARGIN:g} x the fastest datasheet peak in the table ({fastest:g})",
    )


def impossible_figures(
    report: dict[str, Any],
    peaks: list[Any],
    ceilings: dict[tuple[str, str | None], tuple[float, str] | None] | None = None,
) -> list[str]:
    """Each figure of a checked report that no GPU of its model can reach (or that is negative).
    `ceilings`: the (metric, model) ceilings found so far for these peaks, filled as it goes (a
    fleet's GPUs share a few: set_lies_aside hands the same to every report)."""
    found: list[str] = []
    ceilings = {} if ceilings is None else ceilings
    for key, section in report.items():
        if (
            key in ("format", "host", "summary")
            or not isinstance(section, dict)
            or not isinstance(section.get("gpu"), dict)
        ):
            continue
        model = section["gpu"].get("name")
        for check in section.get("checks") or ():
            value = check.get("value")
            metric = None if value is None else figure_metric(check["check"])
            if metric is None:
                continue
            if (metric, model) not in ceilings:
                ceilings[metric, model] = _ceiling(metric, model, peaks)
            ceiling = ceilings[metric, model]
            if value >= 0 and (ceiling is None or value <= ceiling[0]):
                continue  # nearly every figure: no words for it
            label = f"GPU {section['gpu'].get('index')} {check['check']} {value:g}"
            if value < 0:
                found.append(f"{label} is negative")
            else:
                found.append(f"{label} is above {ceiling[0]:g}, {ceiling[1]}")  # type: ignore[index]
    return found


def _same(report: dict[str, Any]) -> str:
    """The whole report as one text: two reports are the same report when these are equal."""
    return json.dumps(report, sort_keys=True, default=str)


def _shape(report: dict[str, Any]) -> tuple[Any, ...]:
    """What two identical reports must share, cheap to take: its sections (GPU UUIDs) and its
    summary's seconds. Only reports that share it are compared whole: on an honest fleet, none."""
    summary = report.get("summary")
    return tuple(sorted(report)), summary.get("seconds") if isinstance(summary, dict) else None


def _gpu_uuids(report: dict[str, Any]) -> list[str]:
    return [
        k
        for k, v in report.items()
        if k not in ("format", "host", "summary")
        and isinstance(v, dict)
        and isinstance(v.get("gpu"), dict)
    ]


def duplicate_reasons(outcomes: list[HostOutcome]) -> dict[int, str]:
    """Position in `outcomes` -> why that host's report is a duplicate: the same report as another
    host's, or a GPU UUID another host also claims. Every host involved is named, none is
    trusted."""
    reasons: dict[int, str] = {}
    alike: dict[tuple[Any, ...], list[int]] = {}
    owners: dict[str, list[int]] = {}
    for n, outcome in enumerate(outcomes):
        if not isinstance(outcome.report, CheckedReport):
            continue
        alike.setdefault(_shape(outcome.report), []).append(n)
        for uuid in _gpu_uuids(outcome.report):
            owners.setdefault(uuid, []).append(n)
    same: dict[str, list[int]] = {}
    for (
        candidates
    ) in alike.values():  # identical reports have the same shape: only these are written out whole
        for n in candidates if len(candidates) > 1 else ():
            same.setdefault(_same(outcomes[n].report), []).append(n)  # type: ignore[arg-type]
    for group in same.values():
        for n in group if len(group) > 1 else ():
            others = ", ".join(outcomes[m].host for m in group if m != n)
            reasons[n] = f"the same report as {others}: one machine's report under several names"
    for uuid, group in owners.items():
        for n in group if len(set(group)) > 1 else ():
            if n in reasons:
                continue
            others = ", ".join(sorted({outcomes[m].host for m in group if m != n})) or "itself"
            reasons[n] = (
                f"GPU {uuid} is also in the report of {others}: one GPU cannot be in two hosts"
            )
    return reasons


def set_lies_aside(outcomes: list[HostOutcome], peaks: list[Any]) -> list[HostOutcome]:
    """The (checked) outcomes with every lying report set aside: DUPLICATE or IMPLAUSIBLE with the
    reason, and no report, so none of its figures reaches a median. A report can be well formed and
    still lie: two reports claiming 1e17 TFLOPS once read "ready" and pulled the median so high that
    the one honest host read "degraded"; a report copied under two host names counts its GPUs
    twice."""
    duplicates = duplicate_reasons(outcomes)
    ceilings: dict[tuple[str, str | None], tuple[float, str] | None] = {}
    screened: list[HostOutcome] = []
    for n, outcome in enumerate(outcomes):
        if n in duplicates:
            outcome = dataclasses.replace(
                outcome, status=DUPLICATE, reason=duplicates[n], report=None
            )
        elif isinstance(outcome.report, CheckedReport):
            impossible = impossible_figures(outcome.report, peaks, ceilings)
            if impossible:
                more = f" (and {len(impossible) - 1} more)" if len(impossible) > 1 else ""
                outcome = dataclasses.replace(
                    outcome,
                    status=IMPLAUSIBLE,
                    reason=f"implausible report: {impossible[0]}{more}",
                    report=None,
                )
        screened.append(outcome)
    return screened


def _counts(outcomes: list[HostOutcome]) -> dict[str, int]:
    """Hosts per status, ready first; zero counts of the headline ones kept."""
    counts = {
        s: 0 for s in (READY, NOT_READY, DEGRADED, UNREACHABLE, MALFORMED)
    }  # CPU_ONLY only when there is one
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return counts


def _models(hosts: list[tuple[HostOutcome, list[Row]]]) -> dict[str, dict[str, Any]]:
    """Per GPU model: hosts, GPUs, and hosts per status ("no GPU shown" for hosts that showed
    none)."""
    out: dict[str, dict[str, Any]] = {}
    for outcome, rows in hosts:
        names = {r.model or "unknown GPU" for r in rows if r.uuid} or {"no GPU shown"}
        for name in names:
            entry = out.setdefault(name, {"hosts": 0, "gpus": 0, "status": {}})
            entry["hosts"] += 1
            entry["gpus"] += sum(1 for r in rows if r.uuid and (r.model or "unknown GPU") == name)
            entry["status"][outcome.status] = entry["status"].get(outcome.status, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1]["hosts"], kv[0])))


def _worst_first(hosts: list[tuple[HostOutcome, list[Row]]]) -> list[tuple[HostOutcome, list[Row]]]:
    """Hosts that are not ready, worst first: by status, then failed checks, then lowest figure."""

    def key(item: tuple[HostOutcome, list[Row]]) -> tuple[Any, ...]:
        outcome, rows = item
        failed = sum(1 for c in host_checks(outcome) if c["verdict"] == "fail")
        lowest = min(
            (s for s in (r.lowest_of_median() for r in rows) if s is not None), default=1.0
        )
        return STATUS_RANK.get(outcome.status, len(STATUS_RANK)), -failed, lowest, outcome.host

    return sorted((item for item in hosts if not item[0].ready), key=key)


# ---------------------------------------------------------------- what every format says the same
# way


def figure_text(check: str, fig: Figure) -> str:
    """'matmul bf16 TFLOPS 400.0 (50% of reference) OUTLIER': a figure against its reference."""
    ref = fig.reference()
    text = f"{check} {fig.value:.1f}"
    if ref:
        text += f" ({fig.value / ref[1]:.0%} of {ref[0]})"
    return text + (" OUTLIER" if fig.outlier else "")


def host_worst(rows: list[Row]) -> tuple[str, Figure] | None:
    """The figure furthest below its reference over all GPUs of a host (outliers first)."""
    worst = [w for w in (r.worst_figure() for r in rows) if w]
    return min(worst, key=lambda item: (not item[1].outlier, item[1].ratio())) if worst else None


def host_areas(rows: list[Row]) -> dict[str, str]:
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


def failure_lines(outcome: HostOutcome, rows: list[Row], limit: int = NAMED) -> list[str]:
    """Why one host is not ready, in detail: its failed checks and its outlier figures."""
    out = []
    index = {r.uuid: r.index for r in rows if r.uuid}
    for check in host_checks(outcome):
        if check["verdict"] == "fail":
            where = f"GPU {index.get(check['gpu'], '?')}" if check["gpu"] else "host"
            out.append(f"fail: {check['check']} [{where}]: {check['reason'] or check['measured']}")
    for row in rows:
        for name, fig in row.outliers():
            out.append(
                f"outlier: GPU {row.index} {name} {fig.value:.1f} is "
                f"{fig.value / fig.median:.0%} of the fleet median "  # type: ignore[operator]
                f"{fig.median:.1f} ({row.model or 'this host type'})"
            )
    if len(out) > limit:
        out = out[:limit] + [f"... {len(out) - limit} more (see the JSON report)"]
    return out
