"""The fleet report as JUnit XML, for CI: one <testsuite> per host, one <testcase> per check (per
GPU), a failing testcase per outlier figure, an erroring one for a host whose run gave no report.
Pure; written as text (not a tree) so that it stays linear and light at 4,000 hosts."""

from __future__ import annotations

import re
from typing import Any, Iterator
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

from gpuenv.fleet.outcome import HostOutcome
from gpuenv.fleet.report.analysis import Fleet, Row, check_area, suite_gpus
from gpuenv.fleet.suitereport import MAX_TEXT, safe_text

#: What XML text or an attribute cannot carry as it is (control characters aside, which
#: isprintable() finds): 1.1 million checks at 100,000 GPUs mostly have none.
_XML_SPECIAL = re.compile('[&<>"]')


def _x(text: Any) -> str:
    if (
        type(text) is str
        and len(text) <= MAX_TEXT
        and text.isprintable()
        and not _XML_SPECIAL.search(text)
    ):
        return (
            text  # the common case, as xml_escape(safe_text(...)) would give it, without the calls
        )
    return xml_escape(safe_text(text, newlines=True))


def _xa(text: Any) -> str:
    if (
        type(text) is str
        and len(text) <= MAX_TEXT
        and text.isprintable()
        and not _XML_SPECIAL.search(text)
    ):
        return f'"{text}"'
    return quoteattr(safe_text(text, newlines=True))


def render_junit(fleet: Fleet) -> str:
    """JUnit XML: one <testsuite> per host, one <testcase> per check (per GPU), a failing testcase
    per outlier figure; a host whose run never produced a report gets one erroring testcase that
    says why. Written as text (not a tree) so that it stays linear and light at 4,000 hosts."""
    return "".join(iter_junit(fleet))


def iter_junit(fleet: Fleet) -> Iterator[str]:
    """render_junit's text in pieces, one host at a time (write_reports writes them as they come).
    The totals go on the root element, which XML puts first: a first pass counts them, and
    keeps each host's counts for its <testsuite>."""
    counts = [_counts(outcome, rows) for outcome, rows in fleet.hosts]
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for host_counts in counts:
        for key, value in host_counts.items():
            totals[key] += value
    attrs = " ".join(f'{k}="{v}"' for k, v in totals.items())
    yield (
        '<?xml version="1.0" encoding="utf-8"?>\n<testsuites name="gpuenv fleet validation" '
        f"{attrs}>\n"
    )
    areas: dict[tuple[str, str], str] = {}  # (test, check) -> area: a few dozen distinct pairs
    thresholds: dict[str, str] = {}  # threshold -> as XML text ("": _x must see it whole)
    for (outcome, rows), host_counts in zip(fleet.hosts, counts):
        yield _suite(fleet, outcome, rows, areas, host_counts, thresholds)
    yield "</testsuites>\n"


def _check_lists(outcome: HostOutcome) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """(GPU UUID or None, checks) of each section of a host's report, the host-wide one first."""
    report = outcome.report or {}
    lists: list[tuple[str | None, list[dict[str, Any]]]] = [
        (None, (report.get("host") or {}).get("checks") or [])
    ]
    lists += [(uuid, section.get("checks") or []) for uuid, section in suite_gpus(report)]
    return lists


def _counts(outcome: HostOutcome, rows: list[Row]) -> dict[str, int]:
    """A host's <testsuite> counts, as _suite writes its cases."""
    checks = failed = skipped = 0
    for _, section in _check_lists(outcome):
        checks += len(section)
        for check in section:
            verdict = check["verdict"]
            if verdict == "fail":
                failed += 1
            elif verdict == "skip":
                skipped += 1
    failures = failed + sum(len(row.outliers()) for row in rows)
    error = int(not outcome.ready and not failures)
    return {
        "tests": checks + failures - failed + error,
        "failures": failures,
        "errors": error,
        "skipped": skipped,
    }


def _suite(
    fleet: Fleet,
    outcome: HostOutcome,
    rows: list[Row],
    areas: dict[tuple[str, str], str],
    counts: dict[str, int],
    thresholds: dict[str, str],
) -> str:
    """One host's <testsuite>: a <testcase> per check, a failing one per outlier figure, an
    erroring one when the run gave nothing else that fails (its `counts`, _counts')."""
    cases: list[str] = []
    host = safe_text(outcome.host)
    classnames: dict[str, str] = {}
    times: dict[float | None, str] = {}  # a check's seconds take a handful of values
    for uuid, section in _check_lists(outcome):
        where = uuid or "host"
        for check in section:
            name, verdict = check["check"], check["verdict"]
            key = (check["test"], name)
            area = areas.get(key) or areas.setdefault(key, check_area(check))
            classname = classnames.get(area) or classnames.setdefault(area, _xa(host + "." + area))
            seconds = check["seconds"]
            time = times.get(seconds) or times.setdefault(seconds, f'time="{seconds or 0:.3f}"')
            if verdict not in ("fail", "skip"):
                measured, threshold = check["measured"], check["threshold"]
                plain = name + where + measured + verdict
                shown = thresholds.get(threshold)
                if shown is None:  # a few dozen thresholds ('>= 60% of peak'), escaped once each
                    shown = thresholds[threshold] = (
                        xml_escape(threshold) if threshold.isprintable() else ""
                    )
                if (
                    plain.isprintable()
                    and not _XML_SPECIAL.search(plain)
                    and (shown or not threshold)
                    and len(name) + len(where) + 3 <= MAX_TEXT
                    and len(measured) + len(threshold) + len(verdict) + 6 <= MAX_TEXT
                ):  # nearly every passing check: what _x and _xa would give, without their calls
                    cases.append(
                        f'    <testcase classname={classname} name="{name} [{where}]" {time}>'
                        f"<system-out>{measured} | {shown} | {verdict}</system-out>"
                        "</testcase>\n"
                    )
                    continue
            head = (
                f"    <testcase classname={classname} name={_xa(name + ' [' + where + ']')} {time}>"
            )
            if verdict == "fail":
                cases.append(
                    f"{head}<failure "
                    f"message={_xa(check['reason'] or check['measured'] or 'failed')}/>"
                    "</testcase>\n"
                )
            elif verdict == "skip":
                cases.append(
                    f"{head}<skipped message={_xa(check['reason'] or 'skipped')}/></testcase>\n"
                )
            else:
                cases.append(
                    f"{head}<system-out>"
                    f"{_x(check['measured'] + ' | ' + check['threshold'] + ' | ' + verdict)}"
                    "</system-out></testcase>\n"
                )
    for row in rows:
        for name, fig in row.outliers():
            message = (
                f"{fig.value:.1f} is {fig.value / fig.median:.0%} of the fleet median "  # type: ignore[operator]
                f"{fig.median:.1f} of "
                f"{row.model or 'this host type'} (floor {fleet.floor:.0%})"
            )
            cases.append(
                f"    <testcase classname={_xa(host + '.fleet')} "
                f"name={_xa('outlier: ' + name + ' [' + str(row.uuid or 'host') + ']')} "
                f'time="0.000"><failure message={_xa(message)}/></testcase>\n'
            )
    if counts["errors"]:
        cases.append(
            f'    <testcase classname={_xa(host + ".run")} name="validation run" '
            f'time="{outcome.seconds or 0:.3f}">'
            f"<error message={_xa(outcome.status + ': ' + outcome.reason)} "
            f"type={_xa(outcome.status)}/></testcase>\n"
        )
    props = f'<property name="status" value={_xa(outcome.status)}/>'
    if outcome.reason:
        props += f'<property name="reason" value={_xa(outcome.reason)}/>'
    attrs = " ".join(f'{k}="{v}"' for k, v in counts.items())
    return (
        f"  <testsuite name={_xa(host)} hostname={_xa(host)} {attrs} "
        f'time="{outcome.seconds or 0:.3f}">\n'
        f"    <properties>{props}</properties>\n" + "".join(cases) + "  </testsuite>\n"
    )
