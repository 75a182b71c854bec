"""Why a remote engine cannot be used, decided by pure functions from what paramiko raised and
what `docker version` printed over SSH (the real servers in tests/fleet/test_fleet_ssh_causes.py
show the same causes end to end)."""

from __future__ import annotations

import socket

import paramiko
import pytest

from gpuenv.engine import (
    AUTH_REFUSED,
    ENGINE_NOT_ANSWERING,
    NO_DOCKER,
    UNREACHABLE,
    SshTarget,
    remote_engine_problem,
    ssh_problem,
)

TARGET = SshTarget("gpu1", "10.0.0.7", 2222, "ops")


@pytest.mark.parametrize(
    "err, cause, words",
    [
        (TimeoutError("timed out"), UNREACHABLE, "no answer within 20s"),
        (
            paramiko.ssh_exception.NoValidConnectionsError(
                {("10.0.0.7", 2222): ConnectionRefusedError(111, "Connection refused")}
            ),
            UNREACHABLE,
            "connection refused",
        ),
        (
            socket.gaierror(-2, "Name or service not known"),
            UNREACHABLE,
            "the name does not resolve",
        ),
        (
            paramiko.SSHException("Error reading SSH protocol banner"),
            UNREACHABLE,
            "no SSH greeting",
        ),
        (
            paramiko.AuthenticationException("Authentication failed."),
            AUTH_REFUSED,
            "SSH login to 10.0.0.7:2222 as ops refused",
        ),
        (paramiko.SSHException("No authentication methods available"), AUTH_REFUSED, "refused"),
        (
            paramiko.SSHException("Server '[10.0.0.7]:2222' not found in known_hosts"),
            AUTH_REFUSED,
            "ssh-keyscan -p 2222 10.0.0.7 >> ~/.ssh/known_hosts",
        ),
    ],
)
def test_ssh_failures_each_have_their_cause(err, cause, words):
    problem = ssh_problem(TARGET, err, 20)
    assert problem.cause == cause and words in problem.render(), problem.render()


@pytest.mark.parametrize(
    "status, out, err, cause, words",
    [
        (None, "", "", ENGINE_NOT_ANSWERING, "did not answer within 20s"),
        (
            127,
            "",
            "bash: line 1: docker: command not found",
            NO_DOCKER,
            "no `docker` command on its PATH",
        ),
        (
            1,
            "",
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker "
            "daemon running?",
            ENGINE_NOT_ANSWERING,
            "start dockerd there",
        ),
        (
            1,
            "",
            "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock",
            ENGINE_NOT_ANSWERING,
            "docker group",
        ),
    ],
)
def test_remote_docker_failures_each_have_their_cause(status, out, err, cause, words):
    problem = remote_engine_problem(TARGET, status, out, err, 20)
    assert problem is not None and problem.cause == cause and words in problem.render(), (
        problem.render() if problem else None
    )


def test_an_api_version_is_no_problem():
    assert remote_engine_problem(TARGET, 0, "1.47\n", "", 20) is None
    assert remote_engine_problem(TARGET, 0, "garbage", "", 20) is not None
