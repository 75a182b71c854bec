"""The fleet report as JSON (fleet.json, `gpuenv-fleet-report/1`): keyed by host, then GPU UUID,
each host's status and suite report with the fleet's comparisons beside every figure. Pure, and
strict JSON (no bare NaN or Infinity), encoded host by host so its cost and memory stay linear."""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Iterator

from gpuenv.fleet.outcome import HostOutcome
from gpuenv.fleet.report.analysis import Fleet, Row

FLEET_FORMAT = "gpuenv-fleet-report/1"


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
    for n, (outcome, rows) in enumerate(fleet.hosts):
        key = outcome.host if outcome.host not in seen else f"{outcome.host} ({n})"
        seen.add(key)
        yield key, _host_entry(outcome, rows)


def _json_head(fleet: Fleet) -> dict[str, Any]:
    return {
        "format": FLEET_FORMAT,
        "ready": fleet.ready,
        "hosts_ready": len(fleet.ready_hosts),
        "hosts_total": len(fleet.outcomes),
        "counts": fleet.counts,
        "not_ready": [o.host for o, _ in fleet.not_ready],
        "baseline_applied": fleet.baseline_applied,
        "outlier_fraction": fleet.floor,
        "fleet_medians": fleet.medians,
    }


def build_json(fleet: Fleet) -> dict[str, Any]:
    """JSON keyed by host, then GPU UUID: each host's status and suite report, with the fleet's
    comparisons (peak, baseline, median, outlier) beside every figure."""
    return {**_json_head(fleet), "hosts": dict(_json_hosts(fleet))}


#: json.dumps' encoder with allow_nan=False and default=str, made once: fleet.json is encoded host
#: by host. No check for circular references (a dict and a set per list and object, a tenth of
#: the encoding): what it encodes is parsed JSON and the dicts made here, which hold no cycle.
_ENCODER = json.JSONEncoder(allow_nan=False, default=str, check_circular=False)


def _strict(value: Any) -> str:
    try:
        return _ENCODER.encode(value)
    except ValueError:  # a non-finite number from a backend's details: mapped to null
        return json.dumps(_finite(value), allow_nan=False)


def iter_json(fleet: Fleet) -> Iterator[str]:
    """fleet.json's text in pieces, one host at a time (write_reports writes them as they come,
    so a 100,000-GPU report is never held whole)."""
    head = _strict(_json_head(fleet))
    yield head[:-1] + ', "hosts": {\n'
    for n, (key, entry) in enumerate(_json_hosts(fleet)):
        yield (",\n" if n else "") + f"{json.dumps(key)}: {_strict(entry)}"
    yield "\n}}\n"


def render_json(fleet: Fleet) -> str:
    """fleet.json's text, build_json's content with one host per line: strict JSON (no bare NaN or
    Infinity), encoded host by host so its cost and memory stay linear."""
    return "".join(iter_json(fleet))
