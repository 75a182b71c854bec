"""Slurm: the one module that owns sbatch, squeue, sacct, scontrol and scancel.

One job, one task per node. Every command line and script is built by a pure function and every
output parsed by one, so both are tested on recorded text; the few functions at the bottom run
them. Each node runs the suite in the stack's image when the node has a working Docker, else
from a prefix on a shared path (`invoke install --prefix`), and writes its report, exit status
and runner into the run folder, which must be on a path every node sees.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpuenv.errors import BadInput, ToolError
from gpuenv.fleet.collected import read_suite_report
from gpuenv.fleet.interrupts import shielded
from gpuenv.fleet.outcome import CANCELLED, FAILED, TIMEOUT, UNREACHABLE, HostOutcome, status_from_report

JOB_NAME = "gpuenv-validate"
NODE_SCRIPT = "node.sh"
BATCH_SCRIPT = "job.sh"
NODES_DIR = "nodes"
BASELINE_FILE = "baseline.json"
#: Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, and UNLIMITED/INFINITE.
_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$", re.I)
#: A Slurm hostlist expression: gpu[01-08],login1
_NODELIST = re.compile(r"^[A-Za-z0-9._\-]+(\[[0-9,\-]+\])?([A-Za-z0-9._\-]*)(,[A-Za-z0-9._\-]+(\[[0-9,\-]+\])?[A-Za-z0-9._\-]*)*$")
_NAME = re.compile(r"^[A-Za-z0-9._\-]+$")
#: Job states that are over, as squeue/sacct/scontrol print them (sacct adds "by UID" to CANCELLED).
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}

#: The longest --time or --queue-time taken: a validation run is minutes to hours; a value past
#: this is a typo (and past it Python's waits and Slurm's limits overflow or turn "unlimited").
MAX_LIMIT_S = 7 * 24 * 3600
#: How long a job may wait in the queue when --queue-time is not given.
DEFAULT_QUEUE_TIME = "1:00:00"

Progress = Callable[[str, str, str], None]  # (job or node, phase, detail)


# ---------------------------------------------------------------- pending reasons that cannot clear (data)

#: Where the reason words and their meaning come from.
REASONS_SOURCE = "https://slurm.schedmd.com/job_reason_codes.html"


@dataclass(frozen=True)
class StuckReason:
    """A pending reason that no amount of waiting clears: the job is cancelled at once with `fix`."""

    reason: str
    meaning: str  # Slurm's own description, shortened (REASONS_SOURCE)
    fix: str


STUCK_REASONS: dict[str, StuckReason] = {r.reason: r for r in (
    StuckReason("PartitionNodeLimit", "the number of nodes asked for is outside the partition's limits",
                "ask for fewer nodes (--nodes) or another partition; sinfo -s shows each partition's nodes"),
    StuckReason("PartitionTimeLimit", "the time limit asked for is past the partition's limit",
                "give a shorter --time; sinfo -s shows each partition's limit"),
    StuckReason("BadConstraints", "the job's constraints cannot be satisfied",
                "check --nodelist and any --constraint against sinfo"),
    StuckReason("InvalidAccount", "the job's account is invalid", "submit with an account you belong to (sacctmgr show assoc user=$USER)"),
    StuckReason("InvalidQOS", "the job's QOS is invalid", "submit with a QOS you may use (sacctmgr show assoc user=$USER)"),
    StuckReason("AccountNotAllowed", "the job's account may not use this partition", "choose another --partition or account"),
    StuckReason("QOSNotAllowed", "the job's QOS may not use this partition", "choose another --partition or QOS"),
    StuckReason("DependencyNeverSatisfied", "a dependency of the job can never be satisfied", "drop the dependency"),
    StuckReason("JobHeldAdmin", "the job is held by an administrator", "ask the administrators to release it (scontrol release)"),
    StuckReason("JobHeldUser", "the job is held by its user", "scontrol release JOBID, or drop the hold from the sbatch options"),
)}
#: States sinfo prints for a node that will not take a job until someone acts ("*": not responding).
_DEAD_NODE_STATES = ("down", "drained", "draining", "drain", "fail", "failing", "inval", "maint", "future", "not_responding")


@dataclass(frozen=True)
class SlurmJob:
    """What to submit: where, for how long, and how each node runs the suite."""

    rundir: str  # shared folder for the scripts and the per-node reports
    nodes: int | None = None
    nodelist: str | None = None
    partition: str | None = None
    time: str | None = None
    image: str | None = None  # run in this image on nodes with Docker
    prefix: str | None = None  # else: PREFIX/bin/python -m validate
    gpus: str = "all"  # Docker's --gpus on nodes that run the image
    suite_args: list[str] = field(default_factory=list)
    baseline: bool = False  # RUNDIR/baseline.json is handed to the suite
    extra_sbatch: list[str] = field(default_factory=list)
    queue_time: str | None = None  # longest wait in the queue before the job is cancelled (default DEFAULT_QUEUE_TIME)


def check_job(job: SlurmJob) -> None:
    """Every option checked before anything is submitted: one line naming the bad value."""
    if job.nodes is not None and job.nodelist:
        raise BadInput("--nodes and --nodelist both given", fix="give --nodes N for any N nodes, or --nodelist LIST for those nodes")
    if job.nodes is not None and job.nodes < 1:
        raise BadInput(f"--nodes {job.nodes} is less than 1", fix="give 1 or more")
    if job.nodelist and not _NODELIST.match(job.nodelist):
        raise BadInput(f"--nodelist {job.nodelist!r} is not a Slurm host list", fix="write it as gpu[01-04],gpu07")
    if job.partition and not _NAME.match(job.partition):
        raise BadInput(f"--partition {job.partition!r} is not a partition name", fix="see sinfo -s for the partitions")
    if job.time:
        limit_seconds(job.time, "--time")
    limit_seconds(job.queue_time or DEFAULT_QUEUE_TIME, "--queue-time", unlimited=False)
    if not job.image and not job.prefix:
        raise BadInput("nothing to run on the nodes", fix="give --image REF (nodes with Docker) and/or --prefix PATH (made by invoke install --prefix on a shared path)")
    if job.prefix and not Path(job.prefix).is_absolute():
        raise BadInput(f"--prefix {job.prefix} is not an absolute path", fix="give the prefix's absolute path on the shared file system")


def limit_seconds(text: str, flag: str = "--time", *, unlimited: bool = True) -> float | None:
    """Slurm's time forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds; None for UNLIMITED or
    INFINITE when `unlimited`. A value past MAX_LIMIT_S or of zero is a mistake to name."""
    value = str(text).strip()
    fix = "use minutes (30), M:S (0:30), H:M:S (1:00:00) or D-H (1-0)"
    if value.upper() in ("UNLIMITED", "INFINITE"):
        if unlimited:
            return None
        raise BadInput(f"{flag} {text!r} has no end", fix=f"give a limit of at most 7 days, e.g. {flag} 1:00:00")
    if not _TIME.match(value) or len(value) > 20:
        raise BadInput(f"{flag} {text!r} is not a time limit", fix=fix)
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?", value)
    assert match  # _TIME accepted it
    days, first, second, third = match.groups()
    if days is not None:  # D-H[:M[:S]]
        seconds = (int(days) * 24 + int(first)) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # H:M:S
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    else:  # M or M:S
        seconds = int(first) * 60 + int(second or 0)
    if seconds <= 0:
        raise BadInput(f"{flag} {text!r} is no time at all", fix=fix)
    if seconds > MAX_LIMIT_S:
        raise BadInput(f"{flag} {text!r} is more than the maximum of 7 days (7-0)", fix=f"give at most {flag} 7-0")
    return float(seconds)


def check_rundir(rundir: str) -> None:
    """The run folder can be made and written, checked before anything is submitted."""
    import os

    path = Path(rundir)
    fix = "give --rundir a folder on a shared path you can write (home is shared on most clusters)"
    from validate.files import path_problem

    problem = path_problem(rundir)  # names and lengths: the task layer's one check
    if problem:
        raise BadInput(f"--rundir {rundir}: {problem}", fix=fix)
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            raise BadInput(f"--rundir {rundir}: {existing} is a dangling symlink", fix=fix)
        existing = existing.parent
    if not existing.is_dir():
        raise BadInput(f"--rundir {rundir}: {existing} is not a folder", fix=fix)
    problem = writable_folder_problem(existing)
    if problem:
        raise BadInput(f"--rundir {rundir}: {existing} cannot be written ({problem})", fix=fix)


def writable_folder_problem(folder: Path) -> str | None:
    """Why nothing can be made in `folder`, found by making (and removing) an empty folder there;
    None when it can. Tried rather than asked of access(): root passes every access() check, and
    a read-only mount or /proc only says no when asked to write."""
    import tempfile

    try:
        Path(tempfile.mkdtemp(prefix=".gpuenv-write-check-", dir=folder)).rmdir()
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


# ---------------------------------------------------------------- command lines (pure)


def sbatch_command(job: SlurmJob) -> list[str]:
    """`sbatch` for one task per node; the batch script is RUNDIR/job.sh (render_batch_script)."""
    rundir = job.rundir
    cmd = ["sbatch", "--parsable", f"--job-name={JOB_NAME}", f"--output={rundir}/slurm-%j.out",
           f"--chdir={rundir}", "--ntasks-per-node=1"]
    if job.nodes is not None:
        cmd.append(f"--nodes={job.nodes}")
    if job.nodelist:
        cmd.append(f"--nodelist={job.nodelist}")
    if job.partition:
        cmd.append(f"--partition={job.partition}")
    if job.time:
        cmd.append(f"--time={job.time}")
    return [*cmd, *job.extra_sbatch, f"{rundir}/{BATCH_SCRIPT}"]


def render_batch_script(job: SlurmJob) -> str:
    """The batch script: one srun task per node; one node's failure does not stop the others."""
    return (
        "#!/bin/bash\n"
        "# gpuenv fleet validation (written by gpuenv): run node.sh once on every node of the job.\n"
        "# --kill-on-bad-exit=0: a node whose suite fails must not kill the other nodes' runs.\n"
        f"exec srun --ntasks-per-node=1 --kill-on-bad-exit=0 bash {shlex.quote(job.rundir + '/' + NODE_SCRIPT)}\n"
    )


def suite_command(python: str, report: str, job: SlurmJob, baseline: str) -> str:
    """The suite's command line on a node. `python`, `report` and `baseline` are shell words
    written by gpuenv (they may expand variables); the user's suite options are quoted."""
    words = [python, "-m", "validate", "--json", report, *(shlex.quote(a) for a in job.suite_args)]
    if job.baseline:
        words += ["--baseline", baseline]
    return " ".join(words)


def docker_run_command(job: SlurmJob) -> str:
    """`docker run` of the suite in the image, as the node's user, writing into the node's folder."""
    assert job.image
    words = ["docker", "run", "--rm", "--init", "--shm-size", "8g", "--label", "io.gpuenv.fleet=validate",
             "-u", '"$(id -u):$(id -g)"', "-e", "HOME=/tmp", "-v", '"$out":/gpuenv-out']
    if job.gpus.strip().lower() == "none":
        words += ["-e", "NVIDIA_VISIBLE_DEVICES=void"]  # an engine whose default runtime is nvidia would hand out all
    else:
        words += ["--gpus", shlex.quote(job.gpus)]
    if job.baseline:
        words += ["-v", shlex.quote(f"{job.rundir}/{BASELINE_FILE}") + ":/gpuenv-baseline.json:ro"]
    words.append(shlex.quote(job.image))
    return " ".join(words) + " " + suite_command("python", "/gpuenv-out/report.json", job, "/gpuenv-baseline.json")


def render_node_script(job: SlurmJob) -> str:
    """What one node runs: Docker with the image when the node has a working engine, else the
    prefix; it records its runner, the suite's exit status and any reason it could not run."""
    rundir = shlex.quote(job.rundir)
    image = shlex.quote(job.image or "")
    prefix = shlex.quote(job.prefix or "")
    baseline = f"{job.rundir}/{BASELINE_FILE}"
    lines = [
        "#!/bin/bash",
        "# gpuenv fleet validation, one node's run (written by gpuenv; srun starts it once per node).",
        "set -u",
        'node=${SLURMD_NODENAME:-$(hostname -s)}',
        f'out={rundir}/{NODES_DIR}/"$node"',
        'mkdir -p "$out" && : > "$out/started"',
        "status=0",
        f"image={image}",
        f"prefix={prefix}",
        'if [ -n "$image" ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then',
        '    echo docker > "$out/runner"',
        '    if ! docker image inspect "$image" >/dev/null 2>&1; then',
        '        echo "pulling $image" >&2',
        '        docker pull -q "$image" >/dev/null 2>"$out/error" || status=125',
        "    fi",
        f'    [ "$status" = 0 ] && {{ {docker_run_command(job) if job.image else "true"}; status=$?; }}',
        'elif [ -n "$prefix" ] && [ -x "$prefix/bin/python" ]; then',
        '    echo prefix > "$out/runner"',
        "    " + suite_command('"$prefix/bin/python"', '"$out/report.json"', job, shlex.quote(baseline)),
        "    status=$?",
        "else",
        '    echo "no way to run the suite here: ${image:+no working Docker engine for $image; }${prefix:+no $prefix/bin/python; }give --image for nodes with Docker or --prefix on a shared path" > "$out/error"',
        "    status=127",
        "fi",
        'echo "$status" > "$out/exit"',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def squeue_command(job_id: str) -> list[str]:
    return ["squeue", "--noheader", f"--jobs={job_id}", "--format=%i|%T|%M|%N|%r"]


def sacct_command(job_id: str) -> list[str]:
    return ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job_id}",
            "--format=JobID,State,ExitCode,NodeList,Elapsed"]


def scontrol_job_command(job_id: str) -> list[str]:
    return ["scontrol", "--oneliner", "show", "job", job_id]


def hostnames_command(nodelist: str) -> list[str]:
    return ["scontrol", "show", "hostnames", nodelist]


def scancel_command(job_id: str) -> list[str]:
    return ["scancel", job_id]


# ---------------------------------------------------------------- parsing (pure)


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


def parse_sbatch(output: str) -> str:
    """`sbatch --parsable` prints 'JOBID' or 'JOBID;CLUSTER'."""
    text = output.strip().splitlines()[-1] if output.strip() else ""
    job_id = text.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ToolError(f"sbatch did not print a job id (got {output.strip()[:200]!r})", fix="run sbatch by hand to see why")
    return job_id


def state_word(text: str) -> str:
    """'CANCELLED by 0' -> 'CANCELLED'; 'TIMEOUT' stays; '' -> 'UNKNOWN'."""
    words = text.strip().split()
    return words[0].rstrip("+").upper() if words else "UNKNOWN"


def parse_squeue(output: str, job_id: str) -> JobState | None:
    """The job's line of `squeue --format=%i|%T|%M|%N|%r`, or None when squeue no longer lists it."""
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            return JobState(job_id, state_word(parts[1]), nodelist=parts[3], reason=parts[4], elapsed=parts[2])
    return None


def parse_sacct(output: str, job_id: str) -> JobState | None:
    """The allocation's line of `sacct --parsable2 --format=JobID,State,ExitCode,NodeList,Elapsed`."""
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            return JobState(job_id, state_word(parts[1]), nodelist=parts[3], elapsed=parts[4], exit_code=parts[2])
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
    return JobState(job_id, state_word(fields.get("JobState", "")), nodelist="" if nodelist == "(null)" else nodelist,
                    reason=fields.get("Reason", ""), elapsed=fields.get("RunTime", ""), exit_code=fields.get("ExitCode", ""))


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
        dead = sorted(node for node, s in node_states.items() if s.rstrip("*~#!%$@^-") in _DEAD_NODE_STATES or s.endswith("*"))
        if dead and len(dead) == len(node_states):
            listed = ", ".join(f"{node} ({node_states[node]})" for node in dead)
            return f"ReqNodeNotAvail: the node(s) it needs are down or drained: {listed}: ask for other nodes, or have them resumed"
    return None


def pending_text(reason: str) -> str:
    """A pending job's progress detail: its reason, or what 'None' means."""
    word = (reason or "").strip()
    return "waiting in the queue" if word in ("", "None", "(null)") else f"waiting: {word}"


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
        return HostOutcome(node, status, reason, report=files.report, exit_code=files.exit, details=details)
    if job.state == "TIMEOUT":
        return HostOutcome(node, TIMEOUT, f"job {job.job_id} reached its time limit{' (--time ' + time_limit + ')' if time_limit else ''} "
                           f"before this node's suite finished: give a longer --time", details=details)
    if job.state in ("CANCELLED", "PREEMPTED", "REVOKED", "DEADLINE"):
        when = "while this node's suite ran" if files.started else "before this node started"
        return HostOutcome(node, CANCELLED, f"job {job.job_id} was {job.state.lower()} {when}", details=details)
    if job.state in ("NODE_FAIL", "BOOT_FAIL"):
        return HostOutcome(node, UNREACHABLE, f"Slurm reports {job.state} for job {job.job_id}: the node went down", details=details)
    if job.state == "OUT_OF_MEMORY":
        return HostOutcome(node, FAILED, f"job {job.job_id} ran out of memory on this node: ask for more with --mem", details=details)
    why = f" ({job.reason})" if job.reason and job.reason != "None" else ""
    return HostOutcome(node, FAILED, f"job {job.job_id} ended {job.state}{why} and this node wrote no exit status"
                       + ("" if files.started else ": the node never started the suite (is the run folder on a shared path?)"), details=details)


def job_outcomes(nodes: list[str], node_files: dict[str, NodeFiles], job: JobState, time_limit: str | None) -> list[HostOutcome]:
    """Every node's outcome; a job that never ran on any node is one line under its id."""
    if not nodes:
        state = job.state if job.state != "PENDING" else "CANCELLED"
        status = {"CANCELLED": CANCELLED, "TIMEOUT": TIMEOUT}.get(state, FAILED)
        why = f" ({job.reason})" if job.reason and job.reason != "None" else ""
        return [HostOutcome(f"slurm job {job.job_id}", status, f"job {job.job_id} ended {state}{why} before any node was allocated",
                            details={"job_id": job.job_id, "job_state": job.state})]
    return [node_outcome(node, node_files.get(node, NodeFiles()), job, time_limit) for node in nodes]


# ---------------------------------------------------------------- running (I/O)


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ToolError(f"{cmd[0]} is not installed on this machine",
                        fix="run invoke validate --slurm on a Slurm login node (where sbatch and squeue are on PATH)") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{cmd[0]} did not answer within {timeout:.0f}s", fix="check that slurmctld is up (scontrol ping)") from None


def write_scripts(job: SlurmJob, baseline: bytes | None = None) -> None:
    """The run folder with its two scripts (and the baseline); written before sbatch sees it."""
    from validate.files import write_text_atomic

    folder = Path(job.rundir)
    (folder / NODES_DIR).mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / BATCH_SCRIPT, render_batch_script(job))
    write_text_atomic(folder / NODE_SCRIPT, render_node_script(job))
    if baseline is not None:
        (folder / BASELINE_FILE).write_bytes(baseline)


def submit(job: SlurmJob) -> str:
    proc = _run(sbatch_command(job))
    if proc.returncode != 0:
        text = (proc.stderr or proc.stdout).strip()
        reason = text.splitlines()[-1] if text else f"exit status {proc.returncode}"
        fix = ("run it on a Slurm login node, or set SLURM_CONF to the cluster's slurm.conf" if "configuration" in reason
               else "check --partition/--nodes/--nodelist/--time against sinfo -s")
        raise ToolError(f"sbatch refused the job ({reason})", fix=fix)
    return parse_sbatch(proc.stdout)


def query(job_id: str) -> JobState | None:
    """The job's state: squeue while it is known there, else sacct, else scontrol (no accounting)."""
    proc = _run(squeue_command(job_id))
    state = parse_squeue(proc.stdout, job_id) if proc.returncode == 0 else None
    if state is not None and not state.final:
        return state
    acct = _run(sacct_command(job_id))
    final = parse_sacct(acct.stdout, job_id) if acct.returncode == 0 else None
    if final is None or not final.final:
        shown = _run(scontrol_job_command(job_id))
        final = parse_scontrol_job(shown.stdout, job_id) if shown.returncode == 0 else final
    return final or state


def cancel(job_id: str) -> bool:
    """scancel the job; True when Slurm took the request."""
    try:
        return _run(scancel_command(job_id), timeout=30).returncode == 0
    except ToolError:
        return False


def node_states(nodelist: str) -> dict[str, str]:
    """{node: state} from sinfo for a host list ({} when sinfo cannot tell)."""
    try:
        proc = _run(["sinfo", "--noheader", "--Node", f"--nodes={nodelist}", "--format=%N|%T"], timeout=30)
    except ToolError:
        return {}
    return parse_sinfo_states(proc.stdout) if proc.returncode == 0 else {}


def jobs_of_rundir(rundir: str) -> list[str]:
    """Ids of this user's gpuenv jobs whose batch script is in `rundir` (a submit cut short by
    Ctrl-C may have queued one before it printed its id)."""
    import getpass

    try:
        proc = _run(["squeue", "--noheader", f"--user={getpass.getuser()}", f"--name={JOB_NAME}", "--format=%i|%o"], timeout=30)
    except ToolError:
        return []
    script = f"{rundir}/{BATCH_SCRIPT}"
    return [line.split("|", 1)[0].strip() for line in proc.stdout.splitlines() if line.strip().endswith(script)]


def expand_nodelist(nodelist: str) -> list[str]:
    if not nodelist:
        return []
    proc = _run(hostnames_command(nodelist))
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 else [nodelist]


def read_node_files(rundir: str, node: str) -> NodeFiles:
    folder = Path(rundir) / NODES_DIR / node

    def text(name: str) -> str | None:
        try:
            return (folder / name).read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return None

    exit_text = text("exit")
    return NodeFiles(
        started=(folder / "started").exists(),
        exit=int(exit_text) if exit_text and exit_text.lstrip("-").isdigit() else None,
        runner=text("runner"),
        error=text("error") or None,
        report=read_suite_report(folder / "report.json"),
    )


def run_job(job: SlurmJob, *, baseline: bytes | None = None, progress: Progress | None = None, poll_s: float = 2.0) -> list[HostOutcome]:
    """Submit, wait with progress, collect every node's outcome.

    A job pending for a reason that cannot clear (STUCK_REASONS, or nodes it needs that are
    down) is cancelled at once with that reason; one that waits past --queue-time is cancelled
    too. Ctrl-C or SIGTERM cancels the job (scancel, shielded from a second interrupt) and
    propagates with `.cleanup` saying so.
    """
    say = progress or (lambda who, phase, detail: None)
    check_job(job)
    queue_limit = limit_seconds(job.queue_time or DEFAULT_QUEUE_TIME, "--queue-time", unlimited=False) or float(MAX_LIMIT_S)
    try:
        write_scripts(job, baseline)
    except OSError as err:
        raise ToolError(f"cannot write the run folder {job.rundir} ({err.strerror or err})",
                        fix="give --rundir a folder on a shared path with free space you can write") from None
    job_id: str | None = None
    started = time.monotonic()
    try:
        job_id = submit(job)
        say(f"job {job_id}", "queued", f"submitted to {job.partition or 'the default partition'}")
        last: tuple[str, str] | None = None
        state: JobState | None = None
        node_phase: dict[str, str] = {}
        while True:
            state = query(job_id)
            if state is None:
                raise ToolError(f"Slurm no longer knows job {job_id}", fix=f"see {job.rundir}/slurm-{job_id}.out")
            if state.state == "PENDING":
                names = unavailable_nodes(state.reason)
                why = stuck(state, node_states(names) if names else None)
                waited = time.monotonic() - started
                if why is not None or waited > queue_limit:
                    return _give_up(job, job_id, state, why, waited, say)
            nodes = expand_nodelist(state.nodelist) if state.nodelist and state.state != "PENDING" else []
            files = {n: read_node_files(job.rundir, n) for n in nodes}
            done = sum(1 for f in files.values() if f.exit is not None)
            detail = pending_text(state.reason) if state.state == "PENDING" else f"{done}/{len(nodes)} node(s) done, {state.elapsed}"
            if (state.state, detail) != last:
                say(f"job {job_id}", state.state.lower(), detail)
                last = (state.state, detail)
            for node, f in files.items():  # progress per node, from what each node wrote so far
                phase = "done" if f.exit is not None else "running" if f.started else "queued"
                if node_phase.get(node) != phase:
                    node_phase[node] = phase
                    say(node, phase, f"suite exited {f.exit}" if f.exit is not None else (f.runner or ""))
            if state.final:
                break
            time.sleep(poll_s)
    except KeyboardInterrupt as interrupt:
        with shielded():
            ids = [job_id] if job_id else jobs_of_rundir(job.rundir)
            cancelled = [i for i in ids if cancel(i)]
            failed = [i for i in ids if i not in cancelled]
        interrupt.cleanup = (  # type: ignore[attr-defined]
            (f"cancelled job {', '.join(cancelled)} (scancel)" if cancelled else "no job was queued")
            + (f"; could NOT cancel job {', '.join(failed)}: scancel {' '.join(failed)}" if failed else "")
            + f"; the run folder {job.rundir} keeps what the nodes wrote")
        if job_id:
            say(f"job {job_id}", "cancelled", "scancel sent after the interrupt" if cancelled else "scancel FAILED")
        raise
    nodes = expand_nodelist(state.nodelist)
    outcomes = job_outcomes(nodes, {n: read_node_files(job.rundir, n) for n in nodes}, state, job.time)
    elapsed = round(time.monotonic() - started, 2)
    for outcome in outcomes:
        outcome.seconds = outcome.seconds or elapsed
        outcome.details["log"] = f"{job.rundir}/slurm-{job_id}.out"
        say(outcome.host, "done", outcome.status)
    return outcomes


def _give_up(job: SlurmJob, job_id: str, state: JobState, why: str | None, waited: float, say: Progress) -> list[HostOutcome]:
    """Cancel a job that cannot start (`why`) or waited past --queue-time; its one outcome."""
    ok = cancel(job_id)
    for _ in range(20):  # let the cancel land, so the state we report is Slurm's, not a guess
        final = query(job_id)
        if final is None or final.final:
            break
        time.sleep(0.25)
    cancelled = "cancelled it" if ok else f"scancel {job_id} FAILED: cancel it by hand"
    if why is not None:
        status, reason = FAILED, f"job {job_id} can never start as asked ({why}); {cancelled}"
    else:
        limit = job.queue_time or DEFAULT_QUEUE_TIME
        status = TIMEOUT
        reason = (f"job {job_id} waited {waited:.0f}s in the queue, past --queue-time {limit} "
                  f"({pending_text(state.reason)}); {cancelled}: give a longer --queue-time or a less busy partition")
    say(f"job {job_id}", "cancelled" if ok else "pending", reason[:60])
    outcome = HostOutcome(f"slurm job {job_id}", status, reason, seconds=round(waited, 2),
                          details={"job_id": job_id, "job_state": "PENDING", "pending_reason": state.reason,
                                   "log": f"{job.rundir}/slurm-{job_id}.out"})
    say(outcome.host, "done", status)
    return [outcome]
