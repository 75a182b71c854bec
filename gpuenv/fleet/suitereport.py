"""One node's suite report (`python -m validate --json`) read as untrusted input.

A node's report is written by a process on a machine we do not control, and it may be cut short,
tampered with, or simply from a newer suite. Everything the fleet report reads of it goes through
`check_report`, which either returns a clean copy (known fields with known types, text without
control characters) or raises `MalformedReport(why)` naming the first thing it could not read. The
fleet then marks that one node "malformed report: why" and renders every other node as usual.

Forward compatible: format `gpuenv-validate-report/1` and every later `/N` are read; keys we do not
know are ignored, never refused. Only what cannot be read is refused.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from validate.host.bounds import repeated_uuid
from validate.reading import InputRefused, decode_input, load_json_input
from validate.text import MAX_TEXT, safe_text

#: A report bigger than this is refused unread (an 8-GPU report is about 60 kB).
MAX_REPORT_BYTES = 16 * 2**20
#: Largest magnitude of a figure: far above any real one (bytes, FLOPS), far below overflow when
#: figures are added for a median.
MAX_VALUE = 1e18
#: What one report may keep (see _check_size): GPUs as a host can have (validate.host.capture's
#: bound), checks and their text far above a real report's (200 checks, 60 kB for 8 GPUs; 64 GPUs x
#: 64 checks).
MAX_GPU_SECTIONS = 64
MAX_CHECKS = 4_096
MAX_CHECK_TEXT = 2**20
#: Values kept of the free-form host sections (nvml, frameworks): a real report has about 300.
MAX_FREE_FORM_VALUES = 5_000
#: A report is four levels deep (GPU, checks, check, value); NVML facts add a few.
MAX_DEPTH = 64
_FORMAT = re.compile(r"^gpuenv-validate-report/([1-9][0-9]{0,5})$")


class MalformedReport(ValueError):
    """A node's report that cannot be read; `str()` says why, in a few words."""


class CheckedReport(dict):
    """A report that went through `check_report` (so it is not checked twice)."""


class UnreadableReport(dict):
    """Stands for a report file that was there but could not be parsed, so that a backend can hand
    it on like a report and `check_report` turns it into "malformed report: why"."""

    def __init__(self, why: str) -> None:
        super().__init__(format="unreadable")
        self.why = why


def parse_report(data: bytes) -> CheckedReport:
    """Bytes of a node's report file -> a checked report, or MalformedReport(why)."""
    if len(data) > MAX_REPORT_BYTES:
        raise MalformedReport(
            f"{len(data) / 2**20:.1f} MiB, over the {MAX_REPORT_BYTES // 2**20} MiB limit"
        )
    try:
        text = decode_input(
            data
        )  # a byte-order mark or UTF-16 (a file that went through Windows) is fine
    except InputRefused as err:
        raise MalformedReport(str(err)) from None
    return check_report(load_json(text), source_chars=len(text))


def load_json(text: str) -> Any:
    """JSON through the one bounded reader (validate.reading): a 400-digit integer, NaN, deep
    nesting or a key given twice in one object (a second GPU section or "summary" would silently
    replace the first, failing rows and all) is refused here rather than misread later."""
    try:
        return load_json_input(text, max_depth=MAX_DEPTH)
    except InputRefused as err:
        raise MalformedReport(str(err)) from None


def load_suite_report(text: str) -> dict[str, Any] | None:
    """A node's suite report from its text: None when it is not JSON of an object (reads as 'no
    report'); a report that cannot be read (too big, too deep, a 400-digit number, NaN) comes back
    as an UnreadableReport, which status_from_report and analyse turn into 'malformed report: why'.
    Never raises: the text is untrusted."""
    if len(text) > MAX_REPORT_BYTES:
        return UnreadableReport(
            f"{len(text) / 2**20:.1f} MiB, over the {MAX_REPORT_BYTES // 2**20} MiB limit"
        )
    try:
        data = load_json(text)
    except MalformedReport as err:
        return None if str(err).startswith("not JSON") else UnreadableReport(str(err))
    return data if isinstance(data, dict) else None


def _where(section: str, index: int, check: dict[str, Any] | None = None) -> str:
    name = check.get("check") if isinstance(check, dict) else None
    return f"{section} check {index}" + (
        f" ({safe_text(name, limit=60)!r})" if isinstance(name, str) else ""
    )


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedReport(f"{what} is {safe_text(repr(value), limit=40)}, not a number")
    if not math.isfinite(float(value)):
        raise MalformedReport(f"{what} is not a finite number")
    if abs(value) > MAX_VALUE:
        raise MalformedReport(f"{what} {float(value):.3g} is out of range")
    return float(value)


def _text(value: Any, newlines: bool = False, limit: int = MAX_TEXT) -> str:
    """safe_text with its common case inline (a short printable str, kept as it is): a
    12,500-host folder has 11 million such fields, and the call alone was a fifth of reading it."""
    if type(value) is str and len(value) <= limit and value.isprintable():
        return value
    return safe_text(value, newlines=newlines, limit=limit)


def _shared(value: str) -> str:
    """A short text that repeats across checks and hosts (a check's name, test, threshold,
    verdict, GPU UUID) held once: at 100,000 GPUs that is millions of copies fewer."""
    return sys.intern(value) if len(value) <= 200 else value


def _check(raw: Any, section: str, index: int, gpu: str | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise MalformedReport(f"{section} check {index} is a {type(raw).__name__}, not an object")
    # where the check is (_where) is worded only for an error: a 1,000-host folder has 90,000 checks
    name = raw.get("check")
    if not isinstance(name, str) or not name.strip():
        raise MalformedReport(f"{_where(section, index, raw)} has no name ('check')")
    verdict = raw.get("verdict")
    if not isinstance(verdict, str):
        raise MalformedReport(f"{_where(section, index, raw)} has no verdict")
    owner = raw.get("gpu", gpu)
    if owner is not None and not isinstance(owner, str):
        raise MalformedReport(
            f"{_where(section, index, raw)}: 'gpu' is {safe_text(repr(owner), limit=40)}, not a "
            "GPU UUID"
        )
    get = raw.get
    measured, threshold, reason, test = (
        get("measured"),
        get("threshold"),
        get("reason"),
        get("test"),
    )
    check: dict[str, Any] = {
        "check": _shared(_text(name, limit=200)),
        "gpu": (gpu if owner == gpu else _shared(safe_text(owner, limit=200)))
        if owner is not None
        else gpu,
        "measured": "" if measured is None else _text(measured),
        "threshold": "" if threshold is None else _shared(_text(threshold)),
        "verdict": _shared(_text(verdict).strip().lower()),
        "reason": "" if reason is None else _text(reason, newlines=True),
        "test": "" if test is None else _shared(_text(test)),
        "fleet_judged": get("fleet_judged") is not False,  # reports before it: every figure
    }
    try:
        check["seconds"] = _number(get("seconds"), "'seconds'")
        check["value"] = _number(get("value"), "'value'")
    except MalformedReport as err:
        raise MalformedReport(f"{_where(section, index, raw)}: {err}") from None
    return check


def _checks(raw: Any, section: str, gpu: str | None) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise MalformedReport(f"{section} 'checks' is a {type(raw).__name__}, not a list")
    return [_check(c, section, i, gpu) for i, c in enumerate(raw)]


def _gpu(uuid: str, raw: dict[str, Any]) -> dict[str, Any]:
    info = raw["gpu"]
    label = f"GPU {safe_text(uuid, limit=60)}"
    index = info.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 4096:
        raise MalformedReport(
            f"{label}: index {safe_text(repr(index), limit=40)} is not a GPU index"
        )
    gpu: dict[str, Any] = {
        k: v for k, v in info.items() if isinstance(v, (int, float, bool)) or v is None
    }
    gpu.update({k: safe_text(v, limit=200) for k, v in info.items() if isinstance(v, str)})
    gpu["index"] = index
    gpu["uuid"] = safe_text(uuid, limit=200)
    name = info.get("name")
    if name is not None and not isinstance(name, str):
        raise MalformedReport(f"{label}: name is {safe_text(repr(name), limit=40)}, not text")
    gpu["name"] = safe_text(name, limit=200) if name else None
    return {"gpu": gpu, "checks": _checks(raw.get("checks"), label, gpu["uuid"])}


def check_report(data: Any, source_chars: int | None = None) -> CheckedReport:
    """A parsed report -> its checked, cleaned copy; MalformedReport(why) when it cannot be read.
    `source_chars`: the length of the JSON text it was parsed from, when known (its strings
    cannot hold more characters than that, so a short file's check text needs no count)."""
    if isinstance(data, CheckedReport):
        return data
    if isinstance(data, UnreadableReport):
        raise MalformedReport(data.why)
    if not isinstance(data, dict):
        raise MalformedReport(f"the report is a JSON {type(data).__name__}, not an object")
    fmt = data.get("format")
    if not isinstance(fmt, str) or not _FORMAT.match(fmt):
        raise MalformedReport(
            f"format {safe_text(repr(fmt), limit=60)} is not gpuenv-validate-report/N"
        )
    host = data.get("host")
    if host is None:
        raise MalformedReport("no 'host' section")
    if not isinstance(host, dict):
        raise MalformedReport(f"'host' is a {type(host).__name__}, not an object")
    _check_size(data, count_text=source_chars is None or source_chars > MAX_CHECK_TEXT)
    clean = CheckedReport(format=fmt)
    nvml = host.get("nvml")
    declared = _declared_gpus(nvml.get("gpus") if isinstance(nvml, dict) else None)
    budget = [MAX_FREE_FORM_VALUES]
    clean["host"] = {
        "nvml": _plain(nvml, budget) if isinstance(nvml, dict) else None,
        "frameworks": _plain(host.get("frameworks"), budget)
        if isinstance(host.get("frameworks"), dict)
        else None,
        "checks": _checks(host.get("checks"), "host", None),
    }
    if (
        declared is not None
    ):  # checked on its own, so no wide free-form field before it can crowd it out
        clean["host"]["nvml"]["gpus"] = declared
    listed = (clean["host"]["nvml"] or {}).get("gpus")
    repeated = repeated_uuid(
        [g.get("uuid") for g in listed if isinstance(g, dict)] if isinstance(listed, list) else []
    )
    if repeated:  # the GPU sections are keyed by UUID: a second GPU with the same one would be lost
        raise MalformedReport(
            f"GPU {repeated[1]} and GPU {repeated[2]} share the UUID "
            f"{safe_text(repeated[0], limit=80)}: each GPU has its own"
        )
    indexes: dict[int, str] = {}
    for key, value in data.items():
        if (
            key in ("format", "host", "summary")
            or not isinstance(value, dict)
            or not isinstance(value.get("gpu"), dict)
        ):
            continue  # a section of a later format, or not a GPU: ignored
        section = _gpu(key, value)
        index = section["gpu"]["index"]
        if index in indexes:
            raise MalformedReport(
                f"GPU index {index} given twice ({safe_text(indexes[index], limit=60)} and "
                f"{safe_text(key, limit=60)})"
            )
        indexes[index] = key
        uuid = section["gpu"]["uuid"]
        if (
            uuid in clean
            # two keys that read the same once made safe (or cut to length): neither may hide the
            # other
        ):
            raise MalformedReport(
                f"GPU UUID {uuid!r} given twice (as {safe_text(key, limit=60)!r} too)"
            )
        clean[uuid] = section
    summary = data.get("summary")
    if summary is not None and not isinstance(summary, dict):
        raise MalformedReport(f"'summary' is a {type(summary).__name__}, not an object")
    failed = sum(
        c["verdict"] == "fail"
        for s in clean.values()
        if isinstance(s, dict)
        for c in s.get("checks") or ()
    )
    summary = summary or {}
    exit_status = summary.get("pytest_exit_status")
    if exit_status is not None and (
        isinstance(exit_status, bool) or not isinstance(exit_status, int)
    ):
        raise MalformedReport(
            f"summary: pytest_exit_status is {safe_text(repr(exit_status), limit=40)}, not a "
            "whole number"
        )
    verdicts = summary.get("verdicts")
    clean["summary"] = {
        "verdicts": {safe_text(k, limit=60): v for k, v in verdicts.items() if isinstance(v, int)}
        if isinstance(verdicts, dict)
        else {},
        "failed": failed,
        "pytest_exit_status": exit_status,
        # a report whose checks failed is not ok, whatever its summary claims
        "ok": summary.get("ok") is True and failed == 0,
        "seconds": _number(summary.get("seconds"), "summary: 'seconds'"),
        # why the node's own suite found its run no proof of a ready host
        # (validate/judge/evidence.py)
        "not_validated": safe_text(summary["not_validated"], limit=500)
        if summary.get("not_validated")
        else None,
    }
    return clean


def _declared_gpus(raw: Any) -> list[dict[str, Any]] | None:
    """The GPUs the node's own NVML reading lists (host.nvml.gpus), each with a UUID: every one of
    them owes its proof of computing, whether or not the report kept a section for it. None when
    the report lists none (an old or hand-made report: its GPU sections are all there is)."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise MalformedReport(f"host.nvml.gpus is a {type(raw).__name__}, not a list")
    if len(raw) > MAX_GPU_SECTIONS:
        raise MalformedReport(
            f"host.nvml.gpus lists {len(raw)} GPUs; a host has at most {MAX_GPU_SECTIONS}"
        )
    out = []
    budget = [MAX_FREE_FORM_VALUES]  # for their other facts; index, UUID and name are always kept
    for position, entry in enumerate(raw):
        uuid = entry.get("uuid") if isinstance(entry, dict) else None
        if not isinstance(uuid, str) or not uuid.strip():
            raise MalformedReport(f"host.nvml.gpus entry {position} has no GPU UUID")
        gpu = _plain(entry, budget) or {}
        index = entry.get("index")
        gpu["index"] = index if isinstance(index, int) and not isinstance(index, bool) else None
        gpu["uuid"] = safe_text(uuid, limit=200)
        gpu["name"] = (
            safe_text(entry["name"], limit=200) if isinstance(entry.get("name"), str) else None
        )
        out.append(gpu)
    return out


def _check_size(data: dict[str, Any], count_text: bool = True) -> None:
    """What a report keeps is bounded before it is copied: at most MAX_GPU_SECTIONS GPUs,
    MAX_CHECKS checks and MAX_CHECK_TEXT characters of check text (each field counted as kept,
    cut at MAX_TEXT). A real 8-GPU report has about 200 checks and 60 kB of text; twenty reports
    of 16 MiB each held whole took 2-4 GB. A report past a bound is refused whole, never cut: a
    failing row must not be dropped silently."""
    sections = [data["host"]] + [
        v
        for k, v in data.items()
        if k not in ("format", "host", "summary")
        and isinstance(v, dict)
        and isinstance(v.get("gpu"), dict)
    ]
    if len(sections) - 1 > MAX_GPU_SECTIONS:
        raise MalformedReport(
            f"{len(sections) - 1} GPU sections; a host has at most {MAX_GPU_SECTIONS} GPUs"
        )
    checks = [c for s in sections if isinstance(s.get("checks"), list) for c in s["checks"]]
    if len(checks) > MAX_CHECKS:
        raise MalformedReport(f"{len(checks)} checks; a suite report has at most {MAX_CHECKS}")
    if (
        not count_text
    ):  # a JSON text of at most MAX_CHECK_TEXT characters holds no more in its strings
        return
    text = sum(
        min(len(v), MAX_TEXT)
        for c in checks
        if isinstance(c, dict)
        for v in c.values()
        if isinstance(v, str)
    )
    if text > MAX_CHECK_TEXT:
        raise MalformedReport(
            f"{text / 2**20:.1f} M characters of check text; a suite report has at most "
            f"{MAX_CHECK_TEXT // 2**20} M"
        )


def _plain(value: Any, budget: list[int], depth: int = 0) -> Any:
    """Free-form sections (NVML facts, framework versions): kept as plain JSON, text made safe;
    at most `budget[0]` values in all (shared, so many wide levels cannot multiply), the rest
    dropped."""
    budget[0] -= 1
    if depth > 8 or budget[0] < 0:
        return None
    if isinstance(value, dict):
        return {
            _shared(_text(k, limit=200)): _plain(v, budget, depth + 1)
            for k, v in list(value.items())[:500]
            if budget[0] > 0
        }
    if isinstance(value, list):
        return [_plain(v, budget, depth + 1) for v in value[:500] if budget[0] > 0]
    if isinstance(value, str):
        return _text(value)
    return value
