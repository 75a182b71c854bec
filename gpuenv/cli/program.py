"""Invoke's Program for gpuenv: the `gpuenv` console command, and parse errors as bad input.

`gpuenv build --cuda 12.1` is `invoke build --cuda 12.1` without needing tasks.py in the current
folder. The project config (invoke.yaml with the team's `gpuenv:` section) is the nearest one in
this folder or above it, else the one beside the gpuenv checkout.

Invoke exits 1 on its own parse errors (an unknown option or task, a flag without its value),
which CI cannot tell from a failed check. `GpuenvProgram` maps them to exit 2, like every other
bad input of gpuenv. The plain `invoke` command has already started when it loads tasks.py, so
`adopt_running_invoke` gives that running Program the same behaviour for the parsing still ahead
of it (the task's options).
"""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path
from typing import Iterator, List, Optional

from invoke import Program
from invoke.exceptions import Exit, ParseError

from gpuenv import PROJECT_ROOT, __version__
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


class ParseErrorsAreBadInput(Program):
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

    def update_config(self, merge: bool = True) -> None:
        # where Invoke loads a `-f FILE` (runtime) config
        with _config_problems_are_bad_input():
            super().update_config(merge)


@contextlib.contextmanager
def _config_problems_are_bad_input() -> Iterator[None]:
    try:
        yield
    except Exception as err:  # YAML errors, Invoke's merge errors: anything config_file_problem names
        problem = config_file_problem(err)
        if problem is None:
            raise
        raise Exit(f"gpuenv: {problem}", code=EXIT_BAD_INPUT) from None


def check_project_config(folder: Path) -> None:
    """One line and exit 2 for a project invoke.yaml that is not valid YAML.

    Invoke loads the project config right after importing tasks.py, from code gpuenv cannot
    wrap, so tasks.py asks this first: a broken team file must not end in a traceback.
    """
    import yaml

    for name in ("invoke.yaml", "invoke.yml"):
        path = folder / name
        if path.is_file():
            with _config_problems_are_bad_input(), open(path, encoding="utf-8", errors="replace") as stream:
                yaml.safe_load(stream)  # a stream, so the error names the file


def adopt_running_invoke() -> None:
    """Give the running `invoke` command (invoke.main.program) GpuenvProgram's parse errors.

    Only that exact Program instance is changed, and only when it is a plain Program: a
    subclass (another tool embedding Invoke) is left alone.
    """
    main = sys.modules.get("invoke.main")
    program = getattr(main, "program", None)
    if type(program) is Program:
        program.__class__ = ParseErrorsAreBadInput

CONFIG_NAMES = ("invoke.yaml", "invoke.yml", "invoke.json")


def project_dir(start: Path) -> Path | None:
    """The nearest folder, from `start` up, holding an Invoke project config; else gpuenv's checkout."""
    for folder in (start, *start.parents):
        if any((folder / name).is_file() for name in CONFIG_NAMES):
            return folder
    if any((PROJECT_ROOT / name).is_file() for name in CONFIG_NAMES):
        return PROJECT_ROOT
    return None


class GpuenvProgram(ParseErrorsAreBadInput):
    """The `gpuenv` command: gpuenv's namespace, the team's invoke.yaml, parse errors exit 2."""

    def parse_collection(self) -> None:
        super().parse_collection()
        folder = project_dir(Path.cwd())
        if folder is not None:
            self.config.set_project_location(str(folder))
            self.config.load_project()


def config_file_problem(err: BaseException) -> str | None:
    """One line for a config file Invoke could not load (bad YAML, a value where a section goes)."""
    from invoke.config import AmbiguousMergeError

    mark = getattr(err, "problem_mark", None)
    if mark is not None and hasattr(err, "problem"):  # yaml.MarkedYAMLError, Invoke's vendored copy or not
        return f"{mark.name}:{mark.line + 1}: not valid YAML ({err.problem}): fix the file (see the committed invoke.yaml)"
    if isinstance(err, AmbiguousMergeError):
        return ("a config file sets a section (`gpuenv:`, `gpuenv.fleet:` or `gpuenv.fleet.slurm:`) to a single value: "
                "write it as indented `key: value` lines (see the committed invoke.yaml)")
    return None


def main() -> None:
    import os
    import sys

    from gpuenv.cli import namespace

    try:
        GpuenvProgram(name="gpuenv", binary="gpuenv", version=__version__, namespace=namespace()).run()
    except Exception as err:
        problem = config_file_problem(err)
        if problem is None:
            raise
        print(f"gpuenv: {problem}", file=sys.stderr)
        sys.exit(2)  # bad input, as every task's one-line errors
    except BrokenPipeError:
        # `gpuenv --list | head`: the reader went away; stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


if __name__ == "__main__":
    main()
