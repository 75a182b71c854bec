"""Invoke's Program, with a command line it cannot parse treated as bad input: one line, exit 2.

Invoke exits 1 on its own parse errors (an unknown option or task, a flag without its value),
which CI cannot tell from a failed check. `GpuenvProgram` maps them to exit 2, like every other
bad input of gpuenv; a console command built on Invoke's Program can use it as it is. The plain
`invoke` command has already started when it loads tasks.py, so `adopt_running_invoke` gives
that running Program the same behaviour for the parsing still ahead of it (the task's options).
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Iterator, List, Optional

from invoke import Program
from invoke.exceptions import Exit, ParseError

from gpuenv.errors import EXIT_BAD_INPUT

_NEEDS_VALUE = re.compile(r"Flag <Argument: (?P<names>[^>]*)> needed value and was not given one!")


def parse_error_message(err: ParseError) -> str:
    """Invoke's parse error as gpuenv's one line, naming the option and where help is."""
    text = str(err)
    match = _NEEDS_VALUE.fullmatch(text)
    if match:
        name = match.group("names").split(" (")[0].strip().replace("_", "-")
        text = f"--{name} needs a value"
    task = getattr(getattr(err, "context", None), "name", None)
    where = f"invoke {task} --help" if task else "invoke --list"
    return f"gpuenv: {text.rstrip('!')}: see `{where}`"


@contextlib.contextmanager
def _parse_errors_are_bad_input() -> Iterator[None]:
    try:
        yield
    except ParseError as err:
        raise Exit(parse_error_message(err), code=EXIT_BAD_INPUT) from None


class GpuenvProgram(Program):
    """Invoke's Program whose parse errors exit 2 with one line."""

    def parse_core(self, argv: Optional[List[str]]) -> None:
        with _parse_errors_are_bad_input():
            super().parse_core(argv)

    def parse_tasks(self) -> None:
        with _parse_errors_are_bad_input():
            super().parse_tasks()

    def parse_cleanup(self) -> None:
        with _parse_errors_are_bad_input():
            super().parse_cleanup()


def adopt_running_invoke() -> None:
    """Give the running `invoke` command (invoke.main.program) GpuenvProgram's parse errors.

    Only that exact Program instance is changed, and only when it is a plain Program: a
    subclass (another tool embedding Invoke) is left alone.
    """
    main = sys.modules.get("invoke.main")
    program = getattr(main, "program", None)
    if type(program) is Program:
        program.__class__ = GpuenvProgram
