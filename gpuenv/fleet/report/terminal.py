"""The fleet report for the terminal: the table a fleet run prints at its end (render_table) and
the live view while it runs (render_live). Pure: text (or a rich Table) from the Fleet and the
run's progress. Every text from a node is made safe for the terminal (no raw escape sequences)."""

from __future__ import annotations

from typing import Any

from gpuenv.fleet.outcome import MULTINODE_HOST, MULTINODE_TEST, NOT_READY, READY
from gpuenv.fleet.report.analysis import (
    AREAS,
    STATUS_RANK,
    Fleet,
    failure_lines,
    figure_text,
    host_areas,
    host_worst,
)
from gpuenv.fleet.suitereport import safe_text
from validate.report.tables import format_table


def _count_words(counts: dict[str, int]) -> str:
    return ", ".join(
        f"{n} {status}" for status, n in counts.items() if n or status in (READY, NOT_READY)
    )


def _summary_lines(fleet: Fleet) -> list[str]:
    counts = fleet.counts
    lines = [
        f"{counts[READY]} of {len(fleet.outcomes)} host(s) ready"
        + (", baseline applied per GPU model" if fleet.baseline_applied else "")
        + f" ({_count_words(counts)}); outlier floor {fleet.floor:.0%} of the fleet median"
    ]
    for model, entry in fleet.models.items():
        status = ", ".join(
            f"{n} {s}"
            for s, n in sorted(entry["status"].items(), key=lambda kv: STATUS_RANK.get(kv[0], 99))
        )
        lines.append(
            f"  {safe_text(model)}: {entry['hosts']} host(s), {entry['gpus']} GPU(s): {status}"
        )
    return lines


def render_table(fleet: Fleet, verbose: bool = False) -> str:
    """For the terminal, what matters first: the summary (counts, per GPU model), then the hosts
    that are not ready, worst first, each with its reason and failed checks or outlier figures,
    then their table per GPU. Ready hosts are one line each with `verbose`, else one count.
    Every text from a node is made safe for the terminal (no raw escape sequences)."""
    out = _summary_lines(fleet)
    bad = fleet.not_ready
    if bad:
        out += ["", f"not ready, worst first ({len(bad)}):"]
        for outcome, rows in bad:
            out.append(
                f"{outcome.status}: {safe_text(outcome.host)}: "
                f"{safe_text(outcome.reason or 'see its report')}"
            )
            out += ["  " + safe_text(line) for line in failure_lines(outcome, rows)]
        headers = ("host", "GPU", "status", *AREAS, "worst figure")
        lines = []
        for outcome, rows in bad:
            for row in rows:
                worst = row.worst_figure()
                verdicts = row.area_verdicts() if row.checks else {a: "-" for a in AREAS}
                lines.append(
                    (
                        safe_text(row.host),
                        safe_text(row.gpu_label),
                        row.status,
                        *(verdicts[a] for a in AREAS),
                        safe_text(figure_text(*worst)) if worst else "-",
                    )
                )
        out += ["", format_table(headers, lines, max_width=80)]
    ready = fleet.ready_hosts
    if ready and verbose:
        headers = ("host", "GPUs", "status", *AREAS, "worst figure")
        lines = []
        for outcome, rows in ready:
            worst = host_worst(rows)
            areas = host_areas(rows)
            lines.append(
                (
                    safe_text(outcome.host),
                    sum(1 for r in rows if r.uuid),
                    outcome.status,
                    *(areas[a] for a in AREAS),
                    safe_text(figure_text(*worst)) if worst else "-",
                )
            )
        out += ["", f"ready ({len(ready)}):", format_table(headers, lines, max_width=80)]
    elif ready:
        out += [
            "",
            f"{len(ready)} ready host(s) not listed (--verbose lists them; the JSON report has "
            "every check)",
        ]
    return "\n".join(out + _multinode_section(fleet))


def _multinode_section(fleet: Fleet) -> list[str]:
    """The fleet's multi-node job in a section of its own, ready or not: its status and every line
    (the slowest node and link named), since no other row says whether the nodes train together."""
    out = []
    for outcome in fleet.outcomes:
        if not outcome.host.startswith(MULTINODE_HOST):
            continue
        out += [
            "",
            f"{safe_text(outcome.host)}: {outcome.status}"
            + (f": {safe_text(outcome.reason)}" if outcome.reason else ""),
        ]
        for check in ((outcome.report or {}).get("host") or {}).get("checks") or []:
            if check.get("test") == MULTINODE_TEST:
                out.append(
                    f"  {check['verdict']}: {safe_text(check['check'])}: "
                    f"{safe_text(check['measured'])}"
                )
    return out


def render_live(
    state: dict[str, tuple[str, str, float, float | None]], total: int, now: float, limit: int = 20
) -> Any:
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
        " ("
        + ", ".join(
            f"{n} {safe_text(s, limit=40)}"
            for s, n in sorted(statuses.items(), key=lambda kv: STATUS_RANK.get(kv[0], 99))
        )
        + ")"
        if statuses
        else ""
    )
    waiting = max(0, total - len(state))
    table = Table(
        title=title,
        show_edge=False,
        caption=f"{len(running)} running, {waiting} waiting" if total else None,
        title_justify="left",
        min_width=len(title),
    )
    for column in ("host", "phase", "detail", "time"):
        table.add_column(column)
    shown = 0
    for host, (phase, detail, since, _) in running[:limit]:
        table.add_row(
            safe_text(host, limit=60),
            safe_text(phase, limit=30),
            safe_text(detail, limit=60),
            f"{now - since:.0f}s",
        )
        shown += 1
    failed = [(h, s) for h, s in done.items() if s[1] != READY]
    for host, (phase, detail, since, ended) in failed[: max(0, limit - shown)]:
        table.add_row(
            safe_text(host, limit=60),
            phase,
            safe_text(detail, limit=60),
            f"{(ended or now) - since:.0f}s",
            style="red",
        )
    if len(running) > limit:
        table.add_row(f"... {len(running) - limit} more running", "", "", "")
    return table
