"""Signals during a block of work, the one way the product sets handlers: `handling` installs a
handler for a few signals and puts the previous ones back; `held_signals` holds the signals that
end a run while a few steps must finish together, and `deliver` hands them on afterwards.

In validate/'s ground because the suite's atomic swaps use it where only this folder is copied;
gpuenv's fleet (a cleanup a second Ctrl-C cannot cut short), its tasks (SIGTERM read as Ctrl-C)
and its installs use the same block.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

Handler = Callable[[int, Any], None]

#: The signals that end a run from outside (Ctrl-C, kill, a closed terminal).
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def handling(signums: Iterable[int], handler: Handler) -> Iterator[None]:
    """`handler` for each of `signums` inside the block, the previous handlers back after it.

    A signal the program was started ignoring (nohup, a background job) stays ignored: handling
    it would revive it. Main thread only (the only one Python lets set handlers, and where it
    delivers signals); elsewhere a no-op.
    """
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
            # None: a handler set outside Python, which cannot be put back; the default is nearest
            signal.signal(signum, before if before is not None else signal.SIG_DFL)


@contextmanager
def held_signals() -> Iterator[list[int]]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while a few steps must finish together (a swap and its
    cleanup); yields the list of those that arrived, for the caller to act on afterwards.

    Python runs signal handlers between bytecodes, so an interrupt could otherwise land between
    two renames, or halfway through removing the old folder, and leave it behind. Outside the
    main thread nothing is held (see `handling`).
    """
    arrived: list[int] = []
    with handling(HELD_SIGNALS, lambda signum, _frame: arrived.append(signum)):
        yield arrived


def deliver(signums: list[int]) -> None:
    """Deliver held signals now, to the handlers the program had (KeyboardInterrupt for Ctrl-C)."""
    for signum in dict.fromkeys(signums):
        signal.raise_signal(signum)
