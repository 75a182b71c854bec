"""Per-check records and their three renderings: the table for people, JSON keyed by GPU UUID,
and (through pytest's --junitxml) JUnit XML. Rendering is pure; only `write_json` touches disk."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from validate.judge.verdict import FAIL, PASS, SKIP
from validate.report.tables import format_table, wrap_rows
from validate.writing import write_text_atomic

#: Set by `invoke validate` for an in-image run: {path in the container: the path the user gave},
#: so the report paths the suite prints are the user's, not /workspace/... or /gpuenv-reports/...
HOST_PATHS_VARIABLE = "GPUENV_HOST_PATHS"


def shown_path(path: str) -> str:
    """The path to print for a report file: the user's, when the run is inside an image."""
    try:
        mapping = json.loads(os.environ.get(HOST_PATHS_VARIABLE) or "{}")
    except ValueError:
        return path
    return mapping.get(path, path) if isinstance(mapping, dict) else path


REPORT_FORMAT = "gpuenv-validate-report/1"

#: Checks that moved to another file or name, by node id without its path and parameters: old ->
#: new. Reports saved before a move keep the old ids (a report is a record of what ran, never
#: rewritten); whatever matches a row by its id (a replay's recorded measurements) reads it through
#: `current_test`. The health checks left test_01_environment.py for their own file, named for the
#: rules that judge them; the NCCL all-reduce went beside the DDP check it shares world.py with.
MOVED_TESTS = {
    "test_01_environment.py::test_gpu_health": "test_01_health.py::test_gpu_health_nvml",
    "test_01_environment.py::test_gpu_health_dcgm": "test_01_health.py::test_gpu_health_dcgm",
    "test_01_environment.py::test_gpu_health_watches": (
        "test_01_health.py::test_gpu_health_dcgm_watches"
    ),
    "test_05_speed.py::test_nccl_all_reduce": "test_07_multigpu.py::test_nccl_all_reduce",
}


def current_test(test: str) -> str:
    """A row's node id as the suite names that check today: 'checks/test_05_speed.py::
    test_nccl_all_reduce' -> 'checks/test_07_multigpu.py::test_nccl_all_reduce'; the folder and a
    parameter ('[gpu0]') are kept, any other id is returned as it is."""
    name, bracket, params = test.partition("[")
    folder, slash, node = name.rpartition("/")
    moved = MOVED_TESTS.get(node)
    return test if moved is None else folder + slash + moved + bracket + params


@dataclass
class Record:
    """One line of the report. `gpu` is a GPU UUID, or None for host-wide checks."""

    check: str
    gpu: str | None
    measured: str
    threshold: str
    verdict: str
    seconds: float | None = None
    reason: str = ""
    value: float | None = None  # the number a baseline compares, when there is one
    test: str = ""
    replayed: bool = False  # judged on a recorded host (--replay), not on this one
    # False: a figure the suite only reports (DataParallel beside DDP, a multi-GPU rate without a
    # baseline): the fleet report shows it but keeps it out of the fleet median and outlier floor.
    fleet_judged: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gpu_label(uuid: str | None, gpu_index: dict[str, int]) -> str:
    if uuid is None:
        return "host"
    index = gpu_index.get(uuid)
    short = uuid[:12]
    return f"{index} {short}" if index is not None else short


def render_table(records: list[Record], gpu_index: dict[str, int]) -> str:
    """A plain-text table (check, GPU, measured, threshold, verdict, time), long cells wrapped
    within 48 columns, and the reasons below it."""
    header = ("check", "GPU", "measured", "threshold", "verdict", "time")
    rows = [
        (
            r.check,
            _gpu_label(r.gpu, gpu_index),
            r.measured,
            r.threshold,
            f"{r.verdict} (replayed)" if r.replayed else r.verdict,
            "" if r.seconds is None else f"{r.seconds:.2f}s",
        )
        for r in records
    ]
    out = [
        format_table(header, wrap_rows(rows, [48] * len(header)))
    ]  # long cells wrap: --verbose is the full detail
    notes = [(n, r) for n, r in enumerate(records, start=1) if r.reason and r.verdict != PASS]
    if notes:
        out.append("")
        out += [
            f"{r.verdict}: {r.check} [{_gpu_label(r.gpu, gpu_index)}]: {r.reason}" for _, r in notes
        ]
    return "\n".join(out)


def summarise(records: list[Record]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        counts[record.verdict] = counts.get(record.verdict, 0) + 1
    return counts


def build_json(
    records: list[Record],
    host: dict[str, Any],
    gpus: list[dict[str, Any]],
    frameworks: dict[str, Any],
    exit_status: int,
    *,
    not_validated: str | None = None,
    health_only: bool = False,
) -> dict[str, Any]:
    """The JSON report: a "host" section, one section per GPU UUID, and a summary.

    `not_validated` says why a run that passed proves no ready host (validate/judge/evidence.py)."""
    report: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "host": {
            "nvml": host,
            "frameworks": frameworks,
            "checks": [r.to_dict() for r in records if r.gpu is None],
        },
    }
    for gpu in gpus:
        report[gpu["uuid"]] = {
            "gpu": gpu,
            "checks": [r.to_dict() for r in records if r.gpu == gpu["uuid"]],
        }
    counts = summarise(records)
    report["summary"] = {
        "verdicts": counts,
        "failed": counts.get(FAIL, 0),
        "skipped": counts.get(SKIP, 0),
        "pytest_exit_status": exit_status,
        "ok": exit_status == 0 and counts.get(FAIL, 0) == 0 and not not_validated,
        "not_validated": not_validated,
        "health_only": health_only,
        "seconds": round(sum(r.seconds or 0.0 for r in records), 2),
    }
    return report


def write_json(path: str | Path, data: Any) -> None:
    """Write JSON atomically (temp file in the same folder, then os.replace)."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def not_judged_note(records: list[Record], gpu_names: dict[str, str]) -> str | None:
    """One line under the table when figures were measured but not judged (no like-for-like
    reference for the model, no --baseline), naming the models, so "not judged" is never read
    as a pass; None when every figure was judged."""
    from validate.judge.verdict import NOT_JUDGED_WORDS

    figures = [r for r in records if r.verdict in NOT_JUDGED_WORDS and r.value is not None]
    if not figures:
        return None
    models = sorted(
        {gpu_names.get(r.gpu, "this host's CPU") if r.gpu else "this host's CPU" for r in figures}
    )
    return (
        f"validate: {len(figures)} figure(s) measured but not judged (no measured reference for "
        f"{', '.join(models)}): save a baseline on a known-good server (--save-baseline, then "
        "--baseline) or compare the fleet median"
    )
