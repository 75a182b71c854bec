"""What this machine can run of the suite, as skip markers the validate tests share, and the full
suite run through its entry point (`python -m validate`) with its JSON and JUnit reports read."""

from __future__ import annotations

import importlib.util
import json
import os
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
