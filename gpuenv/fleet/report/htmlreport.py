"""The fleet report as one self-contained HTML page (inline CSS and SVG, no script, no network
asset), in the order a person reads it at any fleet size. Pure: the page's text from the Fleet;
its figures are plots.py's."""

from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from typing import Any

from gpuenv.fleet.outcome import DEGRADED, READY, HostOutcome
from gpuenv.fleet.report import plots
from gpuenv.fleet.report.analysis import (
    NAMED,
    PLOTTED,
    Fleet,
    Row,
    failure_lines,
    figure_text,
    host_checks,
    host_worst,
    summarise_verdicts,
)
from gpuenv.fleet.suitereport import safe_text

#: Plots per page: the GPU models with the most hosts.
MAX_MODELS = 6
#: Hosts that are not ready whose details are shown open (the worst); the others' are a click
#: away. A browser lays out only what is open: 855 open hosts of 8 GPUs took Chromium 7 s.
OPEN_DETAILS = 20
#: Hosts that are not ready given a detailed section; past it, the table of the hosts that are
#: not ready still names each one with its reason, and the JSON report has every check.
MAX_DETAILS = 2_000


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em;color:#212121;
max-width:1400px}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.6em}
.summary{font-size:1.1em;margin:.5em 0 1em}
table{border-collapse:collapse;margin-bottom:1em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#eceff1} .ready{background:#e8f5e9} .bad{background:#ffebee}
.skip,.muted{color:#757575}
.pass{color:#2e7d32} .fail{color:#c62828;font-weight:bold} .outlier{color:#c62828;font-weight:bold}
.st-ready{color:#2e7d32;font-weight:bold} .st-bad{color:#c62828;font-weight:bold}
.st-degraded{color:#ef6c00;font-weight:bold}
figure{margin:0 0 2em} svg{max-width:100%;height:auto} details{margin:.4em 0}
summary{cursor:pointer}
ul.why{margin:.2em 0 .2em 1.2em;padding:0}
"""


def _cell(text: str) -> str:
    cls = (
        "fail"
        if text.startswith("FAIL") or text == "fail"
        else "skip"
        if text in ("skip", "-")
        else "pass"
        if text.startswith("pass")
        else ""
    )
    return f'<td class="{cls}">{html.escape(text)}</td>'


def _e(text: Any) -> str:
    return html.escape(safe_text(text, newlines=True))


def _status_class(status: str) -> str:
    return "st-ready" if status == READY else "st-degraded" if status == DEGRADED else "st-bad"


def _summary_html(fleet: Fleet, title: str, when: str) -> list[str]:
    counts = fleet.counts
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f'<section id="fleet-summary"><p class="summary"><b>{counts[READY]} of '
        f"{len(fleet.outcomes)}</b> host(s) ready"
        + (" &mdash; baseline applied per GPU model" if fleet.baseline_applied else "")
        + f"; a GPU below {fleet.floor:.0%} of its model's fleet median makes its host degraded. "
        f"Generated {html.escape(when)}.</p>",
        '<table id="fleet-counts"><thead><tr>'
        + "".join(f"<th>{html.escape(s)}</th>" for s in counts)
        + "</tr></thead><tbody><tr>"
        + "".join(
            f'<td class="{_status_class(s) if n else "muted"}">{n}</td>' for s, n in counts.items()
        )
        + "</tr></tbody></table>",
    ]
    statuses = list(counts)
    parts.append(
        '<table id="fleet-models"><thead><tr><th>GPU model</th><th>hosts</th><th>GPUs</th>'
        + "".join(f"<th>{html.escape(s)}</th>" for s in statuses)
        + "</tr></thead><tbody>"
    )
    for model, entry in fleet.models.items():
        parts.append(
            f"<tr><td>{_e(model)}</td><td>{entry['hosts']}</td><td>{entry['gpus']}</td>"
            + "".join(
                f'<td class="{_status_class(s) if entry["status"].get(s) else "muted"}">'
                f"{entry['status'].get(s, 0)}</td>"
                for s in statuses
            )
            + "</tr>"
        )
    parts.append("</tbody></table></section>")
    return parts


def _not_ready_html(fleet: Fleet, bad: list[tuple[HostOutcome, list[Row]]]) -> list[str]:
    parts = [f'<section id="fleet-not-ready"><h2>Not ready, worst first ({len(bad)})</h2>']
    if not bad:
        return parts + ['<p class="st-ready">Every host is ready.</p></section>']
    parts.append(
        '<table id="not-ready-table"><thead><tr><th>#</th><th>host</th><th>status</th>'
        "<th>reason</th></tr></thead><tbody>"
    )
    for n, (outcome, rows) in enumerate(bad, start=1):
        why = failure_lines(outcome, rows, limit=3)
        detail = (
            ('<ul class="why">' + "".join(f"<li>{_e(w)}</li>" for w in why) + "</ul>")
            if why
            else ""
        )
        parts.append(
            '<tr class="bad" '
            f'data-status="{html.escape(outcome.status)}"><td>{n}</td><td>{_e(outcome.host)}</td>'
            f'<td class="{_status_class(outcome.status)}">{html.escape(outcome.status)}</td>'
            f"<td>{_e(outcome.reason or 'see its report')}{detail}</td></tr>"
        )
    parts.append("</tbody></table></section>")
    return parts


def _not_plotted_note(every: list[str], drawn: list[str], without: list[str]) -> str | None:
    """The models left out of the plots and why, counted from what was really drawn."""
    beyond = [m for m in every if m not in drawn and m not in without]
    if not beyond and not without:
        return None
    why = []
    if without:
        why.append(
            f"{len(without)} with no figure to plot: "
            f"{', '.join(without[:NAMED])}{' ...' if len(without) > NAMED else ''}"
        )
    if beyond:
        why.append(
            f"{len(beyond)} beyond the {MAX_MODELS} with the most hosts: "
            f"{', '.join(beyond[:NAMED])}{' ...' if len(beyond) > NAMED else ''}"
        )
    return f"{len(drawn)} of {len(every)} GPU model(s) plotted; not plotted: " + "; ".join(why)


def _plotted_models(fleet: Fleet) -> tuple[list[str], list[str]]:
    """(every GPU model, the ones the page plots)."""
    every = [m for m in fleet.models if m != "no GPU shown"]
    return every, every[:MAX_MODELS]


def plots_wanted(fleet: Fleet) -> list[tuple[str, str]]:
    """(plot, model) of every plot the page draws, for plots.draw_in_background."""
    return [
        (plot.__name__, model)
        for model in _plotted_models(fleet)[1]
        for plot in (plots.plot_distributions, plots.plot_heatmap)
    ]


def _plots_html(fleet: Fleet, predrawn: dict[tuple[str, str], Any] | None = None) -> list[str]:
    every, models = _plotted_models(fleet)
    parts = [
        '<section id="fleet-distributions"><h2>Figures per GPU model, against the reference and '
        "the fleet median</h2>"
    ]
    drawn: list[str] = []
    without: list[str] = []
    for model in models:
        svg = _drawn(plots.plot_distributions, fleet, model, parts, predrawn)
        if not svg:
            without.append(model)
            continue
        drawn.append(model)
        slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
        named = sorted(
            ((r, c, f) for r, c, f in fleet.outliers if (r.model or "unknown GPU") == model),
            key=lambda item: item[2].value / item[2].median,
        )  # type: ignore[operator]
        caption = (
            (
                f"{len(named)} outlier(s) below {fleet.floor:.0%} of the fleet median: "
                + "; ".join(
                    f"{_e(r.host)} GPU {r.index} {_e(c)} {f.value:.1f} ({f.value / f.median:.0%})"
                    for r, c, f in named[:NAMED]
                )  # type: ignore[operator]
                + (f"; and {len(named) - NAMED} more" if len(named) > NAMED else "")
            )
            if named
            else "No outlier."
        )
        parts.append(
            f'<figure id="dist-{slug}" class="plot">{svg}<figcaption '
            f'class="{"outlier" if named else ""}">{caption}</figcaption></figure>'
        )
    for (
        check
    ) in PLOTTED:  # the headline figures missing from every GPU are said so, not silently left out
        if not any(check in r.figures for r in fleet.rows if r.uuid):
            parts.append(
                f'<p class="noplot">No GPU in this fleet reported {html.escape(check)}.</p>'
            )
    note = _not_plotted_note(every, drawn, without)
    if note:
        parts.append(f'<p class="noplot">{_e(note)}</p>')
    if not drawn:
        parts.append('<p class="noplot">No GPU in this fleet reported a figure to plot.</p>')
    parts.append("</section>")
    heatmaps = []
    for model in models:
        svg = _drawn(plots.plot_heatmap, fleet, model, heatmaps, predrawn)
        if svg:
            slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
            heatmaps.append(
                f'<figure id="heat-{slug}" class="plot">{svg}<figcaption>Red: below '
                f"{fleet.floor:.0%} of the fleet median "
                f"of {_e(model)}; grey: no figure.</figcaption></figure>"
            )
    if heatmaps:  # a heading with nothing under it says nothing: the section is left out
        parts += [
            '<section id="fleet-heatmap"><h2>Host &times; GPU: lowest figure against the fleet '
            "median</h2>",
            *heatmaps,
            "</section>",
        ]
    return parts


def _drawn(
    plot: Any,
    fleet: Fleet,
    model: str,
    parts: list[str],
    predrawn: dict[tuple[str, str], Any] | None = None,
) -> str | None:
    """A plot, or None with a line on the page saying why it could not be drawn: the page and the
    other formats are still written (the figures come from reports we do not control). Taken
    from `predrawn` (plots.draw_all's answer) when it holds it, else drawn here."""
    done = (predrawn or {}).get((plot.__name__, model))
    if done is None:
        try:
            return plot(fleet, model)
        except Exception as err:  # noqa: BLE001 - a diagnostic never crashes; the reason is shown
            done = ("error", type(err).__name__, str(err)[:300])
    if done[0] == "svg":
        return done[1]
    parts.append(
        f'<p class="noplot">{html.escape(plot.__name__)} of {_e(model)} could not be drawn: '
        f"{_e(done[1])}: {_e(done[2])}</p>"
    )
    return None


def _gpu_rows_html(rows: list[Row]) -> list[str]:
    """A host's GPUs, one row each: the areas of the suite that did not simply pass (an area with
    no check is left out) and the worst figure. Three cells, not one per area: at 12,500 hosts
    the details of 855 hosts held 77,000 cells for a browser to build."""
    parts = [
        "<table><thead><tr><th>GPU</th><th>areas not passed</th><th>worst "
        "figure</th></tr></thead><tbody>"
    ]
    for row in rows:
        worst = row.worst_figure()
        verdicts = row.area_verdicts() if row.checks else {}
        notable = [f"{area}: {v}" for area, v in verdicts.items() if v not in ("pass", "-")]
        worst_html = _e(figure_text(*worst)) if worst else "-"
        if worst and worst[1].outlier:
            worst_html = f'<span class="outlier">{worst_html}</span>'
        if not row.checks:
            areas = '<td class="skip">-</td>'
        elif not notable:
            areas = '<td class="pass">pass</td>'
        else:
            failed = any(v.startswith("FAIL") for v in verdicts.values())
            areas = f'<td class="{"fail" if failed else ""}">{_e("; ".join(notable))}</td>'
        parts.append(f"<tr><td>{_e(row.gpu_label)}</td>{areas}<td>{worst_html}</td></tr>")
    parts.append("</tbody></table>")
    return parts


def _details_html(bad: list[tuple[HostOutcome, list[Row]]]) -> list[str]:
    """Each host that is not ready in detail (its GPUs' verdicts and worst figures, its failed
    checks), the worst OPEN_DETAILS open, the rest collapsed, at most MAX_DETAILS of them."""
    shown = bad[:MAX_DETAILS]
    parts = [
        '<section id="fleet-not-ready-details"><h2>Hosts that are not ready, in detail '
        f"({len(bad)})</h2>"
    ]
    if len(bad) > OPEN_DETAILS:
        parts.append(
            f'<p class="muted">The worst {OPEN_DETAILS} are open; click a host for the others.</p>'
        )
    for n, (outcome, rows) in enumerate(shown):
        parts.append(
            f'<details class="host"{" open" if n < OPEN_DETAILS else ""}>'
            f"<summary>{_e(outcome.host)}: "
            f'<span class="{_status_class(outcome.status)}">{html.escape(outcome.status)}</span>'
            "</summary>"
        )
        parts.append(f"<p>{_e(outcome.reason or 'no reason given')}</p>")
        if any(r.uuid or r.checks for r in rows):
            parts += _gpu_rows_html(rows)
        index = {r.uuid: r.index for r in rows if r.uuid}
        noted = [c for c in host_checks(outcome) if c["verdict"] in ("fail", "warn")]
        if noted:
            parts.append(
                "<table><thead><tr><th>check</th><th>GPU</th><th>measured</th><th>threshold</th>"
                "<th>verdict</th><th>reason</th></tr></thead><tbody>"
            )
            for c in noted[:200]:
                parts.append(
                    f"<tr><td>{_e(c['check'])}</td>"
                    f"<td>{'host' if c['gpu'] is None else index.get(c['gpu'], '?')}</td>"
                    f"<td>{_e(c['measured'])}</td><td>{_e(c['threshold'])}</td>"
                    + _cell(c["verdict"])
                    + f"<td>{_e(c['reason'])}</td></tr>"
                )
            parts.append("</tbody></table>")
        parts.append("</details>")
    if len(bad) > len(shown):
        parts.append(
            f'<p class="noplot">{len(bad) - len(shown)} more host(s) that are not ready: each is '
            "named with its "
            "reason in the table above, and every check is in the JSON report.</p>"
        )
    parts.append("</section>")
    return parts


def _ready_html(fleet: Fleet) -> list[str]:
    """The ready hosts as one short row each, sorted by name so that one is found (the browser's
    find opens the collapsed list): GPUs, the verdicts of all its checks, its worst figure. Their
    distributions are the plots above and their counts the summary; every check is in the JSON."""
    ready = sorted(fleet.ready_hosts, key=lambda item: item[0].host)
    parts = [f'<section id="fleet-ready"><h2>Ready hosts ({len(ready)})</h2>']
    if ready:
        parts.append(
            f"<details><summary>{len(ready)} ready host(s), by name: one row each (every check "
            "is in the JSON report)"
            '</summary><table id="ready-table"><thead><tr><th>host</th><th>GPUs</th><th>checks</th>'
            "<th>worst figure</th></tr></thead><tbody>"
        )
        for outcome, rows in ready:
            worst = host_worst(rows)
            verdicts = summarise_verdicts(c["verdict"] for c in host_checks(outcome))
            parts.append(
                f'<tr class="ready"><td>{_e(outcome.host)}</td><td>{_gpus_text(rows)}</td>'
                f"{_cell(verdicts)}"
                f"<td>{_e(figure_text(*worst)) if worst else '-'}</td></tr>"
            )
        parts.append("</tbody></table></details>")
    parts.append("</section>")
    return parts


def _gpus_text(rows: list[Row]) -> str:
    """'8' for a host of one GPU model, '4 A, 4 B' for a mixed one (the model is in the summary)."""
    models: dict[str, int] = {}
    for row in rows:
        if row.uuid:
            models[row.model or "unknown GPU"] = models.get(row.model or "unknown GPU", 0) + 1
    if len(models) <= 1:
        return str(sum(models.values()))
    return _e(", ".join(f"{n} {model}" for model, n in models.items()))


def render_html(
    fleet: Fleet,
    title: str = "gpuenv fleet validation",
    generated: str | None = None,
    drawn: dict[tuple[str, str], Any] | None = None,
) -> str:
    """One self-contained page (inline CSS and SVG, no script, no network asset), in the order a
    person reads it at any fleet size: the summary and the hosts that are not ready (worst first,
    with reasons); the distribution of each figure per GPU model; a host x GPU heatmap; the details
    of each host that is not ready (the worst open); then the ready hosts, one short row each, by
    name, collapsed. Its size grows with the hosts that are not ready, and by one short row per
    ready host: 100,000 GPUs make a page of a few MB that a browser opens at once. `drawn`: the
    plots drawn already (plots.draw_all's answer, for plots_wanted); the others are drawn here."""
    when = generated or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    counts = fleet.counts
    bad = fleet.not_ready
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f'<main id="fleet-report" data-hosts="{len(fleet.outcomes)}" data-ready="{counts[READY]}" '
        f'data-not-ready="{len(bad)}" data-outliers="{len(fleet.outliers)}">',
    ]
    parts += _summary_html(fleet, title, when)
    parts += _not_ready_html(fleet, bad)
    parts += _plots_html(fleet, drawn)
    if bad:
        parts += _details_html(bad)
    parts += _ready_html(fleet)
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"
