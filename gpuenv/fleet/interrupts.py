"""Cleanup after Ctrl-C, SIGTERM or SIGHUP that a second one cannot cut short.

The fleet backends stop what they started (containers, Slurm jobs) after an interrupt; that
takes a few seconds, and an impatient second Ctrl-C must not turn it into a traceback with a
container left running. While `shielded()` is active, SIGINT, SIGTERM and SIGHUP are noted and a line
says the stop is under way; the first interrupt already decided how the run ends.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any, Iterator


@contextlib.contextmanager
def shielded(message: str = "gpuenv: stopping what was started; a few seconds more") -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP only print `message` (once) inside the block (a signal the
    program ignores stays ignored). Main thread only (where Python delivers signals); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    told = [False]

    def note(signum: int, frame: Any) -> None:
        if not told[0]:
            told[0] = True
            try:
                print(message, file=sys.stderr, flush=True)
            except OSError:  # the terminal is gone (SIGHUP): the cleanup goes on without the line
                pass

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
