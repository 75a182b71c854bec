"""Signals during a block of work: `handling` installs a handler for a few signals and puts the
previous ones back (the task layer's SIGTERM-as-Ctrl-C uses it too), and `shielded` makes the
cleanup after Ctrl-C, SIGTERM or SIGHUP one that a second one cannot cut short.

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
from typing import Any, Callable, Iterable, Iterator

Handler = Callable[[int, Any], None]


@contextlib.contextmanager
def handling(signums: Iterable[int], handler: Handler) -> Iterator[None]:
    """`handler` for each of `signums` inside the block, the previous handlers back after it. A
    signal the program was started ignoring (nohup) stays ignored. Main thread only (the only one
    Python lets set handlers, and where it delivers signals); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        signum: signal.signal(signum, handler)
        for signum in signums
        if signal.getsignal(signum) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(
                signum, before if before is not None else signal.SIG_DFL
            )  # None: set outside Python; the default is closest


@contextlib.contextmanager
def shielded(
    message: str = "gpuenv: stopping what was started; a few seconds more",
) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP only print `message` (once) inside the block (a signal the
    program ignores stays ignored). Main thread only (where Python delivers signals); elsewhere a no-op."""
    told = [False]

    def note(signum: int, frame: Any) -> None:
        if not told[0]:
            told[0] = True
            try:
                print(message, file=sys.stderr, flush=True)
            except OSError:  # the terminal is gone (SIGHUP): the cleanup goes on without the line
                pass

    with handling((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), note):
        yield
