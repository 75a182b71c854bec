"""Shared helpers of the team-workflow tests: where things are, and running tasks as a user
would."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BASE_IMAGE = os.environ.get("GPUENV_TEST_BASE_IMAGE", "gpuenv-test-base:bookworm")
WHEELHOUSE = Path(os.environ.get("GPUENV_TEST_WHEELHOUSE", "/opt/wheels"))
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CPU_STACK_ARGS = ("--cuda", "cpu", "--framework", "torch", "--torch", "2.13.0", "--python", "3.11")


def run_invoke(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """`invoke ARGS` from the repository root (tasks.py), output captured: not a terminal."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_gpuenv(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """The `gpuenv` console command (gpuenv.cli.program:main), run from `cwd`."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gpuenv.cli.program", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    """The one line a refused command printed on stderr (exit 2, no traceback)."""
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def team_build_args(base_image: str, wheelhouse: Path) -> list[str]:
    """`build` of the team's CPU image from a wheelhouse holding every locked wheel (no network
    needed)."""
    return [
        "build",
        *CPU_STACK_ARGS,
        "--base-image",
        base_image,
        "--backend",
        "uv",
        "--wheelhouse",
        str(wheelhouse),
    ]
