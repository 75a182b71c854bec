"""The report a person reads in one screen (pure): the verdict first, then the failing rows with
their causes, then one collapsed table that fits 120 columns (long cells wrap within their
column), then one line per kind of skip (the framework checks in one, the readings not reported in
one).

Rows that say the same on several GPUs collapse into one ("GPU 0-7"). The full table, one row per
check and GPU with every reason, is `render_table` (python -m validate --verbose); the JSON and
JUnit reports keep every row whatever is printed here.
"""

from __future__ import annotations

import re
import textwrap
from typing import Sequence

from validate.judge.verdict import FAIL, PASS, SKIP, WARN
from validate.report.record import Record
from validate.report.tables import format_table, wrap_rows

WIDTH = 120
#: Column widths of the collapsed table: check, GPU, measured, threshold, verdict (with the
#: two-space gaps, 120 columns).
COLUMNS = (28, 9, 38, 27, 10)

_PCI = re.compile(r"\s*\(?\b[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\)?")
_GPU_N = re.compile(r"\bGPU \d+\b")
_REPLAYED = "replayed host ("
_FRAMEWORK = re.compile(r"PyTorch|TensorFlow|torch|tensorflow|framework", re.IGNORECASE)
#: A health row's skip because its reading is not given (the rule: "not reported", never healthy).
_NOT_REPORTED = re.compile(r"\bnot reported\b")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _gpus_text(indexes: list[int | None]) -> str:
    """'host', '3', '0-7', '0-4,6,7' for the GPUs a collapsed row stands for."""
    if indexes == [None]:
        return "host"
    known = sorted(i for i in indexes if i is not None)
    if not known:
        return "?"
    runs: list[list[int]] = []
    for i in known:  # consecutive indexes as one run: 0-4,6,7
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)


def _without_replayed_source(text: str) -> str:
    """'replayed host (/x/h100.txt (idle :: query (-q))): why' -> 'replayed host: why'. The
    source is matched by its balanced parentheses: capture names carry their own (a regex that
    stopped at the first ')' left 'replayed host)): why' on screen)."""
    start = text.find(_REPLAYED)
    while start >= 0:
        depth, end = 0, start + len(_REPLAYED) - 1
        for end in range(end, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        if depth:  # unbalanced: leave the text as it is
            return text
        text = text[: start + len("replayed host")] + text[end + 1 :]
        start = text.find(_REPLAYED, start)
    return text


def _same(text: str) -> str:
    """A cell or reason with what differs per GPU removed (its index, its PCI bus id), so rows
    that say the same on every GPU collapse."""
    return _GPU_N.sub("GPU n", _PCI.sub("", _without_replayed_source(text))).strip()


def _each(text: str) -> str:
    """A reason shared by several GPUs, worded for all of them."""
    return _same(text).replace("GPU n", "each GPU")


def collapse(
    records: Sequence[Record], gpu_index: dict[str, int]
) -> list[tuple[list[int | None], Record]]:
    """Records grouped by (check, verdict, measured, threshold, reason) with per-GPU details
    removed, in first-seen order; each group keeps its first record and the GPUs it covers."""
    groups: dict[tuple[str, ...], tuple[list[int | None], Record]] = {}
    for r in records:
        key = (
            r.check,
            r.verdict,
            _same(r.measured),
            _same(r.threshold),
            _same(r.reason),
            "host" if r.gpu is None else "gpu",
        )
        index = None if r.gpu is None else gpu_index.get(r.gpu, -1)
        if key in groups:
            groups[key][0].append(index)
        else:
            groups[key] = ([index], r)
    return list(groups.values())


def verdict_line(records: Sequence[Record], replayed: bool) -> str:
    """'result (replayed): 8 fail, 0 warn, 92 pass, 40 info, 63 skip' in a fixed order."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    order = (
        [FAIL, WARN, PASS] + sorted(v for v in counts if v not in (FAIL, WARN, PASS, SKIP)) + [SKIP]
    )
    head = "result (replayed)" if replayed else "result"
    state = (
        "FAILING ROWS BELOW"
        if counts.get(FAIL)
        else ("warnings below" if counts.get(WARN) else "no failing row")
    )
    return f"{head}: {state}: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in order)


def _wrapped(first: str, rest: str) -> list[str]:
    lines = textwrap.wrap(first, WIDTH, subsequent_indent="    ") or [first]
    if rest:
        lines += textwrap.wrap(rest, WIDTH, initial_indent="    ", subsequent_indent="    ")
    return lines


def failing_lines(groups: list[tuple[list[int | None], Record]]) -> list[str]:
    """Fail rows, then warn rows: the check, the GPUs, what was measured against what, and the
    cause and fix (wrapped, never cut)."""
    out: list[str] = []
    for verdict in (FAIL, WARN):
        for gpus, r in groups:
            if r.verdict != verdict:
                continue
            where = "host" if gpus == [None] else f"GPU {_gpus_text(gpus)}"
            measured = "" if r.measured in ("", "-") else f": {_same(r.measured)}"
            out += _wrapped(
                f"{verdict.upper()} {r.check} [{where}]{measured}",
                r.reason if len(gpus) == 1 else _each(r.reason),
            )
    return out


def table(groups: list[tuple[list[int | None], Record]]) -> str:
    """Every row that is neither a skip nor a failure, collapsed; a cell wider than its column wraps
    onto the next lines (a legacy GPU's last CUDA line must not be cut off)."""
    rows = []
    for gpus, r in groups:
        if r.verdict in (SKIP, FAIL, WARN):
            continue
        rows.append(
            (
                r.check,
                _gpus_text(gpus),
                _same(r.measured) if len(gpus) > 1 else r.measured,
                r.threshold,
                r.verdict,
            )
        )
    return format_table(
        ("check", "GPU", "measured", "threshold", "verdict"), wrap_rows(rows, COLUMNS)
    )


def skip_lines(groups: list[tuple[list[int | None], Record]]) -> list[str]:
    """One line for every skipped framework check, then one per other reason, each with its
    count."""
    skipped = [(gpus, r) for gpus, r in groups if r.verdict == SKIP]
    framework = [
        (g, r) for g, r in skipped if _FRAMEWORK.search(r.reason) or _FRAMEWORK.search(r.check)
    ]
    others = [(g, r) for g, r in skipped if (g, r) not in framework]
    out: list[str] = []
    if framework:
        count = sum(len(g) for g, _ in framework)
        names = list(dict.fromkeys(r.check for _, r in framework))
        weight: dict[str, int] = {}
        for g, r in framework:
            weight[_same(r.reason)] = weight.get(_same(r.reason), 0) + len(g)
        reasons = sorted(weight, key=lambda text: -weight[text])  # the most common first
        why = (
            reasons[0].replace("GPU n", "each GPU")
            if len(reasons) == 1
            else f"{reasons[0]} (and {len(reasons) - 1} other reason(s); --verbose lists them)"
        )
        out.append(_cut(f"skipped {count} framework check(s) ({', '.join(names)})", WIDTH))
        out += textwrap.wrap(
            f"because: {why}", WIDTH, initial_indent="    ", subsequent_indent="    "
        )
    unreported = [(g, r) for g, r in others if _NOT_REPORTED.search(r.reason)]
    if (
        len(unreported) > 1
    ):  # readings the GPUs or the capture do not give: one line, the reasons in --verbose
        names = ", ".join(dict.fromkeys(r.check for _, r in unreported))
        out += _wrapped(
            f"skipped {sum(len(g) for g, _ in unreported)}, not reported here: {names}",
            "absence is never read as health; --verbose gives each reason",
        )
        others = [(g, r) for g, r in others if (g, r) not in unreported]
    by_reason: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for gpus, r in others:
        reason = _same(r.reason) or "no reason given"
        by_reason.setdefault(reason, []).append(r.check)
        counts[reason] = counts.get(reason, 0) + len(gpus)
    for reason, checks in by_reason.items():
        names = ", ".join(dict.fromkeys(checks))
        out += _wrapped(f"skipped {counts[reason]}: {names}", reason.replace("GPU n", "each GPU"))
    return out


def render_summary(
    records: Sequence[Record], gpu_index: dict[str, int], replayed: bool = False
) -> str:
    """The one-screen report: verdict, failing rows, collapsed table, skips."""
    groups = collapse(records, gpu_index)
    out = [verdict_line(records, replayed)]
    failing = failing_lines(groups)
    if failing:
        out += [""] + failing
    out += ["", table(groups)]
    skips = skip_lines(groups)
    if skips:
        out += [""] + skips
    out.append(
        "(python -m validate --verbose prints every row and reason; --json and --junit keep "
        "them all)"
    )
    return "\n".join(out)


def host_lines(
    driver: str | None, cuda: str | None, gpus: Sequence, no_gpu_reason, full: bool = False
) -> list[str]:
    """The driver and the GPUs above the report: models counted in one line (each GPU with its
    UUID when `full`); `no_gpu_reason` is called only when there is no GPU."""
    head = f"driver {driver or '-'}, CUDA driver {cuda or '-'}"
    if not gpus:
        return [f"{head}, {no_gpu_reason()}"]
    if full:
        return [f"{head}, " + ", ".join(f"GPU {g.index}: {g.name} ({g.uuid})" for g in gpus)]
    models: dict[str, list[int]] = {}
    for g in gpus:
        models.setdefault(g.name, []).append(g.index)
    listed = "; ".join(
        f"{len(i)}x {name} (GPU {_gpus_text(list(i))})" for name, i in models.items()
    )
    return textwrap.wrap(f"{head}, {len(gpus)} GPU(s): {listed}", WIDTH, subsequent_indent="    ")


def fit(line: str) -> list[str]:
    """One line wrapped to WIDTH (long paths broken where they must be)."""
    return textwrap.wrap(line, WIDTH, subsequent_indent="    ", break_on_hyphens=False) or [line]
