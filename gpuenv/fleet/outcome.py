"""What a fleet backend hands back for one server: its status, why, and the suite's JSON report.

Backend-neutral on purpose: the SSH-hosts and Slurm backends (and a Kubernetes one later) all end
in a list of these, and the fleet report renders that list without knowing which engine ran it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuenv.fleet.suitereport import MalformedReport, check_report
from validate.judge.evidence import missing_evidence

#: The server ran the suite and every check passed (or skipped with its reason).
READY = "ready"
#: The suite ran and some check failed (the report says which).
NOT_READY = "not ready"
#: The engine could not be reached at all (SSH refused, Docker not answering, node down).
UNREACHABLE = "unreachable"
#: The engine answered but cannot give GPUs to a container (no NVIDIA container toolkit).
NO_GPU_RUNTIME = "no gpu runtime"
#: The run itself broke (image missing and not pullable, the suite crashed, no report came back).
FAILED = "failed"
#: The scheduler stopped the run: its time limit was reached.
TIMEOUT = "timeout"
#: The run was cancelled (scancel, Ctrl-C) before the suite finished.
CANCELLED = "cancelled"
#: Every check passed, but a GPU is below the outlier floor of its model's fleet median.
DEGRADED = "degraded"
#: Every check passed on a host that showed no GPU, in a fleet whose other hosts show GPUs.
CPU_ONLY = "cpu only"
#: The node sent a report that cannot be read (its reason says why); the other nodes are unaffected.
MALFORMED = "malformed"
#: The report holds a figure no GPU of its model can reach: it feeds no median (report/analysis.py).
IMPLAUSIBLE = "implausible report"
#: The report is another host's too, or claims a GPU another host claims: it feeds no median.
DUPLICATE = "duplicate report"
#: SSH answered but would not let us in (login refused, host key unknown or changed).
AUTH_REFUSED = "auth refused"
#: SSH works but there is no `docker` command for that login.
NO_DOCKER = "no docker"
#: SSH works and `docker` is there, but its engine does not answer (down, hung, no permission).
ENGINE_NOT_ANSWERING = "engine not answering"

STATUSES = (
    READY,
    NOT_READY,
    DEGRADED,
    CPU_ONLY,
    UNREACHABLE,
    AUTH_REFUSED,
    NO_DOCKER,
    ENGINE_NOT_ANSWERING,
    NO_GPU_RUNTIME,
    FAILED,
    TIMEOUT,
    CANCELLED,
    MALFORMED,
    IMPLAUSIBLE,
    DUPLICATE,
)
#: The fleet's multi-node job is one more outcome named "multi-node job (NODES)"
#: (gpuenv/fleet/multinode.py);
#: its report lines carry test MULTINODE_TEST.
MULTINODE_HOST = "multi-node job"
MULTINODE_TEST = "multinode"


@dataclass
class HostOutcome:
    """One server's result. `report` is the suite's JSON (gpuenv-validate-report/1) when one came
    back."""

    host: str
    status: str
    reason: str = ""
    report: dict[str, Any] | None = None
    seconds: float | None = None
    exit_code: int | None = None
    details: dict[str, Any] = field(
        default_factory=dict
    )  # backend facts: image digest, job id, node ...

    @property
    def ready(self) -> bool:
        return self.status == READY


def report_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of a checked report: the host's, then each GPU section's."""
    rows = list((report.get("host") or {}).get("checks") or [])
    for key, section in report.items():
        if key not in ("format", "host", "summary") and isinstance(section, dict):
            rows += section.get("checks") or []
    return rows


def unproven(report: dict[str, Any]) -> str | None:
    """Why a checked report is no proof of a ready host (validate/judge/evidence.py), or None: its
    summary must agree with its rows, every verdict must be known, and each GPU it declares must
    have computed."""
    summary = report["summary"]
    rows = report_rows(report)
    counted: dict[str, int] = {}
    for row in rows:
        counted[row["verdict"]] = counted.get(row["verdict"], 0) + 1
    claimed = summary.get("verdicts") or {}
    if claimed and claimed != counted:
        return f"its summary counts {claimed} but its rows hold {counted}"
    exit_status = summary.get("pytest_exit_status")
    if exit_status is None:
        return "the report does not say how the suite exited (no pytest_exit_status)"
    frameworks = (report.get("host") or {}).get("frameworks") or {}
    return summary.get("not_validated") or missing_evidence(
        rows, gpus_owing_proof(report), frameworks=frameworks, exit_status=exit_status
    )


def gpus_owing_proof(report: dict[str, Any]) -> dict[str, str]:
    """UUID -> label of every GPU a checked report declares: its GPU sections, and the GPUs its own
    NVML reading lists (host.nvml.gpus). A report that leaves out a GPU's section, or all of them,
    still owes that GPU's passing compute row; the section keys alone would let it read ready."""

    def label(gpu: dict[str, Any], uuid: str) -> str:
        return f"GPU {gpu.get('index')} ({gpu.get('name') or uuid[:12]})"

    gpus = {
        key: label(section["gpu"], key)
        for key, section in report.items()
        if isinstance(section, dict) and isinstance(section.get("gpu"), dict)
    }
    for gpu in ((report.get("host") or {}).get("nvml") or {}).get("gpus") or ():
        gpus.setdefault(gpu["uuid"], label(gpu, gpu["uuid"]))
    return gpus


def status_from_report(report: dict[str, Any] | None, exit_code: int | None) -> tuple[str, str]:
    """Status and reason of a host whose suite ran: ready only with a report that says ok and
    proves it (each GPU computed, its exit status and summary agree with its rows, every verdict is
    known). A report that cannot be read is MALFORMED with "malformed report: why" (the node's file
    is untrusted)."""
    if report is None:
        return (
            FAILED,
            f"the suite exited with {exit_code} and wrote no JSON report"
            if exit_code is not None
            else "no JSON report came back",
        )
    try:
        report = check_report(report)
    except MalformedReport as err:
        return MALFORMED, f"malformed report: {err}"
    summary = report["summary"]
    why = unproven(report)
    if summary["ok"] and exit_code in (0, None) and why is None:
        return READY, ""
    failed = [
        f"{check['check']}{' [' + check['gpu'][:12] + ']' if check['gpu'] else ''}"
        for section in report.values()
        if isinstance(section, dict)
        for check in section.get("checks", ())
        if check["verdict"] == "fail"
    ]
    if failed:
        return NOT_READY, f"{len(failed)} check(s) failed: " + ", ".join(failed[:5]) + (
            " ..." if len(failed) > 5 else ""
        )
    if why:
        return NOT_READY, why
    return (
        NOT_READY,
        "the suite exited with "
        f"{exit_code if exit_code is not None else summary.get('pytest_exit_status')}",
    )


def fleet_ready(outcomes: list[HostOutcome]) -> bool:
    """Exit 0 only if every host is ready (an empty fleet is not ready: nothing was proven)."""
    return bool(outcomes) and all(o.ready for o in outcomes)


def suite_gpus(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(uuid, section) of each GPU in a checked suite report, in NVML index order."""
    sections = [
        (k, v) for k, v in report.items() if isinstance(v, dict) and isinstance(v.get("gpu"), dict)
    ]
    return sorted(
        sections,
        key=lambda kv: (kv[1]["gpu"].get("index") is None, kv[1]["gpu"].get("index") or 0, kv[0]),
    )


def host_checks(outcome: HostOutcome) -> list[dict[str, Any]]:
    """Every check of a host's report: the host-wide ones, then each GPU's."""
    report = outcome.report or {}
    checks = list((report.get("host") or {}).get("checks") or [])
    for _, section in suite_gpus(report):
        checks += section.get("checks") or []
    return checks
