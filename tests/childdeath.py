"""Servers a test starts die with the test run that started them: the kernel's parent-death signal
(prctl(2) PR_SET_PDEATHSIG), set in the child before it runs the server. A pytest killed mid-run
(SIGKILL, a cancelled CI job), which runs no cleanup, then leaves no munged, slurmd, sshd or
registry holding its port for every later run to meet (tests/fleet/test_slurm_daemons_die.py)."""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Callable

#: prctl(2) option: the signal the kernel sends this process when the thread that forked it ends.
PR_SET_PDEATHSIG = 1


def die_with(parent: int) -> Callable[[], None]:
    """preexec_fn for a server kept in the foreground under this process: the kernel sends it
    SIGKILL when this process ends, however it ends. `parent` closes the race of a parent that died
    before prctl ran (the child was then already adopted by init). The kernel watches the thread
    that started the server, not the process (prctl(2)): start it from the thread that keeps it
    (pytest's main thread, where fixtures run)."""

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")  # Popen raises it
        if os.getppid() != parent:
            os._exit(1)  # nobody is left to run it for

    return preexec
