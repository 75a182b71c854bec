"""What a fleet backend hands back for one server: its status, why, and the suite's JSON report.

Backend-neutral on purpose: the SSH-hosts and Slurm backends (and a Kubernetes one later) all end
in a list of these, and the fleet report renders that list without knowing which engine ran it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuenv.fleet.suitereport import MalformedReport, check_report

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
#: SSH answered but would not let us in (login refused, host key unknown or changed).
AUTH_REFUSED = "auth refused"
#: SSH works but there is no `docker` command for that login.
NO_DOCKER = "no docker"
#: SSH works and `docker` is there, but its engine does not answer (down, hung, no permission).
ENGINE_NOT_ANSWERING = "engine not answering"

STATUSES = (READY, NOT_READY, DEGRADED, CPU_ONLY, UNREACHABLE, AUTH_REFUSED, NO_DOCKER, ENGINE_NOT_ANSWERING, NO_GPU_RUNTIME, FAILED,
            TIMEOUT, CANCELLED, MALFORMED)
#: Phases a backend reports as progress while a host runs (free text is allowed too).
PHASES = ("queued", "connecting", "pulling", "running", "collecting", "done")


@dataclass
class HostOutcome:
    """One server's result. `report` is the suite's JSON (gpuenv-validate-report/1) when one came back."""

    host: str
    status: str
    reason: str = ""
    report: dict[str, Any] | None = None
    seconds: float | None = None
    exit_code: int | None = None
    details: dict[str, Any] = field(default_factory=dict)  # backend facts: image digest, job id, node ...

    @property
    def ready(self) -> bool:
        return self.status == READY


def status_from_report(report: dict[str, Any] | None, exit_code: int | None) -> tuple[str, str]:
    """Status and reason of a host whose suite ran: ready only with a report that says ok. A report
    that cannot be read is MALFORMED with "malformed report: why" (the node's file is untrusted)."""
    if report is None:
        return FAILED, f"the suite exited with {exit_code} and wrote no JSON report" if exit_code is not None else "no JSON report came back"
    try:
        report = check_report(report)
    except MalformedReport as err:
        return MALFORMED, f"malformed report: {err}"
    summary = report["summary"]
    if summary["ok"] and exit_code in (0, None):
        return READY, ""
    failed = [
        f"{check['check']}{' [' + check['gpu'][:12] + ']' if check['gpu'] else ''}"
        for section in report.values()
        if isinstance(section, dict)
        for check in section.get("checks", ())
        if check["verdict"] == "fail"
    ]
    if failed:
        return NOT_READY, f"{len(failed)} check(s) failed: " + ", ".join(failed[:5]) + (" ..." if len(failed) > 5 else "")
    return NOT_READY, f"the suite exited with {exit_code if exit_code is not None else summary.get('pytest_exit_status')}"


def fleet_ready(outcomes: list[HostOutcome]) -> bool:
    """Exit 0 only if every host is ready (an empty fleet is not ready: nothing was proven)."""
    return bool(outcomes) and all(o.ready for o in outcomes)
