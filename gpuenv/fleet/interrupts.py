"""The cleanup after Ctrl-C, SIGTERM or SIGHUP, made one that a second one cannot cut short
(`shielded`, on the product's one signal block, validate/signals.py::handling).

The fleet backends stop what they started (containers, Slurm jobs) after an interrupt; that
takes a few seconds, and an impatient second Ctrl-C must not turn it into a traceback with a
container left running. While `shielded()` is active, SIGINT, SIGTERM and SIGHUP are noted and a
line says the stop is under way; the first interrupt already decided how the run ends.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

from validate.signals import HELD_SIGNALS, handling


@contextlib.contextmanager
def shielded(
    message: str = "gpuenv: stopping what was started; a few seconds more",
) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP only print `message` (once) inside the block (a signal the
    program ignores stays ignored). Main thread only (where Python delivers signals); elsewhere a
    no-op."""
    told = [False]

    def note(signum: int, frame: Any) -> None:
        if not told[0]:
            told[0] = True
            try:
                print(message, file=sys.stderr, flush=True)
            except OSError:  # the terminal is gone (SIGHUP): the cleanup goes on without the line
                pass

    with handling(HELD_SIGNALS, note):
        yield
