"""Slurm, the queue: a job's state as squeue, sacct and scontrol tell it, the pending reasons that
cannot clear (then the job is cancelled at once), and scancel. Parsers are pure; the calls at the
bottom run them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuenv.errors import ToolError
from gpuenv.fleet.slurm_job import BATCH_SCRIPT, JOB_NAME, run_slurm

#: Job states that are over, as squeue/sacct/scontrol print them (sacct adds "by UID" to CANCELLED).
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "SPECIAL_EXIT",
    "REVOKED",
}

#: Where the reason words and their meaning come from.
REASONS_SOURCE = "https://slurm.schedmd.com/job_reason_codes.html"


@dataclass(frozen=True)
class StuckReason:
    """A pending reason that no amount of waiting clears: the job is cancelled at once with
    `fix`."""

    reason: str
    meaning: str  # Slurm's own description, shortened (REASONS_SOURCE)
    fix: str


STUCK_REASONS: dict[str, StuckReason] = {
    r.reason: r
    for r in (
        StuckReason(
            "PartitionNodeLimit",
            "the number of nodes asked for is outside the partition's limits",
            "ask for fewer nodes (--nodes) or another partition; sinfo -s shows each "
            "partition's nodes",
        ),
        StuckReason(
            "PartitionTimeLimit",
            "the time limit asked for is past the partition's limit",
            "give a shorter --time; sinfo -s shows each partition's limit",
        ),
        StuckReason(
            "BadConstraints",
            "the job's constraints cannot be satisfied",
            "check --nodelist and any --constraint against sinfo",
        ),
        StuckReason(
            "InvalidAccount",
            "the job's account is invalid",
            "submit with an account you belong to (sacctmgr show assoc user=$USER)",
        ),
        StuckReason(
            "InvalidQOS",
            "the job's QOS is invalid",
            "submit with a QOS you may use (sacctmgr show assoc user=$USER)",
        ),
        StuckReason(
            "AccountNotAllowed",
            "the job's account may not use this partition",
            "choose another --partition or account",
        ),
        StuckReason(
            "QOSNotAllowed",
            "the job's QOS may not use this partition",
            "choose another --partition or QOS",
        ),
        StuckReason(
            "DependencyNeverSatisfied",
            "a dependency of the job can never be satisfied",
            "drop the dependency",
        ),
        StuckReason(
            "JobHeldAdmin",
            "the job is held by an administrator",
            "ask the administrators to release it (scontrol release)",
        ),
        StuckReason(
            "JobHeldUser",
            "the job is held by its user",
            "scontrol release JOBID, or drop the hold from the sbatch options",
        ),
    )
}

#: States sinfo prints for a node that will not take a job until someone acts ("*": not responding).
_DEAD_NODE_STATES = (
    "down",
    "drained",
    "draining",
    "drain",
    "fail",
    "failing",
    "inval",
    "maint",
    "future",
    "not_responding",
)


def squeue_command(job_id: str) -> list[str]:
    return ["squeue", "--noheader", f"--jobs={job_id}", "--format=%i|%T|%M|%N|%r"]


def sacct_command(job_id: str) -> list[str]:
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--jobs={job_id}",
        "--format=JobID,State,ExitCode,NodeList,Elapsed",
    ]


def scontrol_job_command(job_id: str) -> list[str]:
    return ["scontrol", "--oneliner", "show", "job", job_id]


def scancel_command(job_id: str) -> list[str]:
    return ["scancel", job_id]


@dataclass(frozen=True)
class JobState:
    """A job as squeue/sacct/scontrol tell it: state word, nodes, reason, exit code."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, TIMEOUT, CANCELLED, ...
    nodelist: str = ""
    reason: str = ""
    elapsed: str = ""
    exit_code: str = ""

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def state_word(text: str) -> str:
    """'CANCELLED by 0' -> 'CANCELLED'; 'TIMEOUT' stays; '' -> 'UNKNOWN'."""
    words = text.strip().split()
    return words[0].rstrip("+").upper() if words else "UNKNOWN"


def parse_squeue(output: str, job_id: str) -> JobState | None:
    """The job's line of `squeue --format=%i|%T|%M|%N|%r`, or None when squeue no longer lists
    it."""
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            return JobState(
                job_id, state_word(parts[1]), nodelist=parts[3], reason=parts[4], elapsed=parts[2]
            )
    return None


def parse_sacct(output: str, job_id: str) -> JobState | None:
    """The allocation's line of `sacct --parsable2
    --format=JobID,State,ExitCode,NodeList,Elapsed`."""
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            return JobState(
                job_id,
                state_word(parts[1]),
                nodelist=parts[3],
                elapsed=parts[4],
                exit_code=parts[2],
            )
    return None


def parse_scontrol_job(output: str, job_id: str) -> JobState | None:
    """`scontrol --oneliner show job` is KEY=VALUE pairs separated by spaces."""
    fields: dict[str, str] = {}
    for token in output.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    if fields.get("JobId") != job_id:
        return None
    nodelist = fields.get("NodeList", "")
    return JobState(
        job_id,
        state_word(fields.get("JobState", "")),
        nodelist="" if nodelist == "(null)" else nodelist,
        reason=fields.get("Reason", ""),
        elapsed=fields.get("RunTime", ""),
        exit_code=fields.get("ExitCode", ""),
    )


def unavailable_nodes(reason: str) -> str:
    """The host list in 'ReqNodeNotAvail, UnavailableNodes:gpu[01-02]' ('' when none is named)."""
    match = re.search(r"UnavailableNodes:(\S*)", reason)
    return match.group(1).strip("(),") if match else ""


def parse_sinfo_states(output: str) -> dict[str, str]:
    """`sinfo --noheader --Node --format=%N|%T` -> {node: state}."""
    states = {}
    for line in output.splitlines():
        node, sep, state = line.strip().partition("|")
        if sep:
            states[node] = state.strip().lower()
    return states


def stuck(state: JobState, node_states: dict[str, str] | None = None) -> str | None:
    """Why a pending job can never start as asked (then it is cancelled at once), or None while
    waiting may still help. Pure: `node_states` are the states of the nodes a ReqNodeNotAvail
    names; it counts as stuck only when every one of them is down, drained or failed, because
    busy schedulers show ReqNodeNotAvail for healthy nodes too (reframe-hpc/reframe#1049)."""
    if state.state != "PENDING":
        return None
    word = state.reason.split(",")[0].strip().strip("()")
    if word in STUCK_REASONS:
        entry = STUCK_REASONS[word]
        return f"{word}: {entry.meaning}: {entry.fix}"
    if word == "ReqNodeNotAvail" and node_states:
        dead = sorted(
            node
            for node, s in node_states.items()
            if s.rstrip("*~#!%$@^-") in _DEAD_NODE_STATES or s.endswith("*")
        )
        if dead and len(dead) == len(node_states):
            listed = ", ".join(f"{node} ({node_states[node]})" for node in dead)
            return (
                f"ReqNodeNotAvail: the node(s) it needs are down or drained: {listed}: ask for "
                "other nodes, or have them resumed"
            )
    return None


def pending_text(reason: str) -> str:
    """A pending job's progress detail: its reason, or what 'None' means."""
    word = (reason or "").strip()
    return "waiting in the queue" if word in ("", "None", "(null)") else f"waiting: {word}"


def query(job_id: str) -> JobState | None:
    """The job's state: squeue while it is known there, else sacct, else scontrol (no
    accounting)."""
    proc = run_slurm(squeue_command(job_id))
    state = parse_squeue(proc.stdout, job_id) if proc.returncode == 0 else None
    if state is not None and not state.final:
        return state
    acct = run_slurm(sacct_command(job_id))
    final = parse_sacct(acct.stdout, job_id) if acct.returncode == 0 else None
    if final is None or not final.final:
        shown = run_slurm(scontrol_job_command(job_id))
        final = parse_scontrol_job(shown.stdout, job_id) if shown.returncode == 0 else final
    return final or state


def cancel(job_id: str) -> bool:
    """scancel the job; True when Slurm took the request."""
    try:
        return run_slurm(scancel_command(job_id), timeout=30).returncode == 0
    except ToolError:
        return False


def node_states(nodelist: str) -> dict[str, str]:
    """{node: state} from sinfo for a host list ({} when sinfo cannot tell)."""
    try:
        proc = run_slurm(
            ["sinfo", "--noheader", "--Node", f"--nodes={nodelist}", "--format=%N|%T"], timeout=30
        )
    except ToolError:
        return {}
    return parse_sinfo_states(proc.stdout) if proc.returncode == 0 else {}


def jobs_of_rundir(rundir: str) -> list[str]:
    """Ids of this user's gpuenv jobs whose batch script is in `rundir` (a submit cut short by
    Ctrl-C may have queued one before it printed its id)."""
    import getpass

    try:
        proc = run_slurm(
            [
                "squeue",
                "--noheader",
                f"--user={getpass.getuser()}",
                f"--name={JOB_NAME}",
                "--format=%i|%o",
            ],
            timeout=30,
        )
    except ToolError:
        return []
    script = f"{rundir}/{BATCH_SCRIPT}"
    return [
        line.split("|", 1)[0].strip()
        for line in proc.stdout.splitlines()
        if line.strip().endswith(script)
    ]
