"""What this machine can run of the suite, as skip markers the validate tests share, and the full
suite run through its entry point (`python -m validate`) with its JSON and JUnit reports read.

`validate_in_process` runs the same command line through the function `python -m validate` calls
(validate.cli.main) in this process, for tests that judge the suite's verdicts, screen and reports
rather than the process boundary: it saves a Python start and pytest's and the frameworks' imports
per run (half a CPU-second a replay, some three with PyTorch). Tests of what only a process shows
(a signal, an import path, the environment it starts with) keep the subprocess.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from validate.host import nvml

REPO = Path(__file__).resolve().parents[2]
#: The frameworks the full suite's checks need that are not importable here.
MISSING = [m for m in ("torch", "tensorflow") if importlib.util.find_spec(m) is None]
HOST = nvml.read_host()
no_gpu_only = pytest.mark.skipif(
    bool(HOST.gpus),
    reason=f"NVML sees {len(HOST.gpus)} GPU(s): the no-GPU behaviour cannot be checked here",
)
no_nvml_here = pytest.mark.skipif(
    HOST.error != nvml.NO_DRIVER or any(Path("/dev").glob("nvidia[0-9]*")),
    reason="needs a host without the NVIDIA driver library and /dev/nvidia* "
    f"(here: {HOST.error or 'NVML answers'})",
)


def run_suite(out: Path, *args: str, env: dict[str, str] | None = None, quick: bool = True) -> dict:
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE", "VALIDATE_DDP_FAULT")
    }
    full_env["PYTHONPATH"] = str(REPO)
    full_env.update(env or {})
    out.mkdir()
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            *(["--quick"] if quick else []),
            "--json",
            str(out / "r.json"),
            "--junit",
            str(out / "r.xml"),
            *args,
        ],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads((out / "r.json").read_text())
    return {
        "status": done.returncode,
        "out": done.stdout + done.stderr,
        "seconds": time.perf_counter() - started,
        "rows": {c["check"]: c for c in report["host"]["checks"]},
        "junit": ET.parse(out / "r.xml").getroot(),
        "folder": out,
    }


def health_run(
    tmp_path: Path, plugin: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`python -m validate --health-only` of check 1's NVML health rows on a SYNTHETIC host (the
    test plugin `plugin` answers the suite's NVML hook): the run and its JSON report."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "validate", "--json", str(report), "--health-only"]
        + ["-p", plugin, "-k", "gpu_health and not dcgm", *args],
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests/validate")]),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.is_file(), done.stdout[-3000:] + done.stderr[-2000:]
    return done, json.loads(report.read_text())


def _suite_modules() -> dict[str, object]:
    """The suite's own modules now imported (validate and validate.*)."""
    return {
        name: module
        for name, module in sys.modules.items()
        if name == "validate" or name.startswith("validate.")
    }


def validate_in_process(
    args: list[str], env: dict[str, str] | None = None, unset: tuple[str, ...] = ()
) -> tuple[int, str, str]:
    """`python -m validate ARGS` run by validate.cli.main in this process, with `env` set and
    `unset` removed: (its exit status, what it printed on stdout, what on stderr).

    Each run starts as a new process would, from what could carry over in one:
    - the suite's modules are imported afresh (their import-time settings read this run's
      environment; the suite's conftest registers its plugin anew), and this process's own ones
      are put back after;
    - the environment, the working folder (the repository), sys.path, the SIGTERM handler the
      command installs and PyTorch's thread count (the CPU checks set it) are put back after.
    Libraries stay imported (PyTorch, pytest's plugins): that is the time it saves. One run at a
    time: pytest's capture of the process's output is not thread-safe.
    """
    saved_env = dict(os.environ)
    saved_path = list(sys.path)
    saved_cwd = os.getcwd()
    saved_term = signal.getsignal(signal.SIGTERM)
    saved_modules = _suite_modules()
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    out, err = io.StringIO(), io.StringIO()
    try:
        for name in saved_modules:
            del sys.modules[name]
        for name in unset:
            os.environ.pop(name, None)
        os.environ.update(env or {})
        os.chdir(REPO)
        sys.path.insert(0, str(REPO))  # this checkout's suite, as PYTHONPATH gives the subprocess
        from validate.cli import main

        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(args))
    finally:
        for name in _suite_modules():
            del sys.modules[name]
        sys.modules.update(saved_modules)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        os.chdir(saved_cwd)
        signal.signal(signal.SIGTERM, saved_term)
        torch = sys.modules.get("torch")
        if torch is not None and threads is not None:
            torch.set_num_threads(threads)
    return status, out.getvalue(), err.getvalue()
