"""The fleet report as JUnit XML, for CI: one <testsuite> per host, one <testcase> per check (per
GPU), a failing testcase per outlier figure, an erroring one for a host whose run gave no report.
Pure; written as text (not a tree) so that it stays linear and light at 4,000 hosts."""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

from gpuenv.fleet.report.analysis import Fleet, check_area, suite_gpus
from gpuenv.fleet.suitereport import safe_text


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
    for outcome, rows in fleet.hosts:
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
