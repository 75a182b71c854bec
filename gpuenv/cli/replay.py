"""`invoke validate --replay FILE` judged in this process, as `python -m validate --replay FILE`
would judge it in a new one.

A replay needs no GPU, no container and no environment of its own: a second interpreter would
only start Python and import the suite again (0.1 to 0.2 s of CPU, benchmarks/replay.py). What that
process gave the suite, this one gives it the same way:
- the same suite: only when a new `python -m validate` here would import the package this
  process imported (`suite_python_m_imports`), and not inside an image whose own suite the
  command would run instead (GPUENV_STACK_FILE); otherwise the subprocess stays;
- the same environment variables and working folder (this process's, which the child inherited),
  the same pytest plugins (pytest loads them from the same environment), output written straight
  to the same stdout and stderr;
- the same exit status (validate.cli.main's); sys.path and the environment put back after the
  suite's changes (pytest's insertions, the session's CUDA_DEVICE_ORDER), which ended with the
  child;
- the same ending signals: Ctrl-C stops pytest, which reports, then the task ends "interrupted"
  (130); SIGTERM and SIGHUP end the task as Terminated (143, 129) after pytest stops, as when the
  task killed its child; the suite's temporary JUnit file is never left behind.
"""

from __future__ import annotations

import os
import signal
import sys
import sysconfig
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any, Mapping

from gpuenv.cli.task import Terminated
from validate.signals import handling


def _resolved(origin: str | None) -> Path | None:
    return Path(origin).resolve() if origin else None


def suite_python_m_imports(cwd: Path, environ: Mapping[str, str]) -> Path | None:
    """The `validate/__init__.py` that `python -m validate` started in `cwd` with `environ` and
    this interpreter would import, or None when it would find none.

    Its sys.path is the current folder (unless PYTHONSAFEPATH), then PYTHONPATH, then this
    interpreter's own path from the standard library on: what this process has before that (its
    script's folder, the folder Invoke put first for tasks.py) a new Python would not have.
    After the path, the import hooks an install added (an editable install's finder).
    """
    path = [] if environ.get("PYTHONSAFEPATH") else [str(cwd)]
    path += [
        os.path.abspath(os.path.join(cwd, entry))
        for entry in environ.get("PYTHONPATH", "").split(os.pathsep)
        if entry
    ]
    stdlib = sysconfig.get_path("stdlib")
    own = [os.path.abspath(entry) for entry in sys.path]
    if stdlib not in own:
        return None  # this interpreter's path cannot be told apart: say none, the child decides
    path += own[own.index(stdlib) :]
    spec = PathFinder.find_spec("validate", path)
    if spec is None:
        for finder in sys.meta_path:
            if finder is PathFinder or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec("validate", None)
            if spec is not None:
                break
    return _resolved(spec.origin) if spec is not None else None


def judged_here(cwd: Path, environ: Mapping[str, str]) -> bool:
    """Whether a replay can be judged in this process: the suite a new `python -m validate` would
    run is the one imported here, in this environment."""
    import validate
    from validate.cli import image_suite

    if image_suite(environ.get("GPUENV_STACK_FILE")) is not None:
        return False  # inside an image: the command runs the image's own suite
    return suite_python_m_imports(cwd, environ) == _resolved(validate.__file__)


#: The signals that end a run from outside; each ends pytest's session (which reports) first.
ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def judge_replay_here(args: list[str]) -> int:
    """`python -m validate ARGS` (a --replay) run by the function that command runs
    (validate.cli.main), in this process: its exit status."""
    from validate.cli import main

    arrived: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        arrived.append(signum)
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)

    saved_path, saved_environ = list(sys.path), dict(os.environ)
    sys.stdout.flush()  # what this process printed comes first, as it did before a child's output
    try:
        with handling(ENDING, stop):
            code = main(args, own_sigterm=False)
    finally:
        sys.path[:] = saved_path  # pytest put the suite's root first
        if dict(os.environ) != saved_environ:  # the session set CUDA_DEVICE_ORDER for its checks
            os.environ.clear()
            os.environ.update(saved_environ)
    if arrived:  # pytest stopped and reported: now the task ends as the signal says
        raise KeyboardInterrupt if arrived[0] == signal.SIGINT else Terminated(arrived[0])
    return code
