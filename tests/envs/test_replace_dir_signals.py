"""validate.writing.replace_dir under Ctrl-C and SIGTERM: an interrupt that lands during the swap
waits until the new folder is in place and the old one is gone, then is delivered. The signals
are sent by watching the file system for the old folder renamed aside (the swap under way)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

_SWAP = """
import signal, sys
from pathlib import Path
from validate.writing import replace_dir

class Terminated(BaseException):
    pass

def on_term(signum, frame):
    raise Terminated()

signal.signal(signal.SIGTERM, on_term)
root = Path(sys.argv[1])
try:
    replace_dir(root / "new", root / "target")
except KeyboardInterrupt:
    print("interrupted after the swap", flush=True)
    sys.exit(130)
except Terminated:
    print("terminated after the swap", flush=True)
    sys.exit(143)
print("no signal arrived", flush=True)
"""


def _folder_of_files(folder: Path, count: int, text: str) -> None:
    for i in range(count):
        sub = folder / f"d{i % 50}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}").write_text(text)


@pytest.mark.parametrize(
    "signum, code, words",
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_an_interrupt_during_the_swap_waits_for_it_and_leaves_no_old_folder(
    tmp_path, signum, code, words
):
    _folder_of_files(
        tmp_path / "target", 12_000, "old\n"
    )  # its removal is the window the signal lands in
    _folder_of_files(tmp_path / "new", 10, "new\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SWAP, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if any(".old-" in name for name in os.listdir(tmp_path)):
            proc.send_signal(signum)
            seen = True
            break
    out, err = proc.communicate(timeout=60)
    assert seen, f"the swap ended before its old folder was seen (raise the file count): {out}{err}"
    assert proc.returncode == code, out + err
    assert f"{words} after the swap" in out and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["target"], (
        "an .old folder (or the new one) was left beside the target"
    )
    assert (tmp_path / "target" / "d0" / "f0").read_text() == "new\n"


def test_a_swap_without_signals_returns_none_held(tmp_path):
    from validate.writing import replace_dir

    _folder_of_files(tmp_path / "target", 3, "old\n")
    _folder_of_files(tmp_path / "new", 3, "new\n")
    assert replace_dir(tmp_path / "new", tmp_path / "target", redeliver=False) == []
    assert (
        sorted(os.listdir(tmp_path)) == ["target"]
        and (tmp_path / "target" / "d0" / "f0").read_text() == "new\n"
    )
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, (
        "the program's own handler is back"
    )


def test_a_signal_the_program_ignores_stays_ignored(tmp_path):
    """nohup makes SIGHUP ignored: holding it during a swap must not turn it into a delivery."""
    from validate.signals import held_signals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with held_signals() as arrived:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
        assert arrived == [] and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
