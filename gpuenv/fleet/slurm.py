"""Slurm: the one owner of sbatch, squeue, sacct, scontrol and scancel, in three modules run here.

One job, one task per node. Every command line and script is built by a pure function and every
output parsed by one, so both are tested on recorded text; `run_job` below runs them: it submits
(slurm_job.py), watches the queue (slurm_queue.py) and collects each node's outcome
(slurm_results.py). Each node runs the suite in the stack's image when the node has a working
Docker, else from a prefix on a shared path (`invoke install --prefix`), and writes its report,
exit status and runner into the run folder, which must be on a path every node sees. Callers import
each name from the module that defines it.
"""

from __future__ import annotations

import time
from typing import Callable

from gpuenv.errors import ToolError
from gpuenv.fleet.interrupts import shielded
from gpuenv.fleet.outcome import FAILED, TIMEOUT, HostOutcome
from gpuenv.fleet.slurm_job import (
    DEFAULT_QUEUE_TIME,
    MAX_LIMIT_S,
    SlurmJob,
    check_job,
    limit_seconds,
    submit,
    write_scripts,
)
from gpuenv.fleet.slurm_queue import (
    JobState,
    cancel,
    jobs_of_rundir,
    node_states,
    pending_text,
    query,
    stuck,
    unavailable_nodes,
)
from gpuenv.fleet.slurm_results import (
    expand_nodelist,
    job_outcomes,
    read_node_files,
)

Progress = Callable[[str, str, str], None]  # (job or node, phase, detail)


def run_job(
    job: SlurmJob,
    *,
    baseline: bytes | None = None,
    progress: Progress | None = None,
    poll_s: float = 2.0,
) -> list[HostOutcome]:
    """Submit, wait with progress, collect every node's outcome.

    A job pending for a reason that cannot clear (STUCK_REASONS, or nodes it needs that are
    down) is cancelled at once with that reason; one that waits past --queue-time is cancelled
    too. Ctrl-C or SIGTERM cancels the job (scancel, shielded from a second interrupt) and
    propagates with `.cleanup` saying so.
    """
    say = progress or (lambda who, phase, detail: None)
    check_job(job)
    queue_limit = limit_seconds(
        job.queue_time or DEFAULT_QUEUE_TIME, "--queue-time", unlimited=False
    ) or float(MAX_LIMIT_S)
    try:
        write_scripts(job, baseline)
    except OSError as err:
        raise ToolError(
            f"cannot write the run folder {job.rundir} ({err.strerror or err})",
            fix="give --rundir a folder on a shared path with free space you can write",
        ) from None
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
                raise ToolError(
                    f"Slurm no longer knows job {job_id}",
                    fix=f"see {job.rundir}/slurm-{job_id}.out",
                )
            if state.state == "PENDING":
                names = unavailable_nodes(state.reason)
                why = stuck(state, node_states(names) if names else None)
                waited = time.monotonic() - started
                if why is not None or waited > queue_limit:
                    return _give_up(job, job_id, state, why, waited, say)
            nodes = (
                expand_nodelist(state.nodelist)
                if state.nodelist and state.state != "PENDING"
                else []
            )
            files = {n: read_node_files(job.rundir, n) for n in nodes}
            done = sum(1 for f in files.values() if f.exit is not None)
            detail = (
                pending_text(state.reason)
                if state.state == "PENDING"
                else f"{done}/{len(nodes)} node(s) done, {state.elapsed}"
            )
            if (state.state, detail) != last:
                say(f"job {job_id}", state.state.lower(), detail)
                last = (state.state, detail)
            for node, f in files.items():  # progress per node, from what each node wrote so far
                phase = "done" if f.exit is not None else "running" if f.started else "queued"
                if node_phase.get(node) != phase:
                    node_phase[node] = phase
                    say(
                        node,
                        phase,
                        f"suite exited {f.exit}" if f.exit is not None else (f.runner or ""),
                    )
            if state.final:
                break
            time.sleep(poll_s)
    except KeyboardInterrupt as interrupt:
        with shielded():
            ids = [job_id] if job_id else jobs_of_rundir(job.rundir)
            cancelled = [i for i in ids if cancel(i)]
            failed = [i for i in ids if i not in cancelled]
        interrupt.cleanup = (  # type: ignore[attr-defined]
            (
                f"cancelled job {', '.join(cancelled)} (scancel)"
                if cancelled
                else "no job was queued"
            )
            + (
                f"; could NOT cancel job {', '.join(failed)}: scancel {' '.join(failed)}"
                if failed
                else ""
            )
            + f"; the run folder {job.rundir} keeps what the nodes wrote"
        )
        if job_id:
            say(
                f"job {job_id}",
                "cancelled",
                "scancel sent after the interrupt" if cancelled else "scancel FAILED",
            )
        raise
    nodes = expand_nodelist(state.nodelist)
    outcomes = job_outcomes(
        nodes, {n: read_node_files(job.rundir, n) for n in nodes}, state, job.time
    )
    elapsed = round(time.monotonic() - started, 2)
    for outcome in outcomes:
        outcome.seconds = outcome.seconds or elapsed
        outcome.details["log"] = f"{job.rundir}/slurm-{job_id}.out"
        say(outcome.host, "done", outcome.status)
    return outcomes


def _give_up(
    job: SlurmJob, job_id: str, state: JobState, why: str | None, waited: float, say: Progress
) -> list[HostOutcome]:
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
        reason = (
            f"job {job_id} waited {waited:.0f}s in the queue, past --queue-time {limit} "
            f"({pending_text(state.reason)}); {cancelled}: give a longer --queue-time or a less "
            "busy partition"
        )
    say(f"job {job_id}", "cancelled" if ok else "pending", reason[:60])
    outcome = HostOutcome(
        f"slurm job {job_id}",
        status,
        reason,
        seconds=round(waited, 2),
        details={
            "job_id": job_id,
            "job_state": "PENDING",
            "pending_reason": state.reason,
            "log": f"{job.rundir}/slurm-{job_id}.out",
        },
    )
    say(outcome.host, "done", status)
    return [outcome]
