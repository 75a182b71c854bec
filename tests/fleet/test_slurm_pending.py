"""Pending jobs, decided by pure functions on what Slurm 22.05 printed (recorded from the
one-node test cluster of tests/fleet/servers.py): which reasons cannot clear, and what the
progress line says."""

from __future__ import annotations

import pytest

from gpuenv.fleet.slurm_queue import (
    REASONS_SOURCE,
    STUCK_REASONS,
    JobState,
    parse_scontrol_job,
    parse_sinfo_states,
    parse_squeue,
    pending_text,
    stuck,
    unavailable_nodes,
)

# `squeue --noheader --format=%i|%T|%M|%N|%r` and `scontrol --oneliner show job` for a job
# submitted with --nodelist=vm after `scontrol update nodename=vm state=down` (recorded).
SQUEUE_DOWN_NODE = "1|PENDING|0:00||ReqNodeNotAvail, UnavailableNodes:vm\n"
SCONTROL_DOWN_NODE = (
    "JobId=1 JobName=j.sh UserId=root(0) JobState=PENDING "
    "Reason=ReqNodeNotAvail,_UnavailableNodes:vm Dependency=(null) NodeList= NumNodes=1 "
    "RunTime=00:00:00 ExitCode=0:0\n"
)
SINFO_DOWN = "vm|down\n"


def pending(reason: str) -> JobState:
    return JobState("7", "PENDING", reason=reason)


@pytest.mark.parametrize(
    "reason",
    [
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "JobHeldAdmin",
    ],
)
def test_reasons_that_cannot_clear_stop_the_wait(reason):
    text = stuck(pending(reason))
    assert text is not None and text.startswith(f"{reason}: ") and STUCK_REASONS[reason].fix in text


@pytest.mark.parametrize(
    "reason",
    ["Resources", "Priority", "BeginTime", "None", "", "Dependency", "QOSMaxJobsPerUserLimit"],
)
def test_reasons_that_may_clear_keep_waiting(reason):
    assert stuck(pending(reason)) is None


def test_a_running_job_is_never_stuck():
    assert stuck(JobState("7", "RUNNING", reason="PartitionNodeLimit")) is None


def test_req_node_not_avail_for_down_nodes_is_stuck_from_both_outputs():
    for state in (parse_squeue(SQUEUE_DOWN_NODE, "1"), parse_scontrol_job(SCONTROL_DOWN_NODE, "1")):
        assert state is not None and unavailable_nodes(state.reason) == "vm"
        text = stuck(state, parse_sinfo_states(SINFO_DOWN))
        assert text is not None and "down or drained: vm (down)" in text


@pytest.mark.parametrize(
    "states, is_stuck",
    [
        ({"gpu01": "drained", "gpu02": "down*"}, True),
        ({"gpu01": "drained", "gpu02": "idle"}, False),  # one of them can still run it
        ({"gpu01": "idle*"}, True),  # not responding
        ({}, False),  # sinfo could not tell: keep waiting, --queue-time ends it
        (
            {"gpu01": "allocated"},
            False,
        ),  # busy schedulers show ReqNodeNotAvail for healthy nodes too
    ],
)
def test_req_node_not_avail_is_stuck_only_when_every_named_node_is_dead(states, is_stuck):
    assert (
        stuck(pending("ReqNodeNotAvail, UnavailableNodes:gpu[01-02]"), states) is not None
    ) is is_stuck


def test_pending_text_never_says_none():
    assert (
        pending_text("None") == "waiting in the queue"
        and pending_text("") == "waiting in the queue"
    )
    assert pending_text("Resources") == "waiting: Resources"


def test_the_reason_table_names_its_source():
    assert REASONS_SOURCE == "https://slurm.schedmd.com/job_reason_codes.html"
    assert all(entry.meaning and entry.fix for entry in STUCK_REASONS.values())
