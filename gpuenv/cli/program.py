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
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator, List, Optional

from invoke import Program
from invoke.exceptions import Exit, ParseError

from gpuenv import PROJECT_ROOT, __version__
from gpuenv.errors import EXIT_BAD_INPUT

_NEEDS_VALUE = re.compile(r"Flag <Argument: (?P<names>[^>]*)> needed value and was not given one!")


@contextlib.contextmanager
def _reader_gone_is_quiet() -> Iterator[None]:
    """The reader of stdout went away (`| head`): end with 0 and no traceback, as Unix tools do.

    stdout is pointed at /dev/null first, so Python's flush at exit cannot fail a second time."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise Exit(code=0) from None


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
def _parse_errors_are_bad_input(program: Any = None) -> Iterator[None]:
    from invoke.exceptions import CollectionNotFound

    try:
        yield
    except ParseError as err:
        line = parse_error_message(err)
        raise Exit(
            _with_hint(line, getattr(program, "argv", None) or sys.argv, program)
            if program
            else line,
            code=EXIT_BAD_INPUT,
        ) from None
    except (
        CollectionNotFound
    ) as err:  # `invoke -c 12.1 build`: -c before the task is Invoke's --collection
        line = f"gpuenv: no tasks collection named {err.name!r} (in {err.start})"
        raise Exit(
            _with_hint(line, getattr(program, "argv", None) or sys.argv, program)
            if program
            else line,
            code=EXIT_BAD_INPUT,
        ) from None


#: Invoke's core options that take a short flag gpuenv's tasks also use (SHORT_FLAGS): before the
#: task name they are Invoke's, after it the task's.
CORE_SHORT_FLAGS = {
    "-c": "--collection",
    "-f": "--config",
    "-p": "--pty",
    "-r": "--search-root",
    "-w": "--warn-only",
}


def short_flag_hint(
    argv: List[str], task_names: Any = (), core: dict[str, str] | None = None
) -> str:
    """When a task's short flag came before the task name (`gpuenv -f torch resolve`), what it meant
    there.

    Empty when there is nothing to say. Pure: tested on argv lists.
    """
    from gpuenv.cli.task import SHORT_FLAGS

    ours = {
        f"-{flag}": f"--{name.rstrip('_').replace('_', '-')}" for name, flag in SHORT_FLAGS.items()
    }
    core = CORE_SHORT_FLAGS if core is None else core
    names = set(task_names)
    words = argv[1:]
    for at, word in enumerate(words):
        if word in names or not word.startswith("-"):
            if word in names:
                break
            continue
        flag = word.split("=", 1)[0]
        value = (
            word.split("=", 1)[1] if "=" in word else (words[at + 1] if at + 1 < len(words) else "")
        )
        if flag == "-f" and value.lower().endswith((".yaml", ".yml", ".json")):
            continue  # a config file, meant as one: its own error says what is wrong with it
        if flag in ours:
            if flag in core:
                return (
                    f"before the task name {flag} is Invoke's {core[flag]}, not {ours[flag]}: "
                    "task options go after the task name"
                )
            return f"{flag} ({ours[flag]}) is a task option: it goes after the task name"
    return ""


def _with_hint(line: str, argv: List[str], program: Any) -> str:
    collection = getattr(program, "collection", None) or getattr(program, "namespace", None)
    names = list(getattr(collection, "task_names", {}) or ()) if collection is not None else []
    core = None
    try:
        core = {
            f"-{n}": f"--{arg.name}"
            for arg in program.core_args()
            for n in arg.names
            if len(n) == 1
        }
    except Exception:  # noqa: BLE001 (a hint never costs the error its line)
        core = None
    hint = short_flag_hint(list(argv or sys.argv), names, core)
    return f"{line} ({hint})" if hint else line


class ParseErrorsAreBadInput(Program):
    """Invoke's Program whose parse errors, and config files it cannot use, exit 2 with one line."""

    def create_config(self) -> None:
        # where Invoke reads /etc/invoke.yaml and ~/.invoke.yaml
        with _config_problems_are_bad_input(self):
            super().create_config()

    def parse_core(self, argv: Optional[List[str]]) -> None:
        with _parse_errors_are_bad_input(self):
            super().parse_core(argv)

    def parse_collection(self) -> None:
        with _parse_errors_are_bad_input(self), _config_problems_are_bad_input(self):
            super().parse_collection()

    def parse_tasks(self) -> None:
        with _parse_errors_are_bad_input(self):
            super().parse_tasks()

    def parse_cleanup(self) -> None:
        # where Invoke prints --list and --help: `invoke --list | head` closes the pipe early
        with _parse_errors_are_bad_input(self), _reader_gone_is_quiet():
            super().parse_cleanup()

    def update_config(self, merge: bool = True) -> None:
        # where Invoke loads a `-f FILE` (runtime) config
        with _config_problems_are_bad_input(self):
            super().update_config(merge)

    def execute(self) -> None:
        # where Invoke reads the INVOKE_* variables (GpuenvConfig.load_shell_env)
        with _config_problems_are_bad_input(self):
            super().execute()


@contextlib.contextmanager
def _config_problems_are_bad_input(program: Any = None) -> Iterator[None]:
    try:
        yield
    except Exit:
        raise
    except (
        Exception
    ) as err:  # YAML errors, Invoke's merge errors: anything config_file_problem names
        problem = config_file_problem(err)
        if problem is None:
            raise
        line = f"gpuenv: {problem}"
        raise Exit(
            _with_hint(line, getattr(program, "argv", None) or sys.argv, program)
            if program
            else line,
            code=EXIT_BAD_INPUT,
        ) from None


def check_project_config(folder: Path) -> None:
    """One line and exit 2 for a project invoke.yaml that cannot be used (bad YAML, too big, ...).

    Invoke loads the project config right after importing tasks.py, from code gpuenv cannot
    wrap, so tasks.py asks this first: a broken team file must not end in a traceback.
    """
    from gpuenv.cli.configfiles import check_project_file

    with _config_problems_are_bad_input():
        check_project_file(folder)


def adopt_running_invoke() -> None:
    """Give the running `invoke` command (invoke.main.program) GpuenvProgram's parse errors and
    bounded config files (the project file and `-f`, which Invoke reads after tasks.py).

    Only that exact Program instance is changed, and only when it is a plain Program: a
    subclass (another tool embedding Invoke) is left alone.
    """
    from invoke.config import Config

    from gpuenv.cli.configfiles import GpuenvConfig

    main = sys.modules.get("invoke.main")
    program = getattr(main, "program", None)
    if type(program) is Program:
        program.__class__ = ParseErrorsAreBadInput
        if type(getattr(program, "config", None)) is Config:
            program.config.__class__ = GpuenvConfig


CONFIG_NAMES = ("invoke.yaml", "invoke.yml", "invoke.json")


def project_dir(start: Path) -> Path | None:
    """The nearest folder, from `start` up, holding an Invoke project config; else gpuenv's
    checkout."""
    for folder in (start, *start.parents):
        if any((folder / name).is_file() for name in CONFIG_NAMES):
            return folder
    if any((PROJECT_ROOT / name).is_file() for name in CONFIG_NAMES):
        return PROJECT_ROOT
    return None


class GpuenvProgram(ParseErrorsAreBadInput):
    """The `gpuenv` command: gpuenv's namespace, the team's invoke.yaml, parse errors exit 2."""

    def parse_core(self, argv: Optional[List[str]]) -> None:
        super().parse_core(argv)
        # Invoke has just turned off writing .pyc files (unless --write-pyc): the modules a task
        # imports are cached as Python caches any package's, unless -B or PYTHONDONTWRITEBYTECODE
        # says not to (as tasks.py does for `invoke`)
        sys.dont_write_bytecode = sys.dont_write_bytecode and bool(sys.flags.dont_write_bytecode)

    def parse_collection(self) -> None:
        super().parse_collection()
        folder = project_dir(Path.cwd())
        if folder is not None:
            with _config_problems_are_bad_input(self):
                self.config.set_project_location(str(folder))
                self.config.load_project()


def config_file_problem(err: BaseException) -> str | None:
    """One line for a config file Invoke could not load (bad YAML, a value where a section goes)."""
    from invoke.config import AmbiguousMergeError
    from invoke.exceptions import UnknownFileType

    from gpuenv.errors import GpuenvError

    if isinstance(err, GpuenvError):
        return err.render()
    if isinstance(err, UnknownFileType):
        return f"{err}".split("!")[0] + ": give a .yaml, .yml or .json file"
    mark = getattr(err, "problem_mark", None)
    if mark is not None and hasattr(
        err, "problem"
    ):  # yaml.MarkedYAMLError, Invoke's vendored copy or not
        return (
            f"{mark.name}:{mark.line + 1}: not valid YAML ({err.problem}): fix the file (see the "
            "committed invoke.yaml)"
        )
    if isinstance(err, AmbiguousMergeError):
        return (
            "a config file sets a section (`gpuenv:`, `gpuenv.fleet:` or `gpuenv.fleet.slurm:`) "
            "to a single value: write it as indented `key: value` lines (see the committed "
            "invoke.yaml)"
        )
    return None


def main() -> None:
    import gc
    import os
    import sys

    gc.freeze()  # as tasks.py: what is loaded so far lives as long as the command
    from gpuenv.cli import namespace

    try:
        from gpuenv.cli.configfiles import GpuenvConfig

        GpuenvProgram(
            name="gpuenv",
            binary="gpuenv",
            version=__version__,
            namespace=namespace(),
            config_class=GpuenvConfig,
        ).run()
    except BrokenPipeError:  # before `except Exception`, which would catch it first
        # `gpuenv --list | head`: the reader went away; stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as err:
        problem = config_file_problem(err)
        if problem is None:
            raise
        from gpuenv.cli.output import show

        show(f"gpuenv: {problem}", file=sys.stderr)
        sys.exit(2)  # bad input, as every task's one-line errors


if __name__ == "__main__":
    main()
