"""Shared test helpers: run the real `invoke` in a subprocess, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INVOKE = [sys.executable, "-m", "invoke"]


def run_invoke(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `invoke ARGS` as a user would, capturing output (never through the shell)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*INVOKE, "--search-root", str(ROOT), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def invoke_cli():
    return run_invoke


@pytest.fixture(scope="session")
def docker_engine():
    """The engine gpuenv talks to; skips the Docker tests with the engine's own reason when down."""
    from gpuenv.engine import Engine
    from gpuenv.errors import ToolError

    try:
        return Engine.local().client
    except ToolError as err:
        pytest.skip(f"no Docker engine: {err.render()}")


@pytest.fixture(scope="session")
def cpu_stack():
    """The CPU stack the image, registry and install tests build: torch 2.13.0+cpu (the wheel on disk), Python 3.11."""
    from gpuenv.compat.resolve import Request, resolve_stack

    return resolve_stack(Request(cuda="cpu", framework="torch", torch="2.13.0", python="3.11"))
