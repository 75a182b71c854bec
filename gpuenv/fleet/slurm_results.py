"""Slurm, the results: the job's nodes, what each node left in the run folder, and every node's
`HostOutcome` from those files and the job's end state."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv.fleet.collected import read_suite_report
from gpuenv.fleet.outcome import (
    CANCELLED,
    FAILED,
    TIMEOUT,
    UNREACHABLE,
    HostOutcome,
    status_from_report,
)
from gpuenv.fleet.slurm_job import NODES_DIR, run_slurm
from gpuenv.fleet.slurm_queue import JobState
from validate.reading import InputRefused, read_input
from validate.text import safe_text
from validate.writing import path_component


def hostnames_command(nodelist: str) -> list[str]:
    return ["scontrol", "show", "hostnames", nodelist]


@dataclass
class NodeFiles:
    """What a node left in its folder of the run (read by `read_node_files`)."""

    started: bool = False
    exit: int | None = None
    runner: str | None = None
    error: str | None = None
    report: dict[str, Any] | None = None


def node_outcome(node: str, files: NodeFiles, job: JobState, time_limit: str | None) -> HostOutcome:
    """One node's outcome from its files and the job's end state (pure)."""
    details = {"job_id": job.job_id, "job_state": job.state, "runner": files.runner}
    if files.exit is not None:
        status, reason = status_from_report(files.report, files.exit)
        if files.report is None and files.error:
            reason = files.error
        return HostOutcome(
            node, status, reason, report=files.report, exit_code=files.exit, details=details
        )
    if job.state == "TIMEOUT":
        return HostOutcome(
            node,
            TIMEOUT,
            f"job {job.job_id} reached its time "
            f"limit{' (--time ' + time_limit + ')' if time_limit else ''} before this node's "
            "suite finished: give a longer --time",
            details=details,
        )
    if job.state in ("CANCELLED", "PREEMPTED", "REVOKED", "DEADLINE"):
        when = "while this node's suite ran" if files.started else "before this node started"
        return HostOutcome(
            node, CANCELLED, f"job {job.job_id} was {job.state.lower()} {when}", details=details
        )
    if job.state in ("NODE_FAIL", "BOOT_FAIL"):
        return HostOutcome(
            node,
            UNREACHABLE,
            f"Slurm reports {job.state} for job {job.job_id}: the node went down",
            details=details,
        )
    if job.state == "OUT_OF_MEMORY":
        return HostOutcome(
            node,
            FAILED,
            f"job {job.job_id} ran out of memory on this node: ask for more with --mem",
            details=details,
        )
    why = f" ({job.reason})" if job.reason and job.reason != "None" else ""
    return HostOutcome(
        node,
        FAILED,
        f"job {job.job_id} ended {job.state}{why} and this node wrote no exit status"
        + (
            ""
            if files.started
            else ": the node never started the suite (is the run folder on a shared path?)"
        ),
        details=details,
    )


def job_outcomes(
    nodes: list[str], node_files: dict[str, NodeFiles], job: JobState, time_limit: str | None
) -> list[HostOutcome]:
    """Every node's outcome; a job that never ran on any node is one line under its id."""
    if not nodes:
        state = job.state if job.state != "PENDING" else "CANCELLED"
        status = {"CANCELLED": CANCELLED, "TIMEOUT": TIMEOUT}.get(state, FAILED)
        why = f" ({job.reason})" if job.reason and job.reason != "None" else ""
        return [
            HostOutcome(
                f"slurm job {job.job_id}",
                status,
                f"job {job.job_id} ended {state}{why} before any node was allocated",
                details={"job_id": job.job_id, "job_state": job.state},
            )
        ]
    return [
        node_outcome(node, node_files.get(node, NodeFiles()), job, time_limit) for node in nodes
    ]


def expand_nodelist(nodelist: str) -> list[str]:
    if not nodelist:
        return []
    proc = run_slurm(hostnames_command(nodelist))
    return (
        [line.strip() for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode == 0
        else [nodelist]
    )


#: A node's small status files (exit, runner, error) hold a line or two.
MAX_NODE_FILE_BYTES = 64 * 1024


def read_node_files(rundir: str, node: str) -> NodeFiles:
    """What a node left in the run folder, read through the one bounded reader. The node name
    (from Slurm) must be one path component: nothing is read from outside the run folder."""
    if path_component(node) != node:
        return NodeFiles(
            started=False,
            exit=None,
            runner=None,
            error=f"node name {safe_text(node, limit=80)!r} is not a file name",
            report=None,
        )
    folder = Path(rundir) / NODES_DIR / node

    def text(name: str) -> str | None:
        try:
            return (
                read_input(folder / name, MAX_NODE_FILE_BYTES)
                .decode("utf-8", errors="replace")
                .strip()
            )
        except InputRefused:
            return None  # missing (the node never got there), or not a small regular file

    exit_text = text("exit")
    return NodeFiles(
        started=(folder / "started").exists(),
        exit=int(exit_text) if exit_text and exit_text.lstrip("-").isdigit() else None,
        runner=text("runner"),
        error=text("error") or None,
        report=read_suite_report(folder / "report.json"),
    )
