"""Fleet verdicts that resist lies: figures no GPU can reach, and one machine reported twice.

A node's report is untrusted input (suitereport.py). A report can be well formed and still lie:
two reports claiming 1e17 TFLOPS once read "ready" and pulled the fleet median so high that the
one honest host read "degraded". Such a report feeds nothing: its host is "implausible report",
not ready, and its figures stay out of every median. The same holds for a report copied under
two host names, or two hosts claiming one GPU: their figures would count twice, and at most one
of them is the machine it names.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Iterable

from gpuenv.fleet.outcome import HostOutcome
from gpuenv.fleet.suitereport import CheckedReport, MalformedReport, check_report

#: The status of a host whose report holds a figure no GPU of its model can reach.
IMPLAUSIBLE = "implausible report"
#: The status of hosts whose reports are the same report, or claim the same GPU.
DUPLICATE = "duplicate report"

#: How far above its datasheet peak a figure may be before it is impossible. The datasheet peak is
#: computed at the rated boost clock; GPU Boost runs parts above it (consumer cards by 10-15%,
#: data-centre parts less), and a host-timed figure can be a few per cent high. 25% above covers
#: both; a figure beyond it was not measured on that GPU.
PEAK_MARGIN = 1.25
#: For a model the table does not know: how far above the fastest figure of the table. No GPU
#: generation has yet reached 2.5 times its predecessor's dense peak; 4 times leaves room for the
#: next ones while still refusing the orders-of-magnitude figures of a forged report.
UNKNOWN_MODEL_MARGIN = 4.0

_MATMUL = re.compile(r"^(?:tensorflow )?matmul (fp32|tf32|bf16|fp16) TFLOPS$")
_BANDWIDTH = {"device memory GB/s": "memory_bandwidth_gbs"}


def figure_metric(check: str) -> str | None:
    """The datasheet metric a suite figure is bounded by ('matmul bf16 TFLOPS' -> 'bf16_tflops')."""
    match = _MATMUL.match(check)
    return f"{match.group(1)}_tflops" if match else _BANDWIDTH.get(check)


def _ceiling(metric: str, model: str | None, peaks: list[Any]) -> tuple[float, str] | None:
    """(highest plausible figure, what it rests on) for this metric on this model, or None (no bound)."""
    from validate.judge.peaks import peaks_for

    entry = peaks_for(model, peaks) if model else None
    if entry is not None:
        peak = entry.peak(metric)
        return (peak * PEAK_MARGIN, f"{PEAK_MARGIN:.2f} x the datasheet peak {peak:g} of {entry.model}") if peak else None
    known = [p.peak(metric) for p in peaks if p.peak(metric)]
    if not known:
        return None
    fastest = max(known)
    return fastest * UNKNOWN_MODEL_MARGIN, f"{UNKNOWN_MODEL_MARGIN:g} x the fastest datasheet peak in the table ({fastest:g})"


def impossible_figures(report: dict[str, Any], peaks: list[Any]) -> list[str]:
    """Each figure of a checked report that no GPU of its model can reach (or that is negative)."""
    found: list[str] = []
    for key, section in report.items():
        if key in ("format", "host", "summary") or not isinstance(section, dict) or not isinstance(section.get("gpu"), dict):
            continue
        model = section["gpu"].get("name")
        for check in section.get("checks") or ():
            value, metric = check.get("value"), figure_metric(check["check"])
            if value is None or metric is None:
                continue
            label = f"GPU {section['gpu'].get('index')} {check['check']} {value:g}"
            if value < 0:
                found.append(f"{label} is negative")
                continue
            ceiling = _ceiling(metric, model, peaks)
            if ceiling is not None and value > ceiling[0]:
                found.append(f"{label} is above {ceiling[0]:g}, {ceiling[1]}")
    return found


def _same(report: dict[str, Any]) -> str:
    return json.dumps(report, sort_keys=True, default=str)


def _gpu_uuids(report: dict[str, Any]) -> list[str]:
    return [k for k, v in report.items() if k not in ("format", "host", "summary") and isinstance(v, dict) and isinstance(v.get("gpu"), dict)]


def duplicate_reasons(outcomes: list[HostOutcome]) -> dict[int, str]:
    """Position in `outcomes` -> why that host's report is a duplicate: the same report as another
    host's, or a GPU UUID another host also claims. Every host involved is named, none is trusted."""
    reasons: dict[int, str] = {}
    same: dict[str, list[int]] = {}
    owners: dict[str, list[int]] = {}
    for n, outcome in enumerate(outcomes):
        if not isinstance(outcome.report, CheckedReport):
            continue
        same.setdefault(_same(outcome.report), []).append(n)
        for uuid in _gpu_uuids(outcome.report):
            owners.setdefault(uuid, []).append(n)
    for group in same.values():
        for n in group if len(group) > 1 else ():
            others = ", ".join(outcomes[m].host for m in group if m != n)
            reasons[n] = f"the same report as {others}: one machine's report under several names"
    for uuid, group in owners.items():
        for n in group if len(set(group)) > 1 else ():
            if n in reasons:
                continue
            others = ", ".join(sorted({outcomes[m].host for m in group if m != n})) or "itself"
            reasons[n] = f"GPU {uuid} is also in the report of {others}: one GPU cannot be in two hosts"
    return reasons


def _checked(outcome: HostOutcome) -> HostOutcome:
    """The outcome with its report checked; one that cannot be read is left for the analysis to call malformed."""
    if outcome.report is None:
        return outcome
    try:
        report = check_report(outcome.report)
    except (MalformedReport, RecursionError):
        return outcome
    return outcome if report is outcome.report else dataclasses.replace(outcome, report=report)


def screen(outcomes: Iterable[HostOutcome], peaks: list[Any] | None) -> list[HostOutcome]:
    """The outcomes with every lying report set aside: DUPLICATE or IMPLAUSIBLE with the reason, and
    no report (so none of its figures reaches a median)."""
    outcomes = [_checked(o) for o in outcomes]
    duplicates = duplicate_reasons(outcomes)
    screened: list[HostOutcome] = []
    for n, outcome in enumerate(outcomes):
        if n in duplicates:
            outcome = dataclasses.replace(outcome, status=DUPLICATE, reason=duplicates[n], report=None)
        elif isinstance(outcome.report, CheckedReport):
            impossible = impossible_figures(outcome.report, peaks or [])
            if impossible:
                more = f" (and {len(impossible) - 1} more)" if len(impossible) > 1 else ""
                outcome = dataclasses.replace(outcome, status=IMPLAUSIBLE, reason=f"implausible report: {impossible[0]}{more}", report=None)
        screened.append(outcome)
    return screened
