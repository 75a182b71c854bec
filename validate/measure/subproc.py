"""Parent side of the isolated checks: start `python -m validate.measure.probe ...` with its own
environment and a timeout, and read its result (and, for memory checks, measure at each step)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from validate.envvars import seconds
from validate.measure.probe import RESULT, STEP

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the folder holding validate/
DEFAULT_TIMEOUT = seconds("VALIDATE_PROBE_TIMEOUT")


@dataclass
class ProbeResult:
    """What one child process said: its result dict, or `error` with the reason and stderr tail."""

    data: dict[str, Any] | None
    error: str | None
    seconds: float
    steps: dict[str, Any] = field(default_factory=dict)


def probe_env(changes: dict[str, str | None]) -> dict[str, str]:
    """This process's environment with `changes` applied (None removes a variable)."""
    env = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _python() -> list[str]:
    """This interpreter, with -S when we run without site-packages (children see what we see)."""
    return [sys.executable, "-S"] if sys.flags.no_site else [sys.executable]


def _parse(stdout_lines: list[str]) -> dict[str, Any] | None:
    for line in reversed(stdout_lines):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    return None


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the probe and everything it started (NCCL workers, TF's helpers): they share its
    process group, so one killpg reaches grandchildren that would otherwise keep holding GPUs."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


def run_command(
    command: list[str], env: dict[str, str], timeout: float
) -> tuple[int | None, str, str, float]:
    """Run `command` in a process group of its own: (exit status or None on timeout, stdout,
    stderr, seconds). On a timeout the whole group is killed, not only the direct child.

    The probe's temporary files (the DDP check's rendezvous folder, any `tempfile`) go into a
    folder this process makes and removes (TMPDIR), however the probe ends: a group killed on
    Ctrl-C or a timeout cannot run its own clean-up, and used to leave its folder each time."""
    started = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="validate-probe-")
    try:
        proc = subprocess.Popen(
            command,
            env={**env, "TMPDIR": scratch},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    try:
        return _wait(proc, timeout, started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _wait(
    proc: subprocess.Popen[str], timeout: float, started: float
) -> tuple[int | None, str, str, float]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        stdout, stderr = proc.communicate()
        return None, stdout or "", stderr or "", time.perf_counter() - started
    except BaseException:  # Ctrl-C: leave nothing running on the GPUs
        kill_group(proc)
        raise
    return proc.returncode, stdout, stderr, time.perf_counter() - started


def run_probe(
    args: list[str], env: dict[str, str | None] | None = None, timeout: float = DEFAULT_TIMEOUT
) -> ProbeResult:
    """Run one probe to completion (in its own process group, killed as a group on timeout)."""
    status, stdout, stderr, seconds = run_command(
        [*_python(), "-m", "validate.measure.probe", *args], probe_env(env or {}), timeout
    )
    if status is None:
        return ProbeResult(
            None,
            f"probe {' '.join(args)} did not finish within {timeout:.0f}s (its process group was "
            "killed)",
            seconds,
        )
    data = _parse(stdout.splitlines())
    if data is None:
        return ProbeResult(
            None,
            f"probe {' '.join(args)} exited {status} without a result: {_tail(stderr)}",
            seconds,
        )
    if "error" in data:
        return ProbeResult(data, f"probe {' '.join(args)}: {data['error']}", seconds)
    return ProbeResult(data, None, seconds)


def run_stepped_probe(
    args: list[str],
    env: dict[str, str | None],
    measure: Callable[[str, int], Any],
    timeout: float = DEFAULT_TIMEOUT,
) -> ProbeResult:
    """Run a probe that pauses at named steps; call `measure(step, pid)` at each, then let it go
    on."""
    started = time.perf_counter()
    deadline = started + timeout
    proc = subprocess.Popen(
        [*_python(), "-m", "validate.measure.probe", *args],
        env=probe_env(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    stderr_chunks: list[str] = []

    def pump_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def pump_stderr() -> None:
        assert proc.stderr is not None
        stderr_chunks.append(proc.stderr.read())

    threading.Thread(target=pump_stdout, daemon=True).start()
    threading.Thread(target=pump_stderr, daemon=True).start()
    steps: dict[str, Any] = {}
    seen: list[str] = []
    try:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                raise TimeoutError from None
            if line is None:
                break
            seen.append(line)
            if line.startswith(STEP):
                name = line[len(STEP) :].strip()
                steps[name] = measure(name, proc.pid)
                assert proc.stdin is not None
                proc.stdin.write("next\n")
                proc.stdin.flush()
        proc.wait(timeout=max(deadline - time.perf_counter(), 1))
    except KeyboardInterrupt:
        kill_group(proc)
        raise
    except (TimeoutError, subprocess.TimeoutExpired):
        kill_group(proc)
        return ProbeResult(
            None,
            f"probe {' '.join(args)} did not finish within {timeout:.0f}s",
            time.perf_counter() - started,
            steps,
        )
    seconds = time.perf_counter() - started
    data = _parse(seen)
    if data is None:
        return ProbeResult(
            None,
            f"probe {' '.join(args)} exited {proc.returncode} without a result: "
            f"{_tail(''.join(stderr_chunks))}",
            seconds,
            steps,
        )
    if "error" in data:
        return ProbeResult(data, f"probe {' '.join(args)}: {data['error']}", seconds, steps)
    return ProbeResult(data, None, seconds, steps)
