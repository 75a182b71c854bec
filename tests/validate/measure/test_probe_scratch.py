"""A probe's temporary files end with it, however it ends: the DDP check's rendezvous folder was
left behind on every Ctrl-C (its process group is killed, so its own clean-up never ran). The
parent makes the probe's TMPDIR and removes it (validate/measure/subproc.py: run_command)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from validate.measure.subproc import run_command

# What the DDP check does: a tempfile.TemporaryDirectory, then work that never finishes.
PROBE = (
    "import sys, tempfile, time\nd = tempfile.mkdtemp(prefix='gpuenv-ddp-')\n"
    "print(d, flush=True)\ntime.sleep(300)\n"
)


def test_a_probe_killed_at_its_timeout_leaves_no_temporary_folder():
    status, stdout, _stderr, _seconds = run_command(
        [sys.executable, "-c", PROBE], dict(os.environ), timeout=3
    )
    assert status is None
    made = Path(stdout.split()[0])
    assert made.name.startswith("gpuenv-ddp-") and not made.exists(), made
    assert not made.parent.exists(), "the probe's scratch folder was left"


def test_ctrl_c_during_a_probe_leaves_no_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the parent makes the probe's scratch folder
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        run_command([sys.executable, "-c", PROBE], dict(os.environ), timeout=60)
    timer.cancel()
    assert list(tmp_path.iterdir()) == [], "a temporary folder was left"
