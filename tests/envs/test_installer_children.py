"""An installer's own workers end with it: Ctrl-C or SIGTERM while a pool of workers like
`python -m compileall -j 0` (the install's and the conda image build's bytecode step) runs used to
leave its worker processes running forever. The installer runs in its own process group, ended
as a whole."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuenv.envs import condalock, uv


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for good (its parent has not reaped it yet)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


WORKERS = """
import concurrent.futures, os, sys, time
with concurrent.futures.ProcessPoolExecutor(2) as pool:
    futures = [pool.submit(time.sleep, 300) for _ in range(2)]
    time.sleep(0.5)
    print("workers", *[p.pid for p in pool._processes.values()], flush=True)
    time.sleep(300)
"""


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_ends_the_installer_and_every_worker_it_started(stop):
    seen: list[int] = []

    def on_line(line: str) -> None:
        if line.startswith("workers"):
            seen.extend(int(p) for p in line.split()[1:])
            raise stop()

    started = time.monotonic()
    with pytest.raises(stop):
        uv.run_installer([sys.executable, "-c", WORKERS], on_line=on_line, tool="a pool of workers")
    assert len(seen) == 2
    assert _gone_within(seen, 10) == [], "workers were left running"
    assert time.monotonic() - started < 30


def test_an_interrupt_during_the_real_bytecode_step_leaves_no_compileall_worker(tmp_path):
    """The bytecode step itself (condalock.BYTECODE_SCRIPT and its pool of workers), on a
    site-packages big enough to keep its workers busy."""
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for i in range(200):
        (site / f"m{i}.py").write_text("x = 1\n" * 5000)
    (tmp_path / "env" / "bin").mkdir()
    (tmp_path / "env" / "bin" / "python").symlink_to(sys.executable)
    before = _children_of_group_compileall()
    running: list[int] = []

    def on_line(_line: str) -> None:
        pass

    def interrupt() -> None:  # Ctrl-C, as the terminal sends it, once the pool is at work
        running.extend(p for p in _children_of_group_compileall() if p not in before)
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(1.0, interrupt)
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        condalock.compile_bytecode(tmp_path / "env", on_line, cache=tmp_path / "bytecode")
    timer.cancel()
    assert time.monotonic() - started < 15, "the interrupt waited for compileall to finish"
    assert len(running) >= 2, "the bytecode step and its workers were not seen at work"
    left = [p for p in _gone_within(_children_of_group_compileall(), 10) if p not in before]
    assert left == [], f"compileall processes left: {left}"


def _children_of_group_compileall() -> list[int]:
    """Processes running `-m compileall` or the bytecode step's script with this test's python
    (any parent: orphans too; the step's forked workers share its command line)."""
    script = condalock.BYTECODE_SCRIPT.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                b"compileall" in cmd
                or script in cmd
                or any(b"multiprocessing" in part and b"spawn" in part for part in cmd)
            ):
                found.append(int(entry.name))
    return [p for p in found if _alive(p)]
